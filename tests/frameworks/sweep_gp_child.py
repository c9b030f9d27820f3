"""A gp sweep asked and told where PyTorch is installed (the frameworks environment), its trials printed as JSON.

    python sweep_gp_child.py SITE_PACKAGES STORAGE_URL

Optuna and SQLAlchemy are not in the frameworks environment (its lock holds the frameworks and Phalanx's own
dependencies only), so the test's environment's site-packages is put *after* the frameworks' own: torch, scipy
and numpy are the frameworks environment's, as for a user who installed ``phalanx[sweeps]`` beside torch.
The objective is a bowl with its minimum at (x, y) = (0.3, -0.2); 4 startup trials, then 8 GP ones.
"""

from __future__ import annotations

import json
import sys

sys.path.append(sys.argv[1])

import torch  # the environment's own: proves the sampler below runs with the real library

from phalanx.adapters.sweeps.algorithms import algorithm_available
from phalanx.adapters.sweeps.optuna_study import StudyStore
from phalanx.model.sweeps import parse_sweep

SWEEP = {
    "metadata": {"name": "gp", "namespace": "default", "uid": "gp-1"},
    "spec": {
        "parameters": [
            {"name": "x", "type": "double", "min": -2.0, "max": 2.0},
            {"name": "y", "type": "double", "min": -2.0, "max": 2.0},
        ],
        "algorithm": {"name": "gp", "seed": 5, "settings": {"n_startup_trials": 4}},
        "objective": {"metric": "loss"},
        "maxTrials": 12,
        "trial": {"spec": {"type": "generic", "replicas": {"worker": {"template": {"command": ["true"]}}}}},
    },
}


def main() -> None:
    study = StudyStore(sys.argv[2]).open(parse_sweep(SWEEP))
    trials = []
    for _ in range(12):
        for number, params in study.ask(1).items():
            loss = (params["x"] - 0.3) ** 2 + (params["y"] + 0.2) ** 2
            study.tell(number, "complete", loss)
            trials.append({"number": number, "params": params, "loss": loss})
    print(json.dumps({"available": algorithm_available("gp"), "torch": torch.__version__, "trials": trials}))


if __name__ == "__main__":
    main()
