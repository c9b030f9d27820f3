"""A new SQLite job history opened by several processes at once: each finds the schema, none fails.

The control plane and a reader (the CLI, the server, a test) may both open a history file that does not exist
yet. Both used to find no schema, both created it, and the second failed with "table job_history already
exists": the control plane then ran with its history off (a gate saw retention never happen).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

OPEN_AT = """
import sys, time
from phalanx.adapters.history.store import HistoryStore
go = float(sys.argv[2])
while time.time() < go:
    pass
HistoryStore.at_path(sys.argv[1]).close()
print("opened")
"""


def test_processes_opening_a_new_history_at_once_all_succeed(tmp_path: Path) -> None:
    for attempt in range(3):
        path = tmp_path / f"history-{attempt}.db"
        # Every process spins until the same instant, after its imports, so the migrations overlap.
        go = time.time() + 3.0
        opened = [
            subprocess.Popen(
                [sys.executable, "-c", OPEN_AT, str(path), str(go)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(6)
        ]
        results = [process.communicate(timeout=60) for process in opened]
        failures = [err for process, (_, err) in zip(opened, results, strict=True) if process.returncode != 0]
        assert failures == [], failures[0][-2000:]
        assert all(out.strip() == "opened" for out, _ in results)


def test_a_history_in_a_folder_that_does_not_exist_is_a_clear_error(tmp_path: Path) -> None:
    import pytest

    from phalanx.adapters.history.store import HistoryError, HistoryStore

    with pytest.raises(HistoryError, match=r"cannot open the job history at .*missing"):
        HistoryStore.at_path(tmp_path / "missing" / "history.db")
