"""Dataset sources: materialise a dataset once from a local path, a URL, an SQL query or a script.

``materialize(request, dest)`` writes the dataset into a fresh temp directory beside ``dest`` and renames it to
``dest`` only when everything succeeded; on any failure the temp directory is removed and nothing that existed
is touched. The result lists the files with their sha256, the content version (``content_version``: the same
data gives the same version, whatever the source) and one line of lineage with any password masked.

Every failure a user can fix is a ``SourceError`` naming the spec field and the fix. The optional libraries
(httpx, fsspec, SQLAlchemy, pyarrow, psycopg) are imported only when a source needs them, so this module imports
without the ``data`` extra. See docs/datasources.md.
"""

from __future__ import annotations

from pathlib import Path

from phalanx.adapters.datasources._types import (
    FIELD_LEAVES,
    DataFile,
    Materialized,
    SourceError,
    SourceKind,
    SourceRequest,
    field_of,
)
from phalanx.adapters.datasources.hashing import content_version, version_of
from phalanx.adapters.datasources.paths import mask_url
from phalanx.adapters.datasources.staging import (
    Progress,
    WriteBudget,
    disk_full_error,
    is_disk_full,
    make_staging_dir,
    publish,
    remove_tree,
)
from phalanx.adapters.lazy_imports import serially

__all__ = [
    "FIELD_LEAVES",
    "DataFile",
    "Materialized",
    "SourceError",
    "SourceKind",
    "SourceRequest",
    "content_version",
    "mask_url",
    "materialize",
    "version_of",
]


def _fill(
    request: SourceRequest,
    staging: Path,
    *,
    base_dir: Path | None,
    budget: WriteBudget,
    progress: Progress | None,
    timeout_s: float,
) -> str:
    if request.kind == "path":
        with serially():  # the source's libraries (fsspec, httpx, SQLAlchemy…) load one thread at a time
            from phalanx.adapters.datasources.files import copy_path

        return copy_path(request, staging, base_dir=base_dir, budget=budget, progress=progress)
    if request.kind == "url":
        with serially():
            from phalanx.adapters.datasources.remote import fetch_url

        return fetch_url(request, staging, budget=budget, progress=progress, timeout_s=timeout_s)
    if request.kind == "sql":
        with serially():
            from phalanx.adapters.datasources.sql import query_to_parquet

        return query_to_parquet(
            request, staging, base_dir=base_dir, budget=budget, progress=progress, timeout_s=timeout_s
        )
    if request.kind == "script":
        with serially():
            from phalanx.adapters.datasources.script import run_script

        return run_script(request, staging, base_dir=base_dir, budget=budget, progress=progress, timeout_s=timeout_s)
    raise SourceError(field_of(request), f"unknown source kind {request.kind!r}; use path, url, sql or script")


def materialize(
    request: SourceRequest,
    dest: Path,
    *,
    base_dir: Path | None = None,
    progress: Progress | None = None,
    timeout_s: float = 60.0,
    max_bytes: int | None = None,
) -> Materialized:
    """Write the dataset ``request`` describes to ``dest`` (which must not exist) and describe what was written.

    Args:
        request: the source.
        dest: the dataset's directory; created by renaming a temp directory beside it, so only on success.
        base_dir: what relative local paths (path sources, SQLite files, script arguments) are relative to;
            the current directory when None.
        progress: called with ``(bytes done, total bytes or None)`` as data is written.
        timeout_s: network timeout for url and sql sources (connect, and each read for http); the wall-clock limit
            for a script.
        max_bytes: the most bytes the dataset may take; writing past it fails exactly as a full disk does
            (``ENOSPC``). The test seam for disk-full handling, and a cap for a cache with a size limit.

    Returns:
        The files (sorted by path), their total size, the content version and the lineage line.

    Raises:
        SourceError: the source is unreachable or wrong, the disk is full, or ``dest`` exists already.
    """
    dest = Path(dest)
    base_field = field_of(request)
    if dest.exists() or dest.is_symlink():
        raise SourceError(base_field, f"{dest} exists already; a dataset is materialised once, into a new directory")
    staging = make_staging_dir(dest, base_field)
    budget = WriteBudget(max_bytes)
    done = False
    try:
        lineage = _fill(request, staging, base_dir=base_dir, budget=budget, progress=progress, timeout_s=timeout_s)
        files, version = content_version(staging)
        publish(staging, dest, base_field)
        done = True
    except SourceError:
        raise
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(base_field, dest.parent, exc) from exc
        raise SourceError(
            base_field,
            f"writing the dataset under {dest.parent} failed ({exc}): check the directory and its permissions",
        ) from exc
    except Exception as exc:
        if is_disk_full(exc):
            raise disk_full_error(base_field, dest.parent, exc) from exc
        raise
    finally:
        if not done:
            remove_tree(staging)
    return Materialized(files=files, bytes=sum(f.bytes for f in files), version=version, lineage=lineage)
