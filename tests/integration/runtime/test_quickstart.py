"""The README's main job, through the real CLI: phases in order, logs streamed, artifact and metric written."""

from __future__ import annotations

import json
import shutil

from conftest import REPO, Runtime
from phalanx.services.embedded.daemon import stop_control_plane
from phalanx.services.embedded.layout import StateLayout

PHASES = ["Queued", "Admitted", "Downloading", "Running", "Storing", "Succeeded"]


def test_quickstart_runs_to_success_with_artifact_and_metric(runtime: Runtime) -> None:
    shutil.copytree(REPO / "examples", runtime.work_dir / "examples")
    try:
        result = runtime.cli("run", "examples/quickstart.yaml", timeout=180)
    finally:
        stop_control_plane(StateLayout(runtime.state_dir))
    output = result.stdout
    assert result.returncode == 0, output + result.stderr
    positions = [output.find(phase) for phase in PHASES]
    assert all(p >= 0 for p in positions), output
    assert positions == sorted(positions), f"phases out of order: {output}"
    assert "master-0 |" in output and "worker-0 |" in output  # both replicas' logs streamed
    assert "epoch 12/12" in output
    model = json.loads((runtime.work_dir / "outputs" / "quickstart" / "model.json").read_text())
    assert len(model["weights"]) == 3
    metrics = json.loads((runtime.work_dir / "outputs" / "quickstart" / "metrics.json").read_text())
    assert metrics["accuracy"] > 0.7
    assert "metrics: accuracy=" in output


def test_running_the_quickstart_again_replaces_the_finished_job(runtime: Runtime) -> None:
    shutil.copytree(REPO / "examples", runtime.work_dir / "examples")
    try:
        first = runtime.cli("run", "examples/quickstart.yaml", "--no-logs", timeout=180)
        second = runtime.cli("run", "examples/quickstart.yaml", "--no-logs", timeout=180)
    finally:
        stop_control_plane(StateLayout(runtime.state_dir))
    assert first.returncode == 0, first.stdout + first.stderr
    assert second.returncode == 0, second.stdout + second.stderr
    assert "trainingjob/quickstart replaced" in second.stdout
    assert "control plane running" in second.stdout  # reused, not started twice
