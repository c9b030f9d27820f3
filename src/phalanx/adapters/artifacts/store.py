"""Where a pipeline's artifacts live, what their contents digest to, and the step cache index: local or fsspec.

Layout under the store's root (a local directory, or an object store URL):

- ``_runs/<namespace>/<run>/<run uid[:8]>/<step>/<item or "all">/a<attempt>/inputs`` and ``.../outputs``: one
  folder per attempt of a step instance, so a retry never reads what a failed attempt left half-written. A
  component's output NAME is ``outputs/<NAME as a file name>/data`` (KFP v1's layout); a trainingJob step's is
  ``outputs/<NAME>`` (``$PHALANX_OUTPUTS/NAME``).
- ``_cache/<key>.json``: the outputs (values, locations, digests) of a finished instance under its cache key
  (``core.pipelines.cache``), written once the outputs are complete and in one step (a local file is written
  aside and renamed into place; an object store writes an object whole), so a reader sees all of it or nothing.

The leading ``_`` keeps these apart from what else shares the folder: the embedded runtime stores a job's own
outputs in ``<state dir>/artifacts/<namespace>/<job>``, and a namespace (a DNS label) never starts with ``_``.

A step's process needs local paths. With a local store they are the store's own folders: a step reads its
inputs where the producer wrote them, and nothing is copied. With an object store, an instance's folder is
staged: inputs are downloaded into a local staging folder before the step starts, and its outputs are uploaded
after it succeeded (``publish``). Digests are taken of local files (``local_tree_digest``: sha256 per file,
combined by ``core.pipelines.cache.tree_digest``), before any upload.

fsspec is imported only for a URL store (the ``data`` extra); a local store needs nothing beyond the standard
library.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from phalanx.core.pipelines.cache import tree_digest
from phalanx.core.pipelines.plan import CachedResult, OutputValue

_CHUNK = 1 << 20
_RUNS = "_runs"
_CACHE = "_cache"


class ArtifactStoreError(Exception):
    """The store cannot be used as asked (a missing extra, an unreadable artifact): one sentence saying why."""


@dataclass(frozen=True, slots=True)
class InstanceFolder:
    """One attempt of one step instance: its folder in the store and the local folder its process uses.

    For a local store both are the same directory.
    """

    location: str
    local: Path

    @property
    def inputs(self) -> Path:
        """Where staged inputs and value files go."""
        return self.local / "inputs"

    @property
    def outputs(self) -> Path:
        """Where the process writes its outputs (``$PHALANX_OUTPUTS``)."""
        return self.local / "outputs"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _link_or_copy(source: str, target: str) -> None:
    """A hard link (instant, no space: a cached artifact can be large), or a copy across file systems."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(target)  # a copy interrupted earlier: replaced whole
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def local_tree_digest(path: Path) -> str | None:
    """The content digest of a local file or folder (its regular files; links are not followed), or None if absent.

    A single file is the tree of one file named ``""`` (``tree_digest``); a folder's files count by their path
    relative to it, so the same bytes anywhere give the same digest.
    """
    if path.is_symlink():
        return None
    if path.is_file():
        return tree_digest([("", _sha256(path))])
    if not path.is_dir():
        return None
    files: list[tuple[str, str]] = []
    for folder, dirs, names in os.walk(path):
        dirs.sort()
        for name in names:
            full = Path(folder, name)
            if full.is_file() and not full.is_symlink():
                files.append((full.relative_to(path).as_posix(), _sha256(full)))
    return tree_digest(files)


