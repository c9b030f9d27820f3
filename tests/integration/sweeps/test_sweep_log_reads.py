"""The sweep controller on the embedded runtime's port never reads a byte of a trial's log it has parsed.

A real process writes a trial's log file (lines written in pieces, so the controller meets half-written ones)
while the controller's passes run over the real SQLite store; every ``read_log`` through the port is counted
by a wrapper. Each read starts where the one before ended, the bytes returned add up to the file's size, and
every step the process printed reached the study.
"""

from __future__ import annotations

import copy
import itertools
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from phalanx.adapters.store import SqliteStore
from phalanx.core.clock import VirtualClock
from phalanx.model.jobs import TrainingJob, TrainingJobStatus
from phalanx.model.sweeps import ParamValue, Sweep, parse_sweep
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SqliteBackend
from phalanx.services.port import LogChunk, LogCursor
from phalanx.services.sweeps.controller import SweepController
from support.waiting import wait_until

STEPS = 200
# Prints each step's line in two writes, flushed apart: the controller reads between them now and then.
WRITER = textwrap.dedent(
    f"""
    import sys, time
    with open(sys.argv[1], "a") as log:
        for step in range({STEPS}):
            log.write(f"phalanx-metric step={{step}} val_loss="); log.flush()
            time.sleep(0.001)
            log.write(f"{{1 / (step + 1)}}\\n"); log.flush()
        log.write("the end, with no newline"); log.flush()
    """
)
SWEEP: dict[str, Any] = {
    "apiVersion": "phalanx.dev/v1alpha1",
    "kind": "Sweep",
    "metadata": {"name": "lr"},
    "spec": {
        "parameters": [{"name": "lr", "type": "double", "min": 0.0001, "max": 1.0}],
        "algorithm": {"name": "random", "seed": 1},
        "objective": {"metric": "val_loss", "direction": "minimize"},
        "parallelTrials": 1,
        "maxTrials": 1,
        "trial": {
            "spec": {"type": "generic", "replicas": {"worker": {"template": {"command": ["x", "${params.lr}"]}}}}
        },
    },
}


class Study:
    """One trial's study in memory: what the controller asks and tells."""

    def __init__(self) -> None:
        self.trials: dict[int, str] = {}
        self.reports: dict[int, dict[int, float]] = {}

    def asked(self) -> dict[int, dict[str, ParamValue]]:
        return {n: {"lr": 0.1} for n, state in self.trials.items() if state == "running"}

    def ask(self, count: int) -> dict[int, dict[str, ParamValue]]:
        made: dict[int, dict[str, ParamValue]] = {
            n: {"lr": 0.1} for n in range(len(self.trials), min(1, len(self.trials) + count))
        }
        self.trials.update(dict.fromkeys(made, "running"))
        return made

    def exhausted(self) -> bool:
        return len(self.trials) >= 1

    def report(self, number: int, intermediate: Mapping[int, float]) -> None:
        self.reports[number] = dict(intermediate)

    def tell(self, number: int, outcome: str, value: float | None) -> None:
        self.trials[number] = outcome

    def told(self) -> set[int]:
        return {n for n, state in self.trials.items() if state != "running"}


class Studies:
    def __init__(self) -> None:
        self.study = Study()

    def open(self, sweep: Sweep) -> Study:
        return self.study

    def delete(self, sweep: Sweep) -> None:
        pass


class CountingBackend(SqliteBackend):
    """The embedded port, recording each read of a log: the offset it started at and the bytes it returned."""

    reads: list[tuple[int, int]]

    def read_log(self, job: TrainingJob, replica: str, cursor: LogCursor | None = None) -> LogChunk | None:
        chunk = super().read_log(job, replica, cursor)
        if chunk is not None:
            start = chunk.cursor.offset - len(chunk.text.encode())
            self.reads.append((start, len(chunk.text.encode())))
        return chunk


def set_phase(store: SqliteStore, phase: str) -> None:
    job = store.get(TrainingJob, "default", "lr-0")
    store.update_status(job.model_copy(update={"status": TrainingJobStatus.model_validate({"phase": phase})}))


def test_the_controller_reads_each_byte_of_a_growing_log_once(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "phalanx.db")
    layout = StateLayout(tmp_path)
    backend = CountingBackend(store, layout, clock=VirtualClock())
    backend.reads = []
    backend.create(parse_sweep(copy.deepcopy(SWEEP)))
    studies = Studies()
    controller = SweepController(backend, studies, VirtualClock(), log_every_s=0)
    wait_until(lambda: controller.sync() is False or store.try_get(TrainingJob, "default", "lr-0"), 10, "lr-0")
    job = store.get(TrainingJob, "default", "lr-0")
    set_phase(store, "Running")
    run = layout.replica_run_dir("default", "lr-0", job.metadata.uid or "", "lr-0-worker-0", 1)
    run.mkdir(parents=True)
    log = run / "replica.log"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log)])
    try:
        wait_until(lambda: controller.sync() is not None and writer.poll() is not None, 60, "the writer to end")
    finally:
        writer.kill()
        writer.wait()
    controller.sync()
    set_phase(store, "Succeeded")
    wait_until(lambda: not controller.sync() and studies.study.told() == {0}, 10, "the trial told")
    reads = backend.reads
    assert len(reads) > 2, "the log was read while it grew"
    for (start, size), (next_start, _) in itertools.pairwise(reads):
        assert next_start == start + size, f"a read started at {next_start}, not where the one before ended"
    size = log.stat().st_size
    tail = len(b"the end, with no newline")
    assert sum(read for _, read in reads) == size - tail, "each complete line's bytes were returned once"
    assert studies.study.reports[0] == {step: 1 / (step + 1) for step in range(STEPS)}
