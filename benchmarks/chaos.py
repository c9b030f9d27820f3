"""Chaos on the embedded runtime: jobs run while the control plane and replicas' shims are killed with SIGKILL.

A control plane runs over a fresh state directory with two simulated nodes (``two-nodes-4gpu.yaml``: 32 CPUs).
``--jobs`` TrainingJobs are submitted through the SDK, seeded: one-replica jobs, gangs of 2 to 4 replicas, and
jobs whose replicas fail their first attempt (restarted under ``restartPolicy: OnFailure``); with them a Sweep
(random search, its trials TrainingJobs) and a Pipeline of two TrainingJob steps with a PipelineRun. Every
replica runs ``_chaos_replica.py``, which writes to an append-only ledger when it starts and ends and holds an
exclusive lock on its own name while it runs.

Meanwhile, at seeded random moments, ``--kills`` times: SIGKILL the control plane (its node runtime runs inside
it) and start a new one, or SIGKILL the shim of a running replica (the process that watches the replica's
command and records its exit). When every job has ended before the kills are done, a new wave of jobs is
submitted, so that every kill falls on work. When the kills are done and every object has ended, the control plane is
stopped (SIGTERM) and the run is checked:

- **lost**: jobs, trials and steps that did not end Succeeded, the Sweep and PipelineRun if they did not, and
  Succeeded jobs with a replica whose last attempt has no ``end 0`` in the ledger;
- **double_runs**: a replica that found another copy of itself alive (its lock taken: two attempts at once, or
  one run twice), and (job, replica, attempt) started more than once;
- **orphans**: replica processes still alive after everything ended and the control plane stopped;
- **corrupt**: the store fails SQLite's ``integrity_check``, or holds rows that cannot be read.

Run from the repository root:

    python benchmarks/chaos.py [--jobs 100] [--kills 50] [--seed 1]

It prints a table, then ``RESULT kills=… jobs=… lost=0 double_runs=0 orphans=0 corrupt=0``, and exits 1 when
a count is not zero, or fewer kills or jobs than asked were done.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.entrypoints.client import Client
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.pipelines import PipelineRun
from phalanx.model.replicas import Replica, ReplicaPhase
from phalanx.model.sweeps import Sweep
from phalanx.services.embedded.daemon import current_leader
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.leadership import process_start_ticks

HERE = Path(__file__).resolve().parent
REPLICA = HERE / "_chaos_replica.py"
INVENTORY = HERE.parent / "examples" / "inventories" / "two-nodes-4gpu.yaml"
TERMINAL = {Phase.SUCCEEDED, Phase.FAILED}
#: Jobs added when every job has ended before the kills asked for are done.
WAVE = 5


@dataclass
class Run:
    """The run's files and its control plane."""

    root: Path
    seed: int
    plane: subprocess.Popen[bytes] | None = None
    kills: Counter[str] = field(default_factory=Counter)
    restarts_s: list[float] = field(default_factory=list)

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def ledger(self) -> Path:
        return self.root / "ledger.txt"

    @property
    def locks(self) -> Path:
        return self.root / "locks"

    @property
    def markers(self) -> Path:
        return self.root / "markers"

    def start_plane(self) -> None:
        """Start a control plane and wait until it leads."""
        started = time.monotonic()
        with open(self.root / "controlplane.log", "ab") as log:
            self.plane = subprocess.Popen(
                [
                    *(sys.executable, "-m", "phalanx.entrypoints.controlplane", "--state-dir", str(self.state)),
                    *("--inventory", str(INVENTORY), "--grace-seconds", "2", "--lease-ttl", "3"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        pid = self.plane.pid
        with Client(state_dir=self.state) as client:
            while (leader := current_leader(client.store)) is None or leader.pid != pid:
                if self.plane.poll() is not None:
                    raise SystemExit(f"the control plane exited {self.plane.returncode}; see {self.root}")
                time.sleep(0.05)
        self.restarts_s.append(time.monotonic() - started)

    def command(self, seconds: float, *extra: str) -> list[str]:
        return [sys.executable, str(REPLICA), str(self.ledger), str(self.locks), f"{seconds:.2f}", *extra]


def job_document(run: Run, name: str, rng: random.Random) -> dict[str, Any]:
    """A one-replica job, a gang of 2-4, or a job whose replicas fail once: 4 CPUs each, 0.5-3 s of work."""
    shape = rng.random()
    count = 1 if shape < 0.55 else rng.randint(2, 4)
    extra = ("--fail-first", str(run.markers)) if shape >= 0.85 else ()
    template = {"command": run.command(rng.uniform(0.5, 3.0), *extra), "resources": {"cpu": 4, "memory": "256Mi"}}
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "type": "generic",
            "replicas": {"worker": {"count": count, "template": template}},
            # A killed shim fails its replica with an unknown exit: restarted, as any failure is.
            "runPolicy": {"restartPolicy": "OnFailure", "backoffLimit": 30, "backoffSeconds": 0.2},
        },
    }


def flow_documents(run: Run) -> list[dict[str, Any]]:
    """A Sweep (random search, 4 trials, 2 at a time) and a two-step Pipeline with its PipelineRun."""
    run_policy = {"restartPolicy": "OnFailure", "backoffLimit": 30, "backoffSeconds": 0.2}
    trial_template = {"command": run.command(1.0, "--metric", "loss=${params.lr}"), "resources": {"cpu": 2}}
    sweep = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Sweep",
        "metadata": {"name": "chaos-sweep"},
        "spec": {
            "parameters": [{"name": "lr", "type": "double", "min": 0.01, "max": 1.0}],
            "algorithm": {"name": "random", "seed": run.seed},
            "objective": {"metric": "loss", "direction": "minimize"},
            "maxTrials": 4,
            "parallelTrials": 2,
            "maxFailedTrials": 4,
            "trial": {
                "spec": {
                    "type": "generic",
                    "replicas": {"worker": {"count": 1, "template": trial_template}},
                    "runPolicy": run_policy,
                }
            },
        },
    }

    def step(name: str, after: list[str]) -> dict[str, Any]:
        template = {"command": run.command(1.0), "resources": {"cpu": 2}}
        spec = {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}, "runPolicy": run_policy}
        return {"name": name, "trainingJob": {"spec": spec}, "after": after}

    pipeline = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": "chaos-flow"},
        "spec": {"steps": [step("first", []), step("second", ["first"])]},
    }
    pipeline_run = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "PipelineRun",
        "metadata": {"name": "chaos-flow-1"},
        "spec": {"pipelineRef": {"name": "chaos-flow"}},
    }
    return [sweep, pipeline, pipeline_run]


def all_ended(client: Client) -> bool:
    jobs = client.store.list(TrainingJob)
    sweeps = client.store.list(Sweep)
    runs = client.store.list(PipelineRun)
    return (
        all(Phase(job.status.phase) in TERMINAL for job in jobs)
        and all(str(sweep.status.phase) in ("Succeeded", "Failed") for sweep in sweeps)
        and all(str(r.status.phase) in ("Succeeded", "Failed") for r in runs)
    )


def kill_shim(run: Run, client: Client, rng: random.Random) -> bool:
    """SIGKILL the shim of a running replica (its start time checked: never another process); False if none."""
    running = [
        r
        for r in client.store.list(Replica)
        if r.status.phase == ReplicaPhase.RUNNING and r.status.pid and r.status.process_start_ticks
    ]
    if not running:
        return False
    victim = rng.choice(running)
    pid, ticks = victim.status.pid, victim.status.process_start_ticks
    assert pid is not None
    if process_start_ticks(pid) != ticks:
        return False
    os.kill(pid, signal.SIGKILL)
    return True


def kill_plane(run: Run, rng: random.Random) -> None:
    assert run.plane is not None
    os.kill(run.plane.pid, signal.SIGKILL)
    run.plane.wait()
    time.sleep(rng.uniform(0.0, 0.5))
    run.start_plane()


Ends = dict[tuple[str, str], list[tuple[int, str]]]


def ledger_counts(run: Run) -> tuple[dict[tuple[str, str, str], int], int, Ends]:
    """Starts per (job, replica, attempt); lines saying ``double``; each replica's ends as (attempt, code)."""
    starts: Counter[tuple[str, str, str]] = Counter()
    doubles = 0
    ends: Ends = {}
    for line in run.ledger.read_text().splitlines():
        event, job, replica, attempt, _pid, *rest = line.split()
        if event == "start":
            starts[(job, replica, attempt)] += 1
        elif event == "double":
            doubles += 1
        elif event == "end":
            ends.setdefault((job, replica), []).append((int(attempt), rest[0]))
    return dict(starts), doubles, ends


def orphans(run: Run) -> int:
    """Replica processes of this run still alive (their command line names the run's ledger); killed after."""
    found = 0
    marker = str(run.ledger).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "cmdline").read_bytes() and process_start_ticks(int(entry.name)) is not None:
                found += 1
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue
    return found


