"""A control plane on the simulated 8-GPU, 2-socket server of examples/inventories: GPU choice, NUMA alignment
and NVLink topology as on the real machine, with replicas running as local processes that read what they got."""

from __future__ import annotations

import os
from itertools import combinations
from pathlib import Path

import pytest

from conftest import (
    REPO,
    Runtime,
    parse_table,
    processes_mentioning,
    program_role,
    read_envs,
    typed_job,
    wait_until,
)
from phalanx.adapters.devices import load_inventory
from phalanx.model.jobs import Phase
from phalanx.model.nodes import Node
from phalanx.model.replicas import Replica

INVENTORY = REPO / "examples" / "inventories" / "dgx-2socket-8gpu.yaml"


@pytest.fixture
def dgx() -> Node:
    [node] = load_inventory(INVENTORY)
    assert len(node.status.gpus) == 8
    return node


def visible_gpus(env: dict[str, str]) -> list[int]:
    return [int(index) for index in env["CUDA_VISIBLE_DEVICES"].split(",")]


def gpu_job(name: str, replicas: int, gpus: int, args: list[str]) -> dict[str, object]:
    return typed_job(name, "generic", {"worker": program_role(replicas, args=args, cpu=1, memory="1Gi", gpu=gpus)})


def test_gpus_are_numa_aligned_nvlinked_and_a_job_that_does_not_fit_waits(
    runtime: Runtime, tmp_path: Path, dgx: Node
) -> None:
    hold, envs, small_envs = tmp_path / "hold", tmp_path / "env", tmp_path / "env-small"
    runtime.start_control_plane(extra=["--inventory", str(INVENTORY)])
    runtime.submit(gpu_job("wide", 2, 4, ["--env-dir", str(envs), "--hold", str(hold)]))
    job = runtime.wait_phase("wide", {Phase.RUNNING})
    wait_until(lambda: len(read_envs(envs)) == 2, message="both replicas to write their environment")

    numa_of = {gpu.index: gpu.numa for gpu in dgx.status.gpus}
    given = {name: visible_gpus(env) for name, env in read_envs(envs).items()}
    assert set(given) == {"worker-0", "worker-1"}
    for name, gpus in given.items():
        assert len(set(gpus)) == 4, f"{name} got {gpus}"
        assert gpus == sorted(job.status.placements[f"wide-{name}"].gpus), "the env is not the placement"
        assert len({numa_of[g] for g in gpus}) == 1, f"{name}'s GPUs {gpus} span NUMA nodes"
        # In this cube-mesh each NUMA node's four GPUs are fully linked, so four GPUs can all be NVLink peers.
        unlinked = [(a, b) for a, b in combinations(gpus, 2) if dgx.gpu_link(a, b) != "NV"]
        assert unlinked == [], f"{name}'s GPUs {gpus} include pairs without NVLink: {unlinked}"
    assert sorted(given["worker-0"] + given["worker-1"]) == list(range(8))
    cpu_numa = {cpu.id: cpu.numa for cpu in dgx.status.cpus}
    for name, placement in job.status.placements.items():
        assert placement.node == "dgx-0"
        # The replica's exclusive core sits on the NUMA node of its GPUs.
        assert len(placement.cpus) == 1, placement
        assert {cpu_numa[c] for c in placement.cpus} == {numa_of[g] for g in placement.gpus}, (name, placement)

    # Simulated CPU ids need not exist here: the replicas run unpinned, on every CPU this test may use.
    with runtime.client() as client:
        logs = wait_until(
            lambda: len(text := client.logs("wide")) == 2 and all("cpus " in log for log in text.values()) and text,
            message="both replicas to log their CPUs",
        )
    ours = str(sorted(os.sched_getaffinity(0)))
    assert {name: log.split("cpus ", 1)[1].splitlines()[0] for name, log in logs.items()} == {
        "worker-0": ours,
        "worker-1": ours,
    }

    nodes = runtime.cli("get", "nodes", check=True).stdout
    [row] = parse_table(nodes)
    assert row["NAME"] == "dgx-0"
    assert row["GPUS"] == "8"
    assert row["GPU MODEL"] == "NVIDIA-A100-SXM4-80GB"
    assert row["CPUS"] == "64" and row["NUMA"] == "2"
    assert row["GPU ALLOC"] == "8/8"
    assert row["SOURCE"] == "simulated"

    runtime.submit(gpu_job("one-more", 1, 1, ["--env-dir", str(small_envs)]))
    waiting = runtime.wait_waiting("one-more")
    assert waiting.status.phase == Phase.QUEUED
    assert waiting.status.message == (
        "needs 1 GPU on one node; largest free block is 0 on node dgx-0 (0 free in total); "
        "preemption cannot help: no running job it may preempt holds what it lacks"
    )
    with runtime.client() as client:
        assert [r for r in client.store.list(Replica) if r.spec.job_name == "one-more"] == []
    assert read_envs(small_envs) == {}

    hold.write_text("go")
    assert runtime.wait_phase("wide", {Phase.SUCCEEDED, Phase.FAILED}).status.phase == Phase.SUCCEEDED
    final = runtime.wait_phase("one-more", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    [gpu] = visible_gpus(read_envs(small_envs)["worker-0"])
    assert gpu in range(8)
    assert processes_mentioning(str(hold)) == []


def test_a_four_gpu_job_gets_the_fully_linked_quad_left_free_not_the_lowest_indices(
    runtime: Runtime, tmp_path: Path, dgx: Node
) -> None:
    """The embedded runtime places through core.scheduling's plugins: with one GPU taken, a 4-GPU replica gets the
    other quad of the cube-mesh (every pair NVLinked), where lowest free indices would mix quads."""
    hold, first_env, wide_env = tmp_path / "hold", tmp_path / "env-first", tmp_path / "env-wide"
    runtime.start_control_plane(extra=["--inventory", str(INVENTORY)])
    runtime.submit(gpu_job("first", 1, 1, ["--env-dir", str(first_env), "--hold", str(hold)]))
    runtime.wait_phase("first", {Phase.RUNNING})
    [taken] = visible_gpus(wait_until(lambda: read_envs(first_env).get("worker-0"), message="first's environment"))

    runtime.submit(gpu_job("wide", 1, 4, ["--env-dir", str(wide_env), "--hold", str(hold)]))
    runtime.wait_phase("wide", {Phase.RUNNING})
    gpus = visible_gpus(wait_until(lambda: read_envs(wide_env).get("worker-0"), message="wide's environment"))
    lowest_free = [index for index in range(8) if index != taken][:4]
    assert taken not in gpus
    assert [(a, b) for a, b in combinations(gpus, 2) if dgx.gpu_link(a, b) != "NV"] == [], gpus
    assert len({gpu.numa for gpu in dgx.status.gpus if gpu.index in gpus}) == 1, gpus
    # The baseline a topology-blind scheduler would pick has pairs without NVLink, so the test can tell them apart.
    assert any(dgx.gpu_link(a, b) != "NV" for a, b in combinations(lowest_free, 2))

    hold.write_text("go")
    for name in ("first", "wide"):
        assert runtime.wait_phase(name, {Phase.SUCCEEDED, Phase.FAILED}).status.phase == Phase.SUCCEEDED
