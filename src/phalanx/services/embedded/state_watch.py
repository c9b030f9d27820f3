"""Whether the state directory a control plane opened is still the one at its path.

``rm -rf`` of a state directory under a running control plane leaves it working on files no one else can reach:
SQLite keeps writing to its unlinked database, every CLI verb then makes a fresh, empty state directory at the
same path, sees no lease, and a second control plane starts beside the first, whose replicas run on unseen. So
the control plane notes the identity (device and inode) of its database when it opens it and compares it with
what the path names now; when the file is gone or is another one, it stops, and stops the replicas it ran
(nothing could adopt them: their jobs went with the directory).
"""

from __future__ import annotations

import os
from pathlib import Path


class StateDirWatch:
    """Compares the state directory's database file with the one opened at the start."""

    def __init__(self, root: Path, database: Path) -> None:
        """Note the identity of ``database`` (in state directory ``root``) as it is now."""
        self.root, self.database = root, database
        self._opened = _identity(database)

    def problem(self) -> str | None:
        """Why the state directory is no longer the one opened; None while it is."""
        now = _identity(self.database)
        if self._opened is None or now == self._opened:
            return None
        if now is None:
            return f"the state directory {self.root} was removed (its store {self.database.name} is gone)"
        return f"the state directory {self.root} was replaced: {self.database.name} is another file now"


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino
