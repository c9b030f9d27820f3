"""One sweep-controller pass with many running trials whose logs are long: reading logs on vs reading them again.

On a real SQLite store and real log files (the embedded runtime's port, ``SqliteBackend``; no control plane, no
processes: the trials' jobs are marked Running and their logs written here), one Sweep has ``--trials`` trials
running at once, each with a ``--lines``-line log of ``phalanx-metric`` lines, and ``--other-jobs`` jobs that are
no trials sit in the same store. Between two passes each trial prints ``--new-lines`` more lines (a trial printing
a step every 25 ms, read every 0.25 s, as the embedded control plane reads). Each pass is timed in two modes,
alternately, in the same run:

- *full*: what the controller did before reading on: every pass reads each trial's whole log tail (up to 1 MiB)
  and parses every line of it again, and lists every job to keep the trials (a backend that ignores the cursor
  and the label selector, so the controller's code is the same);
- *incremental*: the controller as it is: each pass reads only what each log gained (``read_log`` past its
  cursor) and lists only the trial jobs (a label selector in SQL).

Each mode has its own controller (the same sweep, read-only study passes after the first) and is measured
``--passes`` times after one warm-up pass; the table gives the median and the bytes of log each pass read.

Ends with: RESULT trials=… lines=… full_ms=… incremental_ms=… speedup=…
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from phalanx.adapters.store import SqliteStore
from phalanx.core.clock import VirtualClock
from phalanx.model.jobs import TrainingJob, TrainingJobStatus
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.sweeps import ParamValue, Sweep, parse_sweep
from phalanx.model.validation import validate_job
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SqliteBackend
from phalanx.services.port import LabelSelector, LogChunk, LogCursor, Readable, selects
from phalanx.services.sweeps.controller import SweepController


class Study:
    """A study that asks ``size`` trials and keeps what it is told: the benchmark measures the controller."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.trials: dict[int, str] = {}

    def asked(self) -> dict[int, dict[str, ParamValue]]:
        return {n: {"lr": 0.1} for n, state in self.trials.items() if state == "running"}

    def ask(self, count: int) -> dict[int, dict[str, ParamValue]]:
        made: dict[int, dict[str, ParamValue]] = {
            n: {"lr": 0.1} for n in range(len(self.trials), min(self.size, len(self.trials) + count))
        }
        self.trials.update(dict.fromkeys(made, "running"))
        return made

    def exhausted(self) -> bool:
        return len(self.trials) >= self.size

    def report(self, number: int, intermediate: Mapping[int, float]) -> None:
        pass

    def tell(self, number: int, outcome: str, value: float | None) -> None:
        self.trials[number] = outcome

    def told(self) -> set[int]:
        return {n for n, state in self.trials.items() if state != "running"}


class Studies:
    def __init__(self, size: int) -> None:
        self.study = Study(size)

    def open(self, sweep: Sweep) -> Study:
        return self.study

    def delete(self, sweep: Sweep) -> None:
        pass


class Counting(SqliteBackend):
    """The embedded port, counting the bytes of log each read returns."""

    read_bytes = 0

    def read_log(self, job: TrainingJob, replica: str, cursor: LogCursor | None = None) -> LogChunk | None:
        chunk = super().read_log(job, replica, cursor)
        if chunk is not None:
            self.read_bytes += len(chunk.text.encode()) + len(chunk.partial.encode())
        return chunk


class FullReread(Counting):
    """The baseline: every read from the log's start (its tail), every list of every object, selected here."""

    def read_log(self, job: TrainingJob, replica: str, cursor: LogCursor | None = None) -> LogChunk | None:
        return super().read_log(job, replica, None)

    def list(
        self, kind: type[Readable], namespace: str | None = None, *, labels: LabelSelector | None = None
    ) -> list[Readable]:
        return [obj for obj in super().list(kind, namespace) if selects(labels, obj.metadata.labels)]


def sweep_document(trials: int) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Sweep",
        "metadata": {"name": "bench"},
        "spec": {
            "parameters": [{"name": "lr", "type": "double", "min": 0.0001, "max": 1.0}],
            "algorithm": {"name": "random", "seed": 1},
            "objective": {"metric": "loss", "direction": "minimize"},
            "parallelTrials": trials,
            "maxTrials": trials,
            "trial": {
                "spec": {"type": "generic", "replicas": {"worker": {"template": {"command": ["x", "${params.lr}"]}}}}
            },
        },
    }


