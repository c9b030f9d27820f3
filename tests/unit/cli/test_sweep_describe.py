"""`describe sweep` and `sweep best` as they render a Sweep's recorded status (no logs, no backend)."""

from __future__ import annotations

import copy
from typing import Any

from rich.console import Console

from phalanx.entrypoints.cli.sweeps import best_document, by_objective, print_sweep_description
from phalanx.model.sweeps import Sweep, parse_sweep

SWEEP: dict[str, Any] = {
    "apiVersion": "phalanx.dev/v1alpha1",
    "kind": "Sweep",
    "metadata": {"name": "lr"},
    "spec": {
        "parameters": [{"name": "lr", "type": "double", "min": 0.0001, "max": 1.0}],
        "algorithm": {"name": "tpe", "seed": 3},
        "objective": {"metric": "val_loss", "direction": "minimize"},
        "maxTrials": 4,
        "earlyStopping": {"rule": "median"},
        "trial": {"spec": {"type": "generic", "replicas": {"worker": {"template": {"command": ["x"]}}}}},
    },
}


def result(number: int, phase: str, value: float | None, reason: str = "") -> dict[str, Any]:
    return {
        "number": number,
        "name": f"lr-{number}",
        "phase": phase,
        "parameters": {"lr": 0.1 * (number + 1)},
        "value": value,
        "step": None if phase == "Succeeded" else 3,
        "reason": reason,
    }


def sweep(direction: str = "minimize") -> Sweep:
    doc = copy.deepcopy(SWEEP)
    doc["spec"]["objective"]["direction"] = direction
    parsed = parse_sweep(doc)
    status = {
        "phase": "Running",
        "trials": {"created": 4, "running": 1, "succeeded": 2, "stopped": 1},
        "bestTrial": {"name": "lr-2", "number": 2, "parameters": {"lr": 0.3}, "value": 0.125},
        "results": [
            result(0, "Succeeded", 0.5),
            result(1, "Stopped", 0.9, "trial 1 stopped at step 3: 0.9 is worse than the median 0.1"),
            result(2, "Succeeded", 0.125),
            result(3, "Running", 0.7),
        ],
    }
    return Sweep.model_validate({**parsed.to_dict(), "status": status})


def test_trials_are_listed_best_first_then_the_rest_by_number() -> None:
    assert [r.number for r in by_objective(sweep())] == [2, 0, 1, 3]
    assert [r.number for r in by_objective(sweep("maximize"))] == [0, 2, 1, 3]


def test_describe_shows_the_best_trial_its_parameters_and_why_trials_stopped() -> None:
    console = Console(record=True, width=200)
    print_sweep_description(console, sweep(), [])
    text = console.export_text()
    assert "Best trial:     lr-2 (val_loss=0.125)" in text and "  lr: 0.3" in text
    assert text.index("lr-2 ") < text.index("lr-0 ") < text.index("lr-1 ")
    assert "trial 1 stopped at step 3: 0.9 is worse than the median 0.1" in text
    assert "4 of 4 created" in text and "Early stopping:  median" in text


def test_best_prints_name_number_parameters_and_value() -> None:
    best = sweep().status.best_trial
    assert best is not None
    assert best_document(best) == {"name": "lr-2", "number": 2, "parameters": {"lr": 0.3}, "value": 0.125}