def corrupt(run: Run) -> int:
    """1 if the store fails SQLite's integrity check, plus every row that cannot be read back."""
    database = StateLayout(run.state).database
    with sqlite3.connect(database) as db:
        bad = 0 if db.execute("PRAGMA integrity_check").fetchone()[0] == "ok" else 1
    with Client(state_dir=run.state) as client:
        return bad + len(client.ops.quarantined())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for the whole run")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="phalanx-chaos-") as tmp:
        run = Run(Path(tmp), args.seed)
        run.locks.mkdir()
        run.markers.mkdir()
        run.ledger.touch()
        run.start_plane()
        with Client(state_dir=run.state) as client:
            client.submit(flow_documents(run))
            for number in range(args.jobs):
                client.submit(job_document(run, f"chaos-{number:03d}", rng))
            submitted = args.jobs
            while sum(run.kills.values()) < args.kills and time.monotonic() - started < args.timeout:
                time.sleep(rng.uniform(0.3, 1.5))
                if all_ended(client):
                    # Everything ended before the kills were done (a fast machine): a new wave of jobs to disturb.
                    for number in range(submitted, submitted + WAVE):
                        client.submit(job_document(run, f"chaos-{number:03d}", rng))
                    submitted += WAVE
                if rng.random() < 0.5 and kill_shim(run, client, rng):
                    run.kills["shim"] += 1
                else:
                    kill_plane(run, rng)
                    run.kills["control plane"] += 1
            while not all_ended(client) and time.monotonic() - started < args.timeout:
                time.sleep(0.2)
            ended = all_ended(client)
            jobs = client.store.list(TrainingJob)
            sweeps = client.store.list(Sweep)
            runs = client.store.list(PipelineRun)
        assert run.plane is not None
        run.plane.send_signal(signal.SIGTERM)
        run.plane.wait(timeout=60)
        starts, doubles, ends = ledger_counts(run)
        not_succeeded = [job.metadata.name for job in jobs if Phase(job.status.phase) != Phase.SUCCEEDED]
        unfinished = []
        for job in jobs:
            if Phase(job.status.phase) != Phase.SUCCEEDED:
                continue
            for index in range(job.spec.replicas["worker"].count):
                finals = sorted(ends.get((job.metadata.name, f"worker-{index}"), []))
                if not finals or finals[-1][1] != "0":
                    unfinished.append(f"{job.metadata.name}/worker-{index}")
        flows_failed = [s.metadata.name for s in sweeps if str(s.status.phase) != "Succeeded"]
        flows_failed += [r.metadata.name for r in runs if str(r.status.phase) != "Succeeded"]
        lost = len(not_succeeded) + len(unfinished) + len(flows_failed) + (0 if ended else 1)
        twice = sum(count - 1 for count in starts.values() if count > 1)
        left = orphans(run)
        broken = corrupt(run)
        kills = sum(run.kills.values())
        elapsed = time.monotonic() - started
        rows = [
            ("jobs (with trials and steps)", str(len(jobs))),
            ("replica attempts started", str(sum(starts.values()))),
            ("kills: control plane", str(run.kills["control plane"])),
            ("kills: replica shim", str(run.kills["shim"])),
            ("control plane start to leading, p50", f"{sorted(run.restarts_s)[len(run.restarts_s) // 2]:.2f} s"),
            ("jobs not Succeeded", ", ".join(not_succeeded[:5]) or "none"),
            ("Succeeded jobs missing a replica's end", ", ".join(unfinished[:5]) or "none"),
            ("Sweep and PipelineRun not Succeeded", ", ".join(flows_failed) or "none"),
            ("replicas that met a live copy of themselves", str(doubles)),
            ("attempts started twice", str(twice)),
            ("orphan processes", str(left)),
            ("store: integrity problems and unreadable rows", str(broken)),
            ("wall time", f"{elapsed:.0f} s"),
        ]
        width = max(len(label) for label, _ in rows)
        for label, value in rows:
            print(f"{label:<{width}}  {value}")
        if lost or doubles or twice or left or broken:
            print(f"(the run's files are kept in a copy: {keep(run)})")
    print(
        f"RESULT kills={kills} jobs={len(jobs)} lost={lost} double_runs={doubles + twice} orphans={left} "
        f"corrupt={broken}"
    )
    ok = kills >= args.kills and len(jobs) >= args.jobs and not (lost or doubles or twice or left or broken)
    return 0 if ok else 1


def keep(run: Run) -> Path:
    """Copy the run's ledger, log and store somewhere that outlives the temporary directory, to look into."""
    import shutil

    target = Path(tempfile.mkdtemp(prefix="phalanx-chaos-kept-"))
    for name in ("ledger.txt", "controlplane.log"):
        shutil.copy2(run.root / name, target / name)
    shutil.copytree(run.state, target / "state", ignore=shutil.ignore_patterns("runs"), dirs_exist_ok=True)
    return target


if __name__ == "__main__":
    sys.exit(main())
