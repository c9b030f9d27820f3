"""Sweep quality on the embedded runtime: TPE against random search, and what median stopping saves.

Every trial is a real process the embedded runtime starts (``benchmarks/sweep_trial.py``: a noisy learning curve
whose end is the Branin function seen as a validation loss, lower is better). For each seed, four sweeps of the
same trial budget run one after another on one control plane:

1. ``tpe``: TPE (seeded), no early stopping;
2. ``random``: random search (seeded), no early stopping;
3. ``median-values``: the same TPE sweep with the median stopping rule, ``medianOf: values`` (Optuna's form);
4. ``median-averages``: the same with ``medianOf: runningAverages`` (the default, Katib's form).

Both stopping sweeps use ``minTrials: 3`` and ``startStep: 3``. Measured per seed: each sweep's best objective
value; random search's median trial value; the trial-seconds of each sweep (the sum over its trials of start to
completion of the trial's job; a stopped trial: to when it became Halted). Checked, as issue 17 asks, with the
``median-values`` sweep (the other is printed beside it):

- TPE's best beats random search's median on every seed, and TPE's mean best beats random's mean best;
- median stopping saves at least 30 % of trial-seconds, and the best it finds stays within 5 % of the best of
  the same sweep without stopping (``best_regret_with_stop``, in %, averaged over seeds).

Run: python benchmarks/sweep_quality.py [--seeds 5] [--trials 20] [--parallel 2] [--steps 20] [--step-seconds 0.5]
Ends with: RESULT tpe_best_mean=… random_best_mean=… random_median_mean=… median_stop_saved_pct=…
best_regret_with_stop=…
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from phalanx.entrypoints.client import Client
from phalanx.model.jobs import TrainingJob
from phalanx.model.sweeps import Sweep, SweepPhase, TrialPhase
from phalanx.services.embedded.daemon import start_control_plane, stop_control_plane

TRIAL = Path(__file__).resolve().parent / "sweep_trial.py"
FINISHED = {SweepPhase.SUCCEEDED, SweepPhase.FAILED}
#: The sweeps run per seed: (name prefix, algorithm, what the median rule takes the median of; None: no stopping).
SWEEPS = (
    ("tpe", "tpe", None),
    ("random", "random", None),
    ("median-values", "tpe", "values"),
    ("median-averages", "tpe", "runningAverages"),
)
#: The sweeps with early stopping, and the one issue 17's thresholds are checked on (Optuna's form of the rule).
STOPPING = ("median-values", "median-averages")
MEDIAN = "median-values"


@dataclass
class Outcome:
    """What one sweep found and cost."""

    best: float
    values: list[float]
    trial_seconds: float
    stopped: int
    wall_seconds: float
    stop_steps: list[int]
    overhead: float


def sweep_document(
    name: str, algorithm: str, seed: int, args: argparse.Namespace, *, median_of: str | None
) -> dict[str, object]:
    spec: dict[str, object] = {
        "parameters": [
            {"name": "x", "type": "double", "min": -5.0, "max": 10.0},
            {"name": "y", "type": "double", "min": 0.0, "max": 15.0},
        ],
        "algorithm": {"name": algorithm, "seed": seed},
        "objective": {"metric": "loss", "direction": "minimize"},
        "maxTrials": args.trials,
        "parallelTrials": args.parallel,
        "trial": {
            "spec": {
                "type": "generic",
                "replicas": {
                    "worker": {
                        "count": 1,
                        "template": {
                            "command": [
                                sys.executable,
                                str(TRIAL),
                                "--x=${params.x}",
                                "--y=${params.y}",
                                f"--seed={seed}",
                                "--trial=${trial.number}",
                                f"--steps={args.steps}",
                                f"--step-seconds={args.step_seconds}",
                            ],
                            "resources": {"cpu": "500m", "memory": "64Mi"},
                        },
                    }
                },
            }
        },
    }
    if median_of is not None:
        spec["earlyStopping"] = {"rule": "median", "minTrials": 3, "startStep": 3, "medianOf": median_of}
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Sweep", "metadata": {"name": name}, "spec": spec}


def trial_seconds(job: TrainingJob) -> float:
    """How long a trial's job ran, start to completion.

    A stopped trial is a halted job, which gets no completion time: its end is its last condition change (when
    it became Halted), so that stopping is charged what the trial ran and not counted as free.
    """
    start = job.status.start_time
    if start is None:
        return 0.0  # never ran
    end = job.status.completion_time or max((c.last_transition_time for c in job.status.conditions), default=None)
    if end is None:
        raise SystemExit(f"trial {job.metadata.name} ({job.status.phase}) has no end time")
    return (end - start).total_seconds()


def run_sweep(
    client: Client, document: dict[str, object], timeout: float, *, steps: int, step_seconds: float
) -> Outcome:
    name = str(document["metadata"]["name"])  # type: ignore[index]
    began = time.monotonic()
    client.submit(document)
    try:
        sweep = client.wait_for(Sweep, name, FINISHED, timeout=began + timeout - time.monotonic())
    except TimeoutError as error:
        raise SystemExit(str(error)) from None
    wall = time.monotonic() - began
    if sweep.status.phase != SweepPhase.SUCCEEDED or sweep.status.best_trial is None:
        raise SystemExit(f"sweep {name} ended {sweep.status.phase}: {sweep.status.message}")
    trials = [
        job for job in client.store.list(TrainingJob, "default") if job.metadata.labels.get("phalanx.dev/sweep") == name
    ]
    seconds = sum(trial_seconds(job) for job in trials)
    values = [r.value for r in sweep.status.results if r.value is not None and r.phase == TrialPhase.SUCCEEDED]
    stop_steps = sorted(r.step for r in sweep.status.results if r.phase == TrialPhase.STOPPED and r.step is not None)
    # What a trial costs beyond its work: process start, metric reading, completion (finished trials only).
    finished = [trial_seconds(job) for job in trials if job.status.completion_time is not None]
    work = steps * step_seconds
    overhead = statistics.fmean(ran - work for ran in finished) if finished else 0.0
    stopped = sweep.status.trials.stopped
    return Outcome(sweep.status.best_trial.value, values, seconds, stopped, wall, stop_steps, overhead)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--step-seconds", type=float, default=0.5)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one sweep may take")
    args = parser.parse_args()

    rows: list[dict[str, Outcome]] = []
    with tempfile.TemporaryDirectory(prefix="phalanx-sweep-bench-") as tmp:
        client = Client(state_dir=Path(tmp) / "state")
        start_control_plane(client.layout)
        try:
            for seed in range(args.seeds):
                row = {
                    label: run_sweep(
                        client,
                        sweep_document(f"{label}-{seed}", algorithm, seed, args, median_of=median_of),
                        args.timeout,
                        steps=args.steps,
                        step_seconds=args.step_seconds,
                    )
                    for label, algorithm, median_of in SWEEPS
                }
                rows.append(row)
                tpe, rnd = row["tpe"], row["random"]
                print(
                    f"seed {seed}: tpe best {tpe.best:.4f} ({tpe.trial_seconds:.1f} trial-s, fixed cost per trial "
                    f"{tpe.overhead:.2f} s)  random best {rnd.best:.4f} median {statistics.median(rnd.values):.4f}",
                    flush=True,
                )
                for label in STOPPING:
                    stop = row[label]
                    print(
                        f"  {label}: best {stop.best:.4f}, {stop.stopped} stopped at steps {stop.stop_steps}, "
                        f"{stop.trial_seconds:.1f} trial-s",
                        flush=True,
                    )
        finally:
            stop_control_plane(client.layout)
            client.close()

    def saved_pct(label: str) -> float:
        return 100.0 * (1.0 - sum(r[label].trial_seconds for r in rows) / sum(r["tpe"].trial_seconds for r in rows))

    def regret_pct(label: str) -> float:
        return statistics.fmean(100.0 * (r[label].best - r["tpe"].best) / abs(r["tpe"].best) for r in rows)

    print()
    header = ["seed", "tpe best", "random best", "random median", "tpe trial-s"]
    for label in STOPPING:
        header += [f"{label} best", "stopped", "trial-s"]
    print("  ".join(f"{h:>16}" for h in header))
    for seed, row in enumerate(rows):
        cells: list[object] = [
            seed,
            f"{row['tpe'].best:.4f}",
            f"{row['random'].best:.4f}",
            f"{statistics.median(row['random'].values):.4f}",
            f"{row['tpe'].trial_seconds:.1f}",
        ]
        for label in STOPPING:
            cells += [f"{row[label].best:.4f}", row[label].stopped, f"{row[label].trial_seconds:.1f}"]
        print("  ".join(f"{c:>16}" for c in cells))

    tpe_best = statistics.fmean(r["tpe"].best for r in rows)
    random_best = statistics.fmean(r["random"].best for r in rows)
    random_median = statistics.fmean(statistics.median(r["random"].values) for r in rows)
    beats_median = all(r["tpe"].best < statistics.median(r["random"].values) for r in rows)
    saved, regret = saved_pct(MEDIAN), regret_pct(MEDIAN)
    print()
    for label in STOPPING:
        print(f"{label}: saves {saved_pct(label):.1f} % of trial-seconds, best {regret_pct(label):+.2f} % from TPE's")
    print()
    checks = {
        "TPE's best beats random's median on every seed": beats_median,
        "TPE's mean best beats random's mean best": tpe_best < random_best,
        f"{MEDIAN} saves >= 30 % of trial-seconds ({saved:.1f} %)": saved >= 30,
        f"{MEDIAN} keeps the best within 5 % ({regret:+.2f} %)": regret <= 5,
    }
    for check, holds in checks.items():
        print(f"{'yes' if holds else 'NO ':>3}  {check}")
    print(
        f"RESULT tpe_best_mean={tpe_best:.4f} random_best_mean={random_best:.4f} "
        f"random_median_mean={random_median:.4f} median_stop_saved_pct={saved:.1f} best_regret_with_stop={regret:.2f}"
    )
    if not all(checks.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
