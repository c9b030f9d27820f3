"""gp (Optuna's GPSampler) in a real run where PyTorch and SciPy are installed: the frameworks environment.

The ``sweeps`` extra leaves torch out (adapters/sweeps/algorithms.py refuses gp without it); this tier has torch,
so the gp path runs here for real: suggestions modelled by a Gaussian process, seeded and reproducible.
"""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("sweep_gp_child.py")


def run_gp(frameworks_dir: Path, database: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PYTHONPATH"] = str(REPO / "src")
    result = subprocess.run(
        [str(frameworks_dir / "bin" / "python"), str(CHILD), sysconfig.get_paths()["purelib"], f"sqlite:///{database}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(json.loads(result.stdout.splitlines()[-1]))


def test_gp_sweep_models_its_results_and_repeats_with_its_seed(frameworks_dir: Path, tmp_path: Path) -> None:
    first = run_gp(frameworks_dir, tmp_path / "first.db")
    assert first["available"] is None, "torch and scipy are installed here: gp must be available"
    losses = [trial["loss"] for trial in first["trials"]]
    assert [trial["number"] for trial in first["trials"]] == list(range(12))
    # The GP's 8 trials find a better point than the 4 random startup ones, and aim better on average.
    assert min(losses[4:]) < min(losses[:4])
    assert sum(losses[4:]) / 8 < sum(losses[:4]) / 4
    assert run_gp(frameworks_dir, tmp_path / "second.db")["trials"] == first["trials"]