class ArtifactStore:
    """The artifact store of a control plane: a local directory or an fsspec URL.

    Args:
        url: a local path (or ``file://`` URL), or an object store URL such as ``s3://bucket/prefix``.
        staging: the local folder instances of a URL store are staged in (a temporary folder when not given).
    """

    def __init__(self, url: str | Path, *, staging: Path | None = None) -> None:
        text = os.fspath(url)
        if text.startswith("file://"):
            text = text.removeprefix("file://")
        self.url = text.rstrip("/") or "/"
        self.is_local = "://" not in self.url
        self._fs: Any = None
        if self.is_local:
            self.root = Path(self.url).expanduser().absolute()
            self._staging = self.root
        else:
            self._fs = _filesystem(self.url)
            self.root = Path(staging) if staging is not None else Path(tempfile.mkdtemp(prefix="phalanx-artifacts-"))
            self._staging = self.root

    # -- instances ---------------------------------------------------------------------------------------------

    def instance(
        self, namespace: str, run: str, run_uid: str, step: str, item: int | None, attempt: int
    ) -> InstanceFolder:
        """The folder of one attempt of ``step`` (``item`` of a fanned-out one) of a run."""
        relative = PurePosixPath(
            _RUNS, namespace, run, run_uid[:8], step, "all" if item is None else str(item), f"a{attempt}"
        )
        return InstanceFolder(self._location(relative), self._staging / relative)

    def prepare(self, folder: InstanceFolder) -> None:
        """Make the instance's local inputs and outputs folders (kept if they exist: its process may be running)."""
        folder.inputs.mkdir(parents=True, exist_ok=True)
        folder.outputs.mkdir(parents=True, exist_ok=True)

    def output_location(self, folder: InstanceFolder, relative: str) -> str:
        """The location in the store of an output the process wrote at ``outputs/<relative>``."""
        return f"{folder.location}/outputs/{relative}"

    def stage_input(self, location: str, local: Path) -> Path:
        """A local path holding the artifact at ``location``: itself in a local store, else downloaded to ``local``.

        Raises:
            ArtifactStoreError: the artifact is not there (any more).
        """
        if self.is_local and "://" not in location:
            path = Path(location)
            if not path.exists():
                raise ArtifactStoreError(f"artifact {location} is gone; run the step that made it again")
            return path
        fs, path_in_fs = _filesystem_of(location)
        if not fs.exists(path_in_fs):
            raise ArtifactStoreError(f"artifact {location} is gone; run the step that made it again")
        local.parent.mkdir(parents=True, exist_ok=True)
        if fs.isdir(path_in_fs):
            fs.get(path_in_fs.rstrip("/") + "/", str(local), recursive=True)
        else:
            fs.get(path_in_fs, str(local))
        return local

    def publish(self, folder: InstanceFolder) -> None:
        """Upload a finished instance's outputs to the store (nothing to do for a local store)."""
        if self.is_local:
            return
        target = f"{folder.location}/outputs"
        fs, path_in_fs = _filesystem_of(target)
        for file in sorted(p for p in folder.outputs.rglob("*") if p.is_file() and not p.is_symlink()):
            fs.put_file(str(file), f"{path_in_fs}/{file.relative_to(folder.outputs).as_posix()}")

    def copy(self, source: str, target: str) -> None:
        """Copy an artifact (a file or a folder) within the store, e.g. a cached output into a new instance.

        In a local store files are hard-linked where the file system allows (steps read their inputs in place and
        write only their own outputs, so sharing the bytes is safe).

        Raises:
            ArtifactStoreError: the source is gone.
        """
        if self.is_local and "://" not in source:
            src, dst = Path(source), Path(target)
            if not src.exists():
                raise ArtifactStoreError(f"cached artifact {source} is gone")
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, dirs_exist_ok=True, copy_function=_link_or_copy)
            else:
                _link_or_copy(str(src), str(dst))
            return
        fs, src_path = _filesystem_of(source)
        _, dst_path = _filesystem_of(target)
        if not fs.exists(src_path):
            raise ArtifactStoreError(f"cached artifact {source} is gone")
        if fs.isdir(src_path):
            for file in fs.find(src_path):
                fs.copy(file, dst_path + "/" + file[len(src_path) :].lstrip("/"))
        else:
            fs.copy(src_path, dst_path)

    # -- the cache index -----------------------------------------------------------------------------------------

    def cache_get(self, key: str) -> CachedResult | None:
        """The cached outputs under ``key``, or None (a missing or unreadable entry is a miss)."""
        text = self._read_cache(key)
        if text is None:
            return None
        try:
            record = json.loads(text)
            outputs = {
                str(name): OutputValue(str(entry["value"]), entry.get("digest"))
                for name, entry in record["outputs"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        return CachedResult(outputs)

    def cache_put(self, key: str, outputs: Mapping[str, OutputValue], *, source: str) -> None:
        """Store ``outputs`` under ``key``, all at once (call it only after the outputs are complete)."""
        record = {
            "key": key,
            "source": source,
            "outputs": {name: {"value": out.value, "digest": out.digest} for name, out in sorted(outputs.items())},
        }
        text = json.dumps(record, sort_keys=True)
        if self.is_local:
            target = self.root / _CACHE / f"{key}.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            handle, aside = tempfile.mkstemp(dir=target.parent, prefix=f".{key[:12]}-", suffix=".tmp")
            try:
                with os.fdopen(handle, "w") as file:
                    file.write(text)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(aside, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(aside)
                raise
            return
        fs, path_in_fs = _filesystem_of(self._location(PurePosixPath(_CACHE, f"{key}.json")))
        fs.pipe_file(path_in_fs, text.encode())

    def cache_forget(self, key: str) -> None:
        """Drop an entry whose artifacts are gone, so the step runs again."""
        if self.is_local:
            with contextlib.suppress(FileNotFoundError):
                (self.root / _CACHE / f"{key}.json").unlink()
            return
        fs, path_in_fs = _filesystem_of(self._location(PurePosixPath(_CACHE, f"{key}.json")))
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(path_in_fs)

    def cache_view(self) -> CacheView:
        """A read-only mapping of the cache index for ``plan_run`` (entries are read when looked up)."""
        return CacheView(self)

    # -- helpers -----------------------------------------------------------------------------------------------

    def _location(self, relative: PurePosixPath) -> str:
        if self.is_local:
            return str(self.root / relative)
        return f"{self.url}/{relative.as_posix()}"

    def _read_cache(self, key: str) -> str | None:
        if not all(c in "0123456789abcdef" for c in key):
            return None  # never a path outside the index
        if self.is_local:
            try:
                return (self.root / _CACHE / f"{key}.json").read_text()
            except OSError:
                return None
        fs, path_in_fs = _filesystem_of(self._location(PurePosixPath(_CACHE, f"{key}.json")))
        try:
            data: bytes = fs.cat_file(path_in_fs)
        except (FileNotFoundError, OSError):
            return None
        return data.decode("utf-8", "replace")


class CacheView(Mapping[str, CachedResult]):
    """The cache index as a mapping; only ``get``/``[]`` are meant to be used (listing reads the whole index)."""

    def __init__(self, store: ArtifactStore) -> None:
        self._store = store
        self._read: dict[str, CachedResult | None] = {}

    def __getitem__(self, key: str) -> CachedResult:
        if key not in self._read:
            self._read[key] = self._store.cache_get(key)
        found = self._read[key]
        if found is None:
            raise KeyError(key)
        return found

    def __iter__(self) -> Iterator[str]:
        if not self._store.is_local:
            return iter(())
        folder = self._store.root / _CACHE
        return iter(sorted(p.stem for p in folder.glob("*.json"))) if folder.is_dir() else iter(())

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _filesystem(url: str) -> Any:
    return _filesystem_of(url)[0]


def _filesystem_of(url: str) -> tuple[Any, str]:
    try:
        import fsspec  # type: ignore[import-untyped]  # an extra: only for a URL store
    except ImportError as err:
        raise ArtifactStoreError(
            f"the artifact store {url.split('://')[0]}:// needs fsspec: pip install 'phalanx[data]' (and "
            "phalanx[s3] or phalanx[gcs] for those stores)"
        ) from err
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as err:
        raise ArtifactStoreError(f"the artifact store {url.split('://')[0]}:// cannot be used: {err}") from err
    return fs, str(path)


def upload_folder(source: Path, url: str) -> None:
    """Copy the files of a local folder under an fsspec URL, keeping their relative paths.

    Symbolic links are left out: an object store has no links, and a link's target is not the folder's to copy.

    Raises:
        ArtifactStoreError: fsspec (or the scheme's package) is missing, or the URL cannot be used.
        OSError: a file cannot be read or written.
    """
    filesystem, root = _filesystem_of(url)
    for path in sorted(source.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        destination = f"{root.rstrip('/')}/{path.relative_to(source).as_posix()}"
        filesystem.makedirs(destination.rsplit("/", 1)[0], exist_ok=True)  # a no-op on object stores
        filesystem.put_file(str(path), destination)
