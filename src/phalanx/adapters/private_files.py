"""Files and directories only their owner may read: the state directory, the store, logs, launch files.

The state directory holds what a job was given (its environment, with tokens), the store (datasource URLs with
passwords) and every replica's log, so nothing of it may be readable by another local user. Modes are set when
a file or directory is *created* (``os.open``/``mkdir`` with a mode), so there is no moment at which another
user could open it; ``tighten`` exists for what an older version left behind with wider modes.

The umask can only remove bits from these modes, never add them, so they hold whatever the user's umask.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_OTHERS = stat.S_IRWXG | stat.S_IRWXO


def make_private_dirs(path: Path) -> None:
    """Create ``path`` and its missing parents with mode 0700; existing directories are left as they are.

    ``Path.mkdir(parents=True)`` would create the parents with the default 0777 (less the umask), so each
    missing component is created here, from the top.
    """
    missing: list[Path] = []
    current = path
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            if not directory.is_dir():
                raise


def open_private(path: Path, flags: int) -> int:
    """``os.open`` with ``O_CREAT`` and mode 0600: a file created here is the owner's alone from the start."""
    return os.open(path, flags | os.O_CREAT, PRIVATE_FILE_MODE)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (created 0600, or truncated), UTF-8."""
    with os.fdopen(open_private(path, os.O_WRONLY | os.O_TRUNC), "w", encoding="utf-8") as handle:
        handle.write(text)


def tighten(path: Path) -> int | None:
    """Remove group and other permissions from ``path`` if it has any.

    Returns:
        The mode it had (e.g. ``0o755``) when it was changed; None when it was private already or is absent.
    """
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None
    if not mode & _OTHERS:
        return None
    path.chmod(mode & ~_OTHERS)
    return mode
