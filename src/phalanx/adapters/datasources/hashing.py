"""Content hashes: one sha256 per file and a dataset version over all of them.

The version is ``sha256:<hex>`` of the sorted list of ``(path, sha256)`` pairs, each encoded as
``<posix path> NUL <file sha256 hex> LF``. It depends only on the files' relative paths and contents, so the
same data from two sources (a directory, a URL, a script) has the same version, whatever the mtimes, owners,
permissions or the order files were written in.

Symbolic links: a link to a regular file inside the root counts as that file (under the link's own path); a link
that leads outside the root, a dangling link and a link to a directory are left out.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from phalanx.adapters.datasources._types import DataFile

CHUNK = 1 << 20


def sha256_file(path: Path) -> tuple[int, str]:
    """The size and sha256 (hex) of the file at ``path``."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def version_of(files: tuple[DataFile, ...] | list[DataFile]) -> str:
    """The dataset version of ``files``: ``sha256:<hex>`` over the sorted ``(path, sha256)`` pairs."""
    digest = hashlib.sha256()
    for item in sorted(files, key=lambda f: f.path):
        digest.update(item.path.encode("utf-8", "surrogateescape"))
        digest.update(b"\0")
        digest.update(item.sha256.encode("ascii"))
        digest.update(b"\n")
    return f"sha256:{digest.hexdigest()}"


def _inside(target: Path, root: Path) -> bool:
    try:
        target.relative_to(root)
    except ValueError:
        return False
    return True


def list_files(root: Path) -> list[tuple[str, Path]]:
    """The regular files under ``root`` (and links to files inside it), as sorted ``(posix relpath, path)`` pairs."""
    real_root = root.resolve()
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        current = Path(dirpath)
        for name in filenames + [d for d in dirnames if (current / d).is_symlink()]:
            full = current / name
            try:
                mode = full.lstat().st_mode
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(mode):
                target = full.resolve()
                if not _inside(target, real_root) or not target.is_file():
                    continue
            elif not stat.S_ISREG(mode):
                continue
            found.append((full.relative_to(root).as_posix(), full))
    found.sort()
    return found


def content_version(root: Path) -> tuple[tuple[DataFile, ...], str]:
    """The files under ``root`` (sorted by path) and the dataset version they make up."""
    files = tuple(DataFile(rel, *sha256_file(full)) for rel, full in list_files(root))
    return files, version_of(files)
