"""A sweep step on the real embedded runtime: its Sweep's real trials run, and its best trial feeds a training step.

``tune`` is a grid sweep over three learning rates whose trials print ``phalanx-metric`` lines (the loss is
smallest at 0.05); ``final`` is a trainingJob step given the best ``lr`` (a declared output named after the sweep
parameter) and ``bestValue``, writing a model into ``$PHALANX_OUTPUTS/model``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from conftest import Runtime
from phalanx.model.pipelines import PipelineRun
from support.waiting import wait_until

TRIAL = """
import sys
lr = float(sys.argv[1])
print(f"phalanx-metric step=1 loss={(lr - 0.05) ** 2 + 0.01}", flush=True)
"""
FINAL = """
import os, pathlib, sys
out = pathlib.Path(os.environ["PHALANX_OUTPUTS"]) / "model"
out.mkdir(parents=True, exist_ok=True)
(out / "lr.txt").write_text(sys.argv[1] + " " + sys.argv[2])
"""


def test_a_sweep_steps_best_trial_feeds_the_next_step(runtime: Runtime) -> None:
    (runtime.work_dir / "trial.py").write_text(TRIAL)
    (runtime.work_dir / "final.py").write_text(FINAL)

    def job(*command: str) -> dict:
        template = {"command": [sys.executable, *command], "resources": {"cpu": "100m", "memory": "64Mi"}}
        return {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}}

    sweep = {
        "parameters": [{"name": "lr", "type": "discrete", "values": [0.01, 0.05, 0.1]}],
        "algorithm": {"name": "grid"},
        "objective": {"metric": "loss", "direction": "minimize"},
        "maxTrials": 3,
        "parallelTrials": 2,
        "trial": {"spec": job(str(runtime.work_dir / "trial.py"), "${params.lr}")},
    }
    pipeline = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": "tuned"},
        "spec": {
            "steps": [
                {"name": "tune", "sweep": {"spec": sweep}, "outputs": [{"name": "lr", "type": "Float"}]},
                {
                    "name": "final",
                    "trainingJob": {"spec": job(str(runtime.work_dir / "final.py"), "${inputs.lr}", "${inputs.best}")},
                    "arguments": {"lr": "{{steps.tune.outputs.lr}}", "best": "{{steps.tune.outputs.bestValue}}"},
                    "outputs": [{"name": "model", "type": "Model"}],
                },
            ]
        },
    }
    run = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "PipelineRun",
        "metadata": {"name": "tuned-1"},
        "spec": {"pipelineRef": {"name": "tuned"}},
    }
    path = runtime.work_dir / "tuned.yaml"
    path.write_text(yaml.safe_dump_all([pipeline, run], sort_keys=False))
    runtime.start_control_plane()
    runtime.cli("submit", "-f", str(path), check=True)

    def finished() -> PipelineRun | None:
        with runtime.client() as client:
            found = client.ops.get_pipelinerun("default", "tuned-1")
        return found if found.status.phase in ("Succeeded", "Failed") else None

    done = wait_until(finished, timeout=180, message="pipelinerun tuned-1 to finish")
    if done.status.phase != "Succeeded":
        pytest.fail(f"{done.status.message}\n{runtime.cli('describe', 'plr', 'tuned-1').stdout}")
    steps = {entry.step: entry for entry in done.status.instances}
    assert steps["tune"].job == "tuned-1-tune-1"
    assert steps["tune"].outputs["lr"] == "0.05"
    assert steps["tune"].outputs["bestTrial"].startswith("tuned-1-tune-1-")
    model = Path(steps["final"].outputs["model"])
    assert (model / "lr.txt").read_text() == f"0.05 {steps['tune'].outputs['bestValue']}"
    assert float(steps["tune"].outputs["bestValue"]) == 0.01
