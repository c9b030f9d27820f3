"""The replica program of ``chaos.py``: it logs its start and end, and whether another copy of it runs.

    python _chaos_replica.py LEDGER LOCKS SECONDS [--fail-first MARKERS] [--metric NAME=VALUE]

Its identity comes from the environment Phalanx gives every replica (job, role, index, attempt). While it runs it
holds an exclusive ``flock`` on ``LOCKS/<job>.<role>-<index>``: the kernel drops the lock when the process dies,
however it dies, so a second copy of the same replica (an attempt started while the last one still ran, or a
replica started twice) cannot take it and writes ``double`` instead of waiting. Each ledger line is one
``write(2)`` on a file opened with ``O_APPEND``, shorter than ``PIPE_BUF``: lines from concurrent replicas never
interleave. ``--fail-first``: the first attempt of this replica exits 3 (a marker file in MARKERS remembers it).
``--metric``: print ``phalanx-metric step=1 NAME=VALUE`` before ending (a sweep's trial reports its objective).
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path


def main() -> int:
    ledger, locks, seconds = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
    options = dict(zip(sys.argv[4::2], sys.argv[5::2], strict=False))
    markers = Path(options["--fail-first"]) if "--fail-first" in options else None
    job, role = os.environ["PHALANX_JOB_NAME"], os.environ["PHALANX_ROLE"]
    replica = f"{role}-{os.environ['PHALANX_REPLICA_INDEX']}"
    attempt = os.environ.get("PHALANX_ATTEMPT", "0")
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def say(event: str, *more: object) -> None:
        os.write(fd, (" ".join(str(x) for x in (event, job, replica, attempt, os.getpid(), *more)) + "\n").encode())

    lock = os.open(locks / f"{job}.{replica}", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        say("double")  # another copy of this replica holds the lock: it is alive now
    say("start", f"{time.time():.3f}")
    if markers is not None:
        marker = markers / f"{job}.{replica}"
        if not marker.exists():
            marker.write_text("failed once")
            say("end", 3)
            return 3
    time.sleep(seconds)
    if "--metric" in options:
        print(f"phalanx-metric step=1 {options['--metric']}", flush=True)
    say("end", 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