def other_job(number: int) -> TrainingJob:
    document = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": f"other-{number}", "labels": {"team": "vision"}},
        "spec": {"type": "generic", "replicas": {"worker": {"template": {"command": ["x"]}}}},
    }
    return validate_job(document, builtin_jobtypes())


def lines(start: int, count: int) -> str:
    return "".join(f"phalanx-metric step={step} loss={1.0 / (step + 1):.6f}\n" for step in range(start, start + count))


def setup(root: Path, trials: int, log_lines: int, others: int) -> tuple[SqliteStore, list[Path]]:
    """The sweep, its trials Running with their logs written, and the other jobs."""
    store = SqliteStore(root / "phalanx.db")
    layout = StateLayout(root)
    backend = SqliteBackend(store, layout, clock=VirtualClock())
    backend.create(parse_sweep(sweep_document(trials)))
    for number in range(others):
        backend.create(other_job(number))
    maker = SweepController(backend, Studies(trials), VirtualClock(), log_every_s=0)
    maker.sync()
    logs = []
    for job in backend.list(TrainingJob, labels={"phalanx.dev/sweep": "bench"}):
        running = TrainingJobStatus.model_validate({"phase": "Running"})
        store.update_status(job.model_copy(update={"status": running}))
        name, uid = job.metadata.name, job.metadata.uid or ""
        run = layout.replica_run_dir("default", name, uid, f"{name}-worker-0", 1)
        run.mkdir(parents=True)
        (run / "replica.log").write_text(lines(0, log_lines))
        logs.append(run / "replica.log")
    return store, logs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--new-lines", type=int, default=10)
    parser.add_argument("--other-jobs", type=int, default=200)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="phalanx-sweep-controller-") as tmp:
        root = Path(tmp)
        print(f"setting up {args.trials} running trials x {args.lines} log lines, {args.other_jobs} other jobs ...")
        store, logs = setup(root, args.trials, args.lines, args.other_jobs)
        layout = StateLayout(root)
        modes: dict[str, tuple[Counting, SweepController]] = {}
        for mode, cls in (("full", FullReread), ("incremental", Counting)):
            backend = cls(store, layout, clock=VirtualClock())
            controller = SweepController(backend, Studies(args.trials), VirtualClock(), log_every_s=0)
            controller.sync()  # the first pass reads every log whole in both modes: not measured
            modes[mode] = (backend, controller)
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        read: dict[str, list[int]] = {mode: [] for mode in modes}
        written = args.lines
        for _ in range(args.passes):
            for path in logs:  # what each trial printed since the last pass
                with path.open("a") as log:
                    log.write(lines(written, args.new_lines))
            written += args.new_lines
            for mode, (backend, controller) in modes.items():
                backend.read_bytes = 0
                start = time.perf_counter()
                controller.sync()
                times[mode].append(time.perf_counter() - start)
                read[mode].append(backend.read_bytes)
        store.close()
    full_ms = statistics.median(times["full"]) * 1000
    incremental_ms = statistics.median(times["incremental"]) * 1000
    print()
    print(f"one pass, {args.trials} running trials, logs of {args.lines}+ lines, +{args.new_lines} lines a pass")
    print(f"{'mode':<14}{'pass ms (median)':>18}{'min':>10}{'max':>10}{'log KiB read':>15}")
    for mode in modes:
        ms = [t * 1000 for t in times[mode]]
        kib = statistics.median(read[mode]) / 1024
        print(f"{mode:<14}{statistics.median(ms):>18.1f}{min(ms):>10.1f}{max(ms):>10.1f}{kib:>15.1f}")
    speedup = full_ms / incremental_ms
    print(f"incremental is {speedup:.1f}x faster than reading every log again")
    print(
        f"RESULT trials={args.trials} lines={args.lines} full_ms={full_ms:.1f} "
        f"incremental_ms={incremental_ms:.1f} speedup={speedup:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
