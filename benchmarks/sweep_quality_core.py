#!/usr/bin/env python3
"""The sweep-quality benchmark's function and an in-process check of its thresholds (no processes, no runtime).

Not the acceptance benchmark (``sweep_quality.py`` runs real trials through the embedded runtime): this module is
what it is built from, and a quick check that its thresholds are reachable with the Optuna adapter alone.

**The function** (lower is better): the Branin function, shifted so that its three minima are not at the
range's round numbers, plus a categorical choice that costs 4 when wrong, each trial's result blurred by seeded
Gaussian noise. Branin's minimum is ``BRANIN_MIN`` (0.397887...), so the best possible value is about that.

**The learning curve**: a trial reports its value at steps 1..``STEPS``, falling from far above its final value
towards it (``f + (f + 5) * (e^{-(s-1)/3} - e^{-(STEPS-1)/3})``, plus per-step noise), so the order of two trials
shows early and the median rule has something to stop. Each step stands for ``STEP_SECONDS`` of trial time.

**The check** (``python benchmarks/sweep_quality_core.py [--seeds 5] [--trials 40]``, about 2 minutes): for
each seed, a TPE sweep and a random sweep of the same budget, asked and told through
``adapters.sweeps.optuna_study`` on a temporary SQLite file, then the TPE sweep again with the median rule
(``core.sweeps.stopping``) deciding after each step. It prints a table and one line::

    RESULT tpe_best_mean=… random_best_mean=… random_median_mean=… median_stop_saved_pct=… best_regret_with_stop=…

``random_median_mean``: the mean over seeds of the median of the random sweep's trial values;
``median_stop_saved_pct``: trial-steps saved by the median rule, in % of the TPE sweep's without it;
``best_regret_with_stop``: the mean over seeds of ``(best with stopping - best without) / best without``
(positive: stopping found worse).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import statistics
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.adapters.sweeps.optuna_study import StudyStore
from phalanx.core.sweeps.stopping import decide_stops
from phalanx.model.sweeps import ParamValue, Sweep, parse_sweep

STEPS = 12
STEP_SECONDS = 0.05
NOISE = 0.1
BRANIN_MIN = 0.397887357729738
#: Where the Branin minima move to: (x - SHIFT_X, y - SHIFT_Y) is evaluated.
SHIFT_X, SHIFT_Y = 1.3, -0.7
WRONG_CHOICE_COST = 4.0

PARAMETERS: list[dict[str, Any]] = [
    {"name": "x", "type": "double", "min": -5.0, "max": 10.0},
    {"name": "y", "type": "double", "min": 0.0, "max": 15.0},
    {"name": "optimizer", "type": "categorical", "values": ["adam", "sgd", "rmsprop"]},
]
MEDIAN = {"rule": "median", "minTrials": 3, "startStep": 2}


def branin(x: float, y: float) -> float:
    """The Branin-Hoo function on [-5, 10] x [0, 15]: three global minima of 0.397887."""
    a, b, c = 1.0, 5.1 / (4 * math.pi**2), 5 / math.pi
    r, s, t = 6.0, 10.0, 1 / (8 * math.pi)
    return a * (y - b * x**2 + c * x - r) ** 2 + s * (1 - t) * math.cos(x) + s


def objective(params: Mapping[str, ParamValue]) -> float:
    """The noise-free value of a point (lower is better)."""
    x, y = float(params["x"]), float(params["y"])
    penalty = 0.0 if params["optimizer"] == "adam" else WRONG_CHOICE_COST
    # Shifted inside the box, clamped at its edges: the minima move off Branin's textbook points.
    return branin(min(10.0, max(-5.0, x - SHIFT_X)), min(15.0, max(0.0, y - SHIFT_Y))) + penalty


def _rng(seed: int, number: int, params: Mapping[str, ParamValue]) -> random.Random:
    text = json.dumps({"seed": seed, "number": number, "params": dict(params)}, sort_keys=True)
    return random.Random(hashlib.sha256(text.encode()).digest())


def learning_curve(
    params: Mapping[str, ParamValue], *, seed: int, number: int, steps: int = STEPS, noise: float = NOISE
) -> dict[int, float]:
    """The values trial ``number`` reports at steps 1..steps, the last one its result; seeded, so repeatable."""
    rng = _rng(seed, number, params)
    final = objective(params) + rng.gauss(0.0, noise)
    tail = math.exp(-(steps - 1) / 3)
    curve = {}
    for step in range(1, steps + 1):
        gap = (final + 5.0) * (math.exp(-(step - 1) / 3) - tail)
        curve[step] = final + gap + (rng.gauss(0.0, noise / 2) if step < steps else 0.0)
    return curve


def sweep_document(
    *,
    algorithm: str,
    seed: int,
    trials: int,
    command: list[str],
    early_stopping: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
    name: str = "bench",
) -> dict[str, Any]:
    """The Sweep of the benchmark: its parameters, ``algorithm`` and ``seed``, a trial running ``command``."""
    spec: dict[str, Any] = {
        "parameters": PARAMETERS,
        "algorithm": {"name": algorithm, "seed": seed, "settings": dict(settings or {})},
        "objective": {"metric": "loss", "direction": "minimize"},
        "maxTrials": trials,
        "trial": {"spec": {"type": "generic", "replicas": {"worker": {"template": {"command": command}}}}},
    }
    if early_stopping is not None:
        spec["earlyStopping"] = dict(early_stopping)
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Sweep", "metadata": {"name": name}, "spec": spec}


@dataclass
class SweepRun:
    """One sweep's trials: each one's result (its last value) and how many steps it ran."""

    values: dict[int, float] = field(default_factory=dict)
    steps: dict[int, int] = field(default_factory=dict)
    stopped: set[int] = field(default_factory=set)

    @property
    def best(self) -> float:
        """The best result of the trials that ran to the end (stopped ones are not candidates, as in plan_sweep)."""
        return min(value for number, value in self.values.items() if number not in self.stopped)

    @property
    def median(self) -> float:
        """The median result of every trial."""
        return statistics.median(self.values.values())


def run_in_process(sweep: Sweep, store: StudyStore, *, seed: int) -> SweepRun:
    """Ask, run (the learning curve, step by step) and tell every trial of ``sweep``, one at a time."""
    study = store.open(sweep)
    rule = sweep.spec.early_stopping
    run = SweepRun()
    history: dict[int, dict[int, float]] = {}
    for _ in range(sweep.spec.max_trials):
        ((number, params),) = study.ask(1).items()
        curve = learning_curve(params, seed=seed, number=number)
        history[number] = {}
        for step, value in curve.items():
            history[number][step] = value
            if rule is not None and decide_stops(rule, history, [number], "minimize", metric="loss"):
                run.stopped.add(number)
                break
        study.report(number, history[number])
        run.values[number] = history[number][max(history[number])]
        run.steps[number] = max(history[number])
        study.tell(number, "pruned" if number in run.stopped else "complete", run.values[number])
    return run


def measure(
    seed: int, trials: int, directory: Path, *, tpe: Mapping[str, Any], median: Mapping[str, Any]
) -> dict[str, SweepRun]:
    """The three sweeps of one seed: tpe (with settings ``tpe``), random, and tpe with the rule ``median``."""
    store = StudyStore(f"sqlite:///{directory / 'studies.db'}")
    runs = {}
    for label, algorithm, stop in (("tpe", "tpe", None), ("random", "random", None), ("tpe+median", "tpe", median)):
        settings = tpe if algorithm == "tpe" else {}
        document = sweep_document(
            algorithm=algorithm, seed=seed, trials=trials, command=["true"], early_stopping=stop, settings=settings
        )
        document["metadata"]["uid"] = f"{label}-{seed}"
        runs[label] = run_in_process(parse_sweep(document), store, seed=seed)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--tpe-startup", type=int, default=10, help="TPE's n_startup_trials (Optuna's default 10)")
    parser.add_argument("--start-step", type=int, default=MEDIAN["startStep"], help="the median rule's startStep")
    args = parser.parse_args(argv)
    tpe_settings = {"n_startup_trials": args.tpe_startup}
    median = {**MEDIAN, "startStep": args.start_step}
    rows = []
    with tempfile.TemporaryDirectory(prefix="sweep-quality-core-") as scratch:
        for seed in range(args.seeds):
            runs = measure(seed, args.trials, Path(scratch), tpe=tpe_settings, median=median)
            tpe, rnd, stopped = runs["tpe"], runs["random"], runs["tpe+median"]
            saved = 1 - sum(stopped.steps.values()) / sum(tpe.steps.values())
            rows.append(
                {
                    "seed": seed,
                    "tpe_best": tpe.best,
                    "random_best": rnd.best,
                    "random_median": rnd.median,
                    "stop_best": stopped.best,
                    "stopped": len(stopped.stopped),
                    "saved": saved,
                    "regret": (stopped.best - tpe.best) / abs(tpe.best),
                }
            )
    print(f"{'seed':>4} {'tpe best':>9} {'rand best':>9} {'rand med':>9} {'tpe+stop':>9} {'stopped':>7} {'saved':>6}")
    for row in rows:
        print(
            f"{row['seed']:>4} {row['tpe_best']:>9.4f} {row['random_best']:>9.4f} {row['random_median']:>9.4f} "
            f"{row['stop_best']:>9.4f} {row['stopped']:>7} {row['saved']:>6.1%}"
        )
    beats_median = all(row["tpe_best"] < row["random_median"] for row in rows)
    tpe_mean = statistics.fmean(row["tpe_best"] for row in rows)
    random_mean = statistics.fmean(row["random_best"] for row in rows)
    print(f"TPE best < random median on every seed: {beats_median}; mean best {tpe_mean:.4f} vs {random_mean:.4f}")
    print(
        f"RESULT tpe_best_mean={tpe_mean:.4f} random_best_mean={random_mean:.4f} "
        f"random_median_mean={statistics.fmean(row['random_median'] for row in rows):.4f} "
        f"median_stop_saved_pct={100 * statistics.fmean(row['saved'] for row in rows):.1f} "
        f"best_regret_with_stop={statistics.fmean(row['regret'] for row in rows):.4f}"
    )
    return 0 if beats_median and tpe_mean < random_mean else 1


if __name__ == "__main__":
    sys.exit(main())
