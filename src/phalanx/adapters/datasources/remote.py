"""Remote sources: http(s) streamed through httpx, every other scheme through fsspec.

An http(s) download is stored under the last segment of the URL's path (``data`` when there is none) and
reported to ``progress(done, total)`` as it streams (``total`` is None without a Content-Length). An fsspec URL
names one object (stored under its base name) or a prefix/directory (its tree is copied).
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from phalanx.adapters.datasources._types import SourceError, SourceRequest, field_of
from phalanx.adapters.datasources.hashing import CHUNK
from phalanx.adapters.datasources.paths import mask_url, reject_parent_reference, safe_relative, url_file_name
from phalanx.adapters.datasources.staging import Progress, WriteBudget, write_stream

#: fsspec schemes whose implementation ships in a Phalanx extra.
SCHEME_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs"}

DATA_EXTRA = "pip install 'phalanx[data]'"


def _missing_library(field: str, library: str) -> SourceError:
    return SourceError(field, f"this source needs the {library} library, which is not installed: {DATA_EXTRA}")


def _ensure_free(staging: Path, total: int | None, budget: WriteBudget) -> None:
    if total is None:
        return
    budget.check_total(total)
    free = shutil.disk_usage(staging).free
    if total > free:
        raise OSError(errno.ENOSPC, f"No space left on device ({total} bytes needed, {free} free)")


def fetch_url(
    request: SourceRequest,
    staging: Path,
    *,
    budget: WriteBudget,
    progress: Progress | None,
    timeout_s: float,
) -> str:
    """Download the URL of ``request`` into ``staging``; returns the lineage line."""
    field = field_of(request, "url")
    url = (request.url or "").strip()
    if not url:
        raise SourceError(field, "a url source needs a URL, e.g. https://host/data.csv or s3://bucket/prefix/")
    parts = urlsplit(url)
    if not parts.scheme or len(parts.scheme) == 1:
        raise SourceError(field, f"{url!r} has no scheme; write https://…, s3://…, gs://… (or use a local path)")
    reject_parent_reference(parts.path, field, "the URL path")
    if parts.scheme in {"http", "https"}:
        return _fetch_http(url, field, staging, budget=budget, progress=progress, timeout_s=timeout_s)
    return _fetch_fsspec(url, field, staging, budget=budget, progress=progress)


def _fetch_http(
    url: str, field: str, staging: Path, *, budget: WriteBudget, progress: Progress | None, timeout_s: float
) -> str:
    try:
        import httpx
    except ImportError as exc:
        raise _missing_library(field, "httpx") from exc
    shown = mask_url(url)
    name = url_file_name(url, field)
    try:
        with (
            httpx.Client(timeout=timeout_s, follow_redirects=True) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code >= 400:
                hint = (
                    "check the credentials"
                    if response.status_code in {401, 403}
                    else "check the URL and that the file is published"
                )
                raise SourceError(
                    field, f"GET {shown} answered {response.status_code} {response.reason_phrase}: {hint}"
                )
            length = response.headers.get("content-length")
            total = int(length) if length and length.isdigit() and "content-encoding" not in response.headers else None
            _ensure_free(staging, total, budget)
            if progress is not None:
                progress(0, total)
            write_stream(response.iter_bytes(CHUNK), staging / name, budget, progress=progress, total=total)
            etag = response.headers.get("etag")
    except httpx.TimeoutException as exc:
        raise SourceError(
            field, f"no answer from {shown} within {timeout_s:g}s: check the URL and the network, or raise the timeout"
        ) from exc
    except httpx.ConnectError as exc:
        host = urlsplit(url).netloc.rsplit("@", 1)[-1]
        raise SourceError(
            field, f"cannot connect to {host} ({exc}): check the URL and that the server is up and reachable"
        ) from exc
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise SourceError(field, f"{shown} is not a valid URL ({exc}); write it as https://host/path") from exc
    except httpx.HTTPError as exc:
        raise SourceError(field, f"downloading {shown} failed ({exc}): check the URL and try again") from exc
    if etag:
        return f"url: {shown} (etag {etag.removeprefix('W/')})"
    return f"url: {shown}"


def _open_fs(url: str, field: str) -> tuple[Any, str]:
    try:
        import fsspec  # type: ignore[import-untyped]
    except ImportError as exc:
        raise _missing_library(field, "fsspec") from exc
    scheme = urlsplit(url).scheme
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as exc:
        extra = SCHEME_EXTRAS.get(scheme)
        fix = f"pip install 'phalanx[{extra}]'" if extra else f"install the fsspec implementation for {scheme}://"
        raise SourceError(field, f"{scheme}:// needs a library that is not installed ({exc}): {fix}") from exc
    except ValueError as exc:
        raise SourceError(
            field, f"unknown URL scheme {scheme}:// ({exc}); use http(s), s3, gs, file, or an installed fsspec scheme"
        ) from exc
    return fs, str(path)


def _fs_chunks(fs: Any, path: str) -> Iterator[bytes]:
    with fs.open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            yield chunk


def _fetch_fsspec(url: str, field: str, staging: Path, *, budget: WriteBudget, progress: Progress | None) -> str:
    shown = mask_url(url)
    fs, root = _open_fs(url, field)
    try:
        info = fs.info(root)
    except FileNotFoundError as exc:
        raise SourceError(field, f"{shown} does not exist; check the bucket and path") from exc
    except (OSError, PermissionError) as exc:
        raise SourceError(field, f"cannot read {shown} ({exc}): check the URL and the credentials") from exc
    try:
        if info.get("type") == "directory":
            found = fs.find(root, detail=True)
            prefix = root.rstrip("/") + "/"
            planned: list[tuple[str, str, int | None]] = []
            for path, meta in sorted(found.items()):
                if meta.get("type") == "directory":
                    continue
                rel = path[len(prefix) :] if path.startswith(prefix) else path.rsplit("/", 1)[-1]
                planned.append((safe_relative(rel, field), path, meta.get("size")))
            if not planned:
                raise SourceError(field, f"{shown} holds no files; put the dataset's files under it")
        else:
            name = url_file_name(url, field)
            planned = [(name, root, info.get("size"))]
        sizes = [size for _, _, size in planned]
        total = sum(int(s) for s in sizes if s is not None) if all(s is not None for s in sizes) else None
        _ensure_free(staging, total, budget)
        done = 0
        for rel, path, _ in planned:
            done = write_stream(_fs_chunks(fs, path), staging / rel, budget, progress=progress, total=total, done=done)
    except SourceError:
        raise
    except FileNotFoundError as exc:
        raise SourceError(field, f"{shown} vanished while it was read ({exc}); try again") from exc
    except OSError as exc:
        if exc.errno in {errno.ENOSPC, errno.EDQUOT}:
            raise
        raise SourceError(field, f"reading {shown} failed ({exc}): check the URL and the credentials") from exc
    if len(planned) > 1 or info.get("type") == "directory":
        count = len(planned)
        return f"url: {shown} ({count} file{'s' if count != 1 else ''})"
    etag = info.get("ETag") or info.get("etag")
    return f"url: {shown} (etag {etag})" if etag else f"url: {shown}"
