"""A replica's ceiling (``resources.limits``) is what the embedded runtime enforces; its reservation is what is
counted (issue 16: requests below limits).

Real control plane, real CLI, real cgroups: a replica reserving 250m CPU and 64Mi, with a ceiling of 500m and
128Mi, runs in a memory cgroup limited to 128Mi and a CPU quota of 50 ms per 100 ms, shares the node's cores (no
exclusive ones: it is not Guaranteed), and the scheduler counts 250m and 64Mi. A replica without a ceiling gets
its reservation as its limits. Where this machine's cgroups cannot be written, the executor falls back to CPU
affinity and enforces no ceiling at all: the test is skipped with that reason.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from conftest import Runtime, generic_job
from phalanx.adapters.executor.cgroups import CgroupError, CgroupLayout, create_cgroups, detect_cgroups, remove_cgroups
from phalanx.model.jobs import Phase
from phalanx.model.replicas import Replica

MIB = 2**20


@pytest.fixture
def cgroups() -> Iterator[CgroupLayout]:
    """This machine's cgroup layout, when replicas can be given memory and CPU limits here."""
    layout = detect_cgroups()
    if layout is None or not {"memory", "cpu"} <= layout.controllers:
        pytest.skip("no memory and cpu cgroup controllers on this machine: the executor enforces no ceiling")
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    try:
        setup = create_cgroups(layout, probe, cpus=None, memory_limit=64 * MIB, cpu_limit_milli=500)
    except CgroupError as err:
        pytest.skip(f"cgroups are not writable here ({err}): the executor enforces no ceiling")
    remove_cgroups(setup.directories)
    yield layout


def enforced(layout: CgroupLayout, launch_name: str) -> tuple[int, int]:
    """The memory limit (bytes) and CPU quota (microseconds per 100 ms) of a replica's cgroups."""
    memory_dir, cpu_dir = layout.parents["memory"] / launch_name, layout.parents["cpu"] / launch_name
    if layout.version == 1:
        memory = int((memory_dir / "memory.limit_in_bytes").read_text())
        quota = int((cpu_dir / "cpu.cfs_quota_us").read_text())
    else:
        memory = int((memory_dir / "memory.max").read_text())
        quota = int((cpu_dir / "cpu.max").read_text().split()[0])
    return memory, quota


def test_the_ceiling_is_enforced_and_the_reservation_counted(
    runtime: Runtime, cgroups: CgroupLayout, tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    bursting = generic_job("bursting", cpu="250m", memory="64Mi", args=["--hold", str(hold)])
    resources = bursting["spec"]["replicas"]["worker"]["template"]["resources"]
    resources["limits"] = {"cpu": "500m", "memory": "128Mi"}
    # A whole CPU without a ceiling would get an exclusive core; with a ceiling above it, none.
    capped = generic_job("capped", cpu="250m", memory="96Mi", args=["--hold", str(hold)])
    runtime.start_control_plane()
    runtime.submit(bursting)
    runtime.submit(capped)
    for name in ("bursting", "capped"):
        runtime.wait_phase(name, {Phase.RUNNING})
    with runtime.client() as client:
        replica = client.store.get(Replica, "default", "bursting-worker-0")
        job = client.get("bursting")
    assert (replica.spec.cpu_milli, replica.spec.memory) == (250, 64 * MIB)  # what the scheduler counts
    assert job.status.placements["bursting-worker-0"].cpus == []

    described = runtime.cli("describe", "job", "bursting", check=True).stdout
    assert "250m (limit 500m)" in described
    assert "64Mi (limit 128Mi)" in described
    assert enforced(cgroups, "default-bursting-worker-0-a0") == (128 * MIB, 50_000)
    assert enforced(cgroups, "default-capped-worker-0-a0") == (96 * MIB, 25_000)
    hold.write_text("go")
    for name in ("bursting", "capped"):
        assert runtime.wait_phase(name, {Phase.SUCCEEDED, Phase.FAILED}).status.phase == Phase.SUCCEEDED


def test_a_whole_cpu_with_a_ceiling_above_gets_no_exclusive_core(
    runtime: Runtime, cgroups: CgroupLayout, tmp_path: Path
) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs: one exclusive core, one left in the shared pool")
    hold = tmp_path / "hold"
    guaranteed = generic_job("guaranteed", cpu=1, memory="64Mi", args=["--hold", str(hold)])
    burstable = generic_job("burstable", cpu=1, memory="64Mi", args=["--hold", str(hold)])
    burstable["spec"]["replicas"]["worker"]["template"]["resources"]["limits"] = {"memory": "128Mi"}
    runtime.start_control_plane()
    runtime.submit(guaranteed)
    runtime.submit(burstable)
    for name in ("guaranteed", "burstable"):
        runtime.wait_phase(name, {Phase.RUNNING})
    with runtime.client() as client:
        assert len(client.get("guaranteed").status.placements["guaranteed-worker-0"].cpus) == 1
        assert client.get("burstable").status.placements["burstable-worker-0"].cpus == []
    # The bursting one has a CPU quota of its reservation (it has no CPU ceiling above it); the pinned one needs none.
    assert enforced(cgroups, "default-burstable-worker-0-a0") == (128 * MIB, 100_000)
    hold.write_text("go")
    for name in ("guaranteed", "burstable"):
        assert runtime.wait_phase(name, {Phase.SUCCEEDED, Phase.FAILED}).status.phase == Phase.SUCCEEDED


def test_convert_prints_a_kubeflow_containers_requests_and_limits_as_reservation_and_ceiling(
    runtime: Runtime,
) -> None:
    container = {
        "name": "pytorch",
        "image": "example.org/ddp:1.0",
        "command": ["python", "train.py"],
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}},
    }
    document = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ddp"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [container]}},
                }
            }
        },
    }
    path = runtime.write_job("ddp", document)
    (job,) = yaml.safe_load_all(runtime.cli("convert", str(path), check=True).stdout)
    resources = job["spec"]["replicas"]["master"]["template"]["resources"]
    assert (resources["cpu"], resources["memory"]) == ("2", "4Gi")
    assert resources["limits"] == {"cpu": "4", "memory": "8Gi"}

    container["resources"]["limits"]["cpu"] = "1"
    refused = runtime.cli("convert", str(runtime.write_job("below", document)))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources.limits.cpu" in refused.stderr
    assert "below the 2 CPU reserved" in refused.stderr
    assert "Traceback" not in refused.stderr
