"""benchmarks/chaos.py at a small scale, as the gate can afford: its checks, and a run that must count zero.

The full run (``--jobs 100 --kills 50``) is the benchmark's; here 12 jobs and 8 kills show the script works end
to end with real processes, and the ledger's reading is shown able to find what it looks for.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import chaos
from support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


def test_the_ledger_reading_counts_doubles_repeated_starts_and_each_replicas_ends(tmp_path: Path) -> None:
    run = chaos.Run(tmp_path, seed=1)
    run.ledger.write_text(
        "start a worker-0 0 10 1.0\n"
        "end a worker-0 0 10 3\n"
        "start a worker-0 1 11 2.0\n"
        "double a worker-0 1 12\n"
        "start a worker-0 1 12 2.1\n"
        "end a worker-0 1 11 0\n"
    )
    starts, doubles, ends = chaos.ledger_counts(run)
    assert starts == {("a", "worker-0", "0"): 1, ("a", "worker-0", "1"): 2}
    assert doubles == 1
    assert ends == {("a", "worker-0"): [(0, "3"), (1, "0")]}


def test_a_live_process_naming_the_ledger_is_an_orphan(tmp_path: Path) -> None:
    run = chaos.Run(tmp_path, seed=1)
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(run.ledger)])
    try:
        # Until the child has exec'd, its command line is still this test's (a gate's run scanned that early).
        cmdline = Path(f"/proc/{stray.pid}/cmdline")
        wait_until(lambda: str(run.ledger).encode() in cmdline.read_bytes(), 30, "the stray process to start")
        assert chaos.orphans(run) == 1
        assert stray.wait(timeout=10) == -9  # killed once counted
    finally:
        if stray.poll() is None:
            stray.kill()


def test_a_small_chaos_run_loses_nothing_runs_nothing_twice_and_leaves_nothing(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "chaos.py"), "--jobs", "12", "--kills", "8", "--seed", "3"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = re.search(r"^RESULT (.*)$", done.stdout, re.MULTILINE)
    assert result is not None, done.stdout
    values = dict(item.split("=") for item in result.group(1).split())
    assert int(values["kills"]) == 8 and int(values["jobs"]) >= 12
    assert {key: values[key] for key in ("lost", "double_runs", "orphans", "corrupt")} == {
        "lost": "0",
        "double_runs": "0",
        "orphans": "0",
        "corrupt": "0",
    }
