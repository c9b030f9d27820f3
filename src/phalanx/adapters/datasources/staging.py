"""Writing a dataset safely: a fresh temp directory beside the destination, renamed into place on success only.

Disk full: every ``OSError`` with ``ENOSPC``/``EDQUOT`` raised while materialising becomes one ``SourceError``
("no space left on the device holding <dir>: free space or point the cache elsewhere"), after the temp directory
is removed. The seam to test (and to cap) it is ``WriteBudget``: ``materialize(..., max_bytes=N)`` charges every
byte the adapter writes against ``N`` and raises ``OSError(ENOSPC)`` past it, exactly as a full disk would.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

from phalanx.adapters.datasources._types import SourceError

Progress = Callable[[int, int | None], None]

_FULL = {errno.ENOSPC, errno.EDQUOT}


class WriteBudget:
    """Counts the bytes written into a dataset; past ``max_bytes`` it fails as a full disk does (ENOSPC)."""

    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.written = 0

    def charge(self, n: int) -> None:
        """Account for ``n`` more bytes, raising ``OSError(ENOSPC)`` when they do not fit."""
        if self.max_bytes is not None and self.written + n > self.max_bytes:
            raise OSError(errno.ENOSPC, f"the dataset limit of {self.max_bytes} bytes is reached")
        self.written += n

    def check_total(self, total: int) -> None:
        """Fail early when a dataset of ``total`` bytes cannot fit in what is left."""
        if self.max_bytes is not None and self.written + total > self.max_bytes:
            raise OSError(errno.ENOSPC, f"the dataset limit of {self.max_bytes} bytes is reached")


class BudgetedFile:
    """A binary file opened for writing whose every ``write`` is charged to a ``WriteBudget`` first."""

    def __init__(self, path: Path, budget: WriteBudget) -> None:
        self._handle: IO[bytes] = path.open("xb")
        self._budget = budget
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` after charging it to the budget."""
        size = memoryview(data).nbytes
        self._budget.charge(size)
        return self._handle.write(data)

    def tell(self) -> int:
        """The current position."""
        return self._handle.tell()

    def flush(self) -> None:
        """Flush buffered bytes to the OS."""
        self._handle.flush()

    def writable(self) -> bool:
        """Always true: the file is opened for writing."""
        return True

    def readable(self) -> bool:
        """Always false."""
        return False

    def seekable(self) -> bool:
        """Always false: datasets are written front to back."""
        return False

    def close(self) -> None:
        """Flush and close the file."""
        if not self.closed:
            self.closed = True
            self._handle.close()

    def __enter__(self) -> BudgetedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_stream(
    chunks: Iterable[bytes],
    target: Path,
    budget: WriteBudget,
    *,
    progress: Progress | None = None,
    total: int | None = None,
    done: int = 0,
) -> int:
    """Write ``chunks`` into a new file ``target`` (parents created); returns ``done`` plus the bytes written."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with BudgetedFile(target, budget) as out:
        for chunk in chunks:
            if not chunk:
                continue
            out.write(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, total)
    return done


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the quota) is full."""
    if isinstance(exc, OSError) and exc.errno in _FULL:
        return True
    text = str(exc)
    return "No space left on device" in text or "Disk quota exceeded" in text


def disk_full_error(field: str, directory: Path, exc: BaseException) -> SourceError:
    """The ``SourceError`` for a full disk under ``directory``."""
    strerror = exc.strerror if isinstance(exc, OSError) and exc.strerror else ""
    detail = f" ({strerror})" if strerror and "No space left on device" not in strerror else ""
    return SourceError(
        field,
        f"no space left on the device holding {directory.absolute()}: free space or point the cache elsewhere{detail}",
    )


def _force_remove(func: Callable[..., object], path: str, _exc: object) -> None:
    # A script may leave read-only directories behind: make them writable and try once more.
    try:
        parent = os.path.dirname(path)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IWUSR | stat.S_IXUSR)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR | stat.S_IXUSR | stat.S_IRUSR)
            shutil.rmtree(path, ignore_errors=True)
        else:
            func(path)
    except OSError:
        pass


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything under it, read-only entries included; never raises."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return
    if path.exists():
        shutil.rmtree(path, onerror=_force_remove)


def make_staging_dir(dest: Path, field: str) -> Path:
    """A fresh, empty temp directory beside ``dest`` (same filesystem, so the final rename is atomic)."""
    parent = dest.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=parent))
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(field, parent, exc) from exc
        raise SourceError(
            field, f"cannot create a directory in {parent} ({exc.strerror or exc}): check its permissions"
        ) from exc


def publish(staging: Path, dest: Path, field: str) -> None:
    """Rename the finished ``staging`` directory to ``dest``, which must still not exist."""
    if dest.exists() or dest.is_symlink():
        raise SourceError(field, f"{dest} appeared while the dataset was written; it was left as it is")
    try:
        os.rename(staging, dest)
    except OSError as exc:
        raise SourceError(field, f"cannot move the dataset into {dest} ({exc.strerror or exc})") from exc
