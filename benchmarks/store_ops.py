"""Micro-benchmark of the embedded state store: create, get, update, update_status and list on a real file.

Each operation runs on TrainingJobs built like a user's (validated and defaulted) in a fresh SQLite file in a
temporary directory, one thread, so the numbers are per-process throughput including pydantic parsing and the
durable commit (WAL, synchronous=NORMAL). Run:

    python benchmarks/store_ops.py [--jobs 2000] [--lists 50]

The last line is machine-readable: ``RESULT create_per_s=... update_per_s=... get_per_s=...``.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from phalanx.adapters.store import SqliteStore
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.validation import validate_job


def build_jobs(count: int) -> list[TrainingJob]:
    jobtypes = builtin_jobtypes()
    return [
        validate_job(
            {
                "metadata": {"name": f"job-{i}", "labels": {"team": f"t{i % 4}"}},
                "spec": {
                    "type": "pytorch",
                    "replicas": {
                        "master": {"count": 1, "template": {"command": ["python", "train.py"]}},
                        "worker": {"count": 3, "template": {"command": ["python", "train.py"]}},
                    },
                },
            },
            jobtypes,
        )
        for i in range(count)
    ]


def timed(label: str, count: int, action: Callable[[], None], rows: list[tuple[str, int, float]]) -> float:
    began = time.perf_counter()
    action()
    elapsed = time.perf_counter() - began
    rows.append((label, count, elapsed))
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000, help="objects to create, read and update")
    parser.add_argument("--lists", type=int, default=50, help="full list() calls over all jobs")
    args = parser.parse_args()
    jobs = build_jobs(args.jobs)
    # The inputs are scaffolding: keep the cyclic GC from rescanning them during every timed operation.
    gc.collect()
    gc.freeze()
    rows: list[tuple[str, int, float]] = []

    with tempfile.TemporaryDirectory() as folder, SqliteStore(Path(folder) / "bench.db") as store:
        stored: list[TrainingJob] = []

        def create() -> None:
            stored.extend(store.create(job) for job in jobs)

        def get() -> None:
            for job in jobs:
                store.get(TrainingJob, "default", job.metadata.name)

        def update() -> None:
            for index, job in enumerate(stored):
                job.metadata.annotations["touched"] = "yes"
                stored[index] = store.update(job)

        def update_status() -> None:
            for job in stored:
                job.status.phase = Phase.RUNNING
                store.update_status(job)

        def list_all() -> None:
            for _ in range(args.lists):
                store.list(TrainingJob)

        def list_selected() -> None:
            for _ in range(args.lists):
                store.list(TrainingJob, labels={"team": "t1"})

        create_rate = timed("create", args.jobs, create, rows)
        get_rate = timed("get", args.jobs, get, rows)
        update_rate = timed("update", args.jobs, update, rows)
        timed("update_status", args.jobs, update_status, rows)
        timed(f"list ({args.jobs} objects)", args.lists, list_all, rows)
        timed(f"list by label ({args.jobs // 4} of {args.jobs})", args.lists, list_selected, rows)

    print(f"{'operation':<32} {'ops':>7} {'seconds':>9} {'ops/s':>10} {'us/op':>9}")
    for label, count, elapsed in rows:
        rate, micros = count / elapsed, elapsed / count * 1e6
        print(f"{label:<32} {count:>7} {elapsed:>9.3f} {rate:>10.0f} {micros:>9.0f}")
    print(f"RESULT create_per_s={create_rate:.0f} update_per_s={update_rate:.0f} get_per_s={get_rate:.0f}")


if __name__ == "__main__":
    main()
