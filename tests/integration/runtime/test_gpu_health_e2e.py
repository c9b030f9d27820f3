"""GPU health on the embedded control plane: a GPU of a simulated inventory fails while a replica runs on it.

The inventory file is edited while the control plane runs (``healthy: false`` with a ``problem``), as an operator
or a fault-injection script would: the replica on the sick GPU is stopped and its job restarted on the healthy
one, per its runPolicy; a new job does not land on the sick GPU; `get nodes` and `describe node` say which GPU is
unhealthy and why; marking it healthy again returns it to the schedulable set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from conftest import Runtime, parse_table, program_role, read_envs, typed_job, wait_until
from phalanx.model.jobs import Phase

PROBLEM = "XID 79: GPU has fallen off the bus (injected by the test)"


def inventory(gpu0: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Node",
        "metadata": {"name": "sim-0"},
        "status": {
            "memory": 64 * 2**30,
            "cpus": [{"id": i} for i in range(8)],
            "gpus": [{"index": 0, "model": "A100", **(gpu0 or {})}, {"index": 1, "model": "A100"}],
        },
    }


def gpu_job(name: str, hold: Path, envs: Path) -> dict[str, Any]:
    role = program_role(1, args=["--env-dir", str(envs), "--hold", str(hold)], cpu=1, memory="256Mi", gpu=1)
    return typed_job(name, "generic", {"worker": role}, runPolicy={"restartPolicy": "OnFailure", "backoffSeconds": 0})


def test_a_replica_on_a_gpu_that_fails_restarts_on_a_healthy_one(runtime: Runtime, tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inventory()))
    hold = tmp_path / "hold"  # never created: the replicas run until stopped
    runtime.start_control_plane(extra=["--inventory", str(path), "--gpu-check-interval", "0.1"])
    runtime.submit(gpu_job("a", hold, tmp_path / "env-a"))
    job = runtime.wait_phase("a", {Phase.RUNNING})
    assert job.status.placements["a-worker-0"].gpus == [0]

    path.write_text(yaml.safe_dump(inventory({"healthy": False, "problem": PROBLEM})))
    with runtime.client() as client:
        moved = wait_until(
            lambda: (
                (j := client.get("a")).status.phase == Phase.RUNNING
                and j.status.placements.get("a-worker-0") is not None
                and j.status.placements["a-worker-0"].gpus == [1]
                and j
            ),
            message="job a to run again, on GPU 1",
        )
        assert moved.status.restarts == 1
        assert moved.status.attempt >= 1
        reasons = [event.reason for event in client.describe("a").events]
        assert "GPUUnhealthy" in reasons
        [node] = client.ops.list_nodes()
        assert [(g.index, g.healthy, g.problem) for g in node.status.gpus] == [(0, False, PROBLEM), (1, True, "")]
    # The new process was given GPU 1 (the env of its latest attempt).
    wait_until(
        lambda: read_envs(tmp_path / "env-a").get("worker-0", {}).get("CUDA_VISIBLE_DEVICES") == "1",
        message="the restarted replica to see GPU 1",
    )

    # A new GPU job finds GPU 1 taken and GPU 0 unhealthy: it waits, and says why.
    runtime.submit(gpu_job("b", hold, tmp_path / "env-b"))
    waiting = runtime.wait_waiting("b")
    assert waiting.status.phase == Phase.QUEUED
    assert not waiting.status.placements

    nodes = runtime.cli("get", "nodes", check=True).stdout
    [row] = parse_table(nodes)
    assert row["UNHEALTHY"] == "GPU 0"
    described = runtime.cli("describe", "node", "sim-0", check=True).stdout
    assert "unhealthy: XID 79" in described
    assert "GPUUnhealthy" in described  # the node's event
    missing = runtime.cli("describe", "node", "nope")
    assert missing.returncode == 1 and "node 'nope' not found; known: sim-0" in missing.stderr

    # Healthy again: GPU 0 is schedulable, and the waiting job takes it.
    path.write_text(yaml.safe_dump(inventory()))
    job_b = runtime.wait_phase("b", {Phase.RUNNING})
    assert job_b.status.placements["b-worker-0"].gpus == [0]
    [row] = parse_table(runtime.cli("get", "nodes", check=True).stdout)
    assert row["UNHEALTHY"] == "-"
