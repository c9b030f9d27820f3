"""Switching a SQLite file to write-ahead logging while other processes may be doing the same.

Every SQLite file Phalanx keeps (the store, the tokens, the sweeps' studies, a sample cache's index) is used in
WAL mode, so that readers never wait for the writer. Two connections switching a new file at the same moment
could each wait for the other's lock, so SQLite answers one of them "database is locked" at once, without
calling its busy handler; that one backs off and asks again. Without this, two processes opening a new file
together (two server workers starting, two `phalanx token create`) failed one time in three on a loaded
machine.
"""

from __future__ import annotations

import sqlite3
import time


def switch_to_wal(conn: sqlite3.Connection, *, timeout_s: float) -> str:
    """``PRAGMA journal_mode = WAL`` on ``conn``, retried for up to ``timeout_s`` while the file is locked.

    Returns:
        The journal mode SQLite reports afterwards (``wal``, unless the file system cannot do it).

    Raises:
        sqlite3.OperationalError: another failure, or still locked when ``timeout_s`` has passed.
    """
    deadline = time.monotonic() + timeout_s
    pause = 0.001
    while True:
        try:
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return str(mode).lower()
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)  # a lock SQLite would not wait for: back off, then ask again
        pause = min(pause * 2, 0.05)
