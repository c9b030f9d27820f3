"""Local files and directories: copied into the dataset, with their hashes.

A single file becomes ``<its name>`` at the dataset root; a directory's tree is copied as it is. Symbolic links
inside a source directory are never followed out of it: a link to a file inside the directory is copied as a
regular file; a link pointing outside the directory, a dangling link and a link to a directory are skipped
(counted in the lineage). A path that is itself a link is followed: the user named it.
"""

from __future__ import annotations

import errno
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from phalanx.adapters.datasources._types import SourceError, SourceRequest, field_of
from phalanx.adapters.datasources.hashing import CHUNK
from phalanx.adapters.datasources.paths import resolve_local
from phalanx.adapters.datasources.staging import Progress, WriteBudget, write_stream


def _read_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            yield chunk


def _plan(root: Path) -> tuple[list[tuple[str, Path]], int]:
    """The files to copy from directory ``root`` as ``(relpath, source)`` and how many links were skipped."""
    real_root = root.resolve()
    planned: list[tuple[str, Path]] = []
    skipped = 0
    stack = [root]
    while stack:
        current = stack.pop()
        for entry in sorted(current.iterdir()):
            mode = entry.lstat().st_mode
            if stat.S_ISDIR(mode):
                stack.append(entry)
            elif stat.S_ISREG(mode):
                planned.append((entry.relative_to(root).as_posix(), entry))
            elif stat.S_ISLNK(mode):
                target = entry.resolve()
                if target.is_file() and target.is_relative_to(real_root):
                    planned.append((entry.relative_to(root).as_posix(), target))
                else:
                    skipped += 1
    planned.sort()
    return planned, skipped


def copy_path(
    request: SourceRequest,
    staging: Path,
    *,
    base_dir: Path | None,
    budget: WriteBudget,
    progress: Progress | None,
) -> str:
    """Copy the local file or directory of ``request`` into ``staging``; returns the lineage line."""
    field = field_of(request, "path")
    if request.path is None:
        raise SourceError(field, "a path source needs a path; give a local file or directory")
    source = resolve_local(request.path, base_dir, field)
    if not source.exists():
        raise SourceError(field, f"{source} does not exist; check the path (relative paths start at {base_dir or '.'})")
    skipped = 0
    if source.is_file():
        planned = [(source.name, source)]
    elif source.is_dir():
        planned, skipped = _plan(source)
        if not planned:
            raise SourceError(field, f"directory {source} holds no files; put the dataset's files in it")
    else:
        raise SourceError(field, f"{source} is neither a regular file nor a directory; give a file or directory")
    total = sum(path.stat().st_size for _, path in planned)
    budget.check_total(total)
    free = shutil.disk_usage(staging).free
    if total > free:
        raise OSError(errno.ENOSPC, f"No space left on device ({total} bytes needed, {free} free)")
    done = 0
    for rel, path in planned:
        done = write_stream(_read_chunks(path), staging / rel, budget, progress=progress, total=total, done=done)
    count = len(planned)
    noun = "file" if count == 1 else "files"
    extra = f", {skipped} symlink{'s' if skipped != 1 else ''} skipped" if skipped else ""
    return f"path: {source} ({count} {noun}{extra})"
