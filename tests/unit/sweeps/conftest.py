"""A valid Sweep document to vary in each test."""

from __future__ import annotations

import copy
from typing import Any

import pytest

BASE: dict[str, Any] = {
    "apiVersion": "phalanx.dev/v1alpha1",
    "kind": "Sweep",
    "metadata": {"name": "lr-search"},
    "spec": {
        "parameters": [
            {"name": "lr", "type": "double", "min": 1e-5, "max": 1e-1, "log": True},
            {"name": "layers", "type": "int", "min": 1, "max": 6},
            {"name": "batch", "type": "discrete", "values": [32, 64, 128]},
            {"name": "optimizer", "type": "categorical", "values": ["adam", "sgd"]},
            {"name": "momentum", "type": "double", "min": 0.5, "max": 0.99, "when": {"optimizer": "sgd"}},
        ],
        "algorithm": {"name": "tpe", "seed": 7},
        "objective": {"metric": "val_loss", "direction": "minimize", "goal": 0.05},
        "parallelTrials": 2,
        "maxTrials": 20,
        "maxFailedTrials": 3,
        "earlyStopping": {"rule": "median"},
        "trial": {
            "spec": {
                "type": "generic",
                "replicas": {
                    "worker": {
                        "count": 1,
                        "template": {
                            "command": ["python", "train.py", "--lr", "${params.lr}", "--layers", "${params.layers}"],
                            "env": {"OPTIMIZER": "${params.optimizer}", "MOMENTUM": "${params.momentum}"},
                        },
                    }
                },
            },
            "metadata": {"labels": {"team": "x", "trial": "${trial.name}"}},
        },
    },
}


@pytest.fixture
def doc() -> dict[str, Any]:
    """A fresh copy of a valid Sweep (every parameter type, a condition, a goal, the median rule)."""
    return copy.deepcopy(BASE)
