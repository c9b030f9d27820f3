"""Why-pending sentences: one per waiting job, naming the binding constraint with numbers."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from scheduling_builders import (
    DGX_MODEL,
    GI,
    JobBuilder,
    changed,
    dgx,
    hold,
    make_job,
    make_node,
    run,
    snapshot,
    two_nodes,
    waiting_reason,
)

from phalanx.core.scheduling import ClusterSnapshot
from phalanx.core.scheduling.demands import Demand
from phalanx.core.scheduling.reasons import describe_demand


def local_two_cpus() -> ClusterSnapshot:
    return snapshot(make_node("local").cpus(sockets=1, cores=1, threads=2).memory(16 * GI).obj())


CASES: list[tuple[str, Callable[[], ClusterSnapshot], JobBuilder, str]] = [
    (
        "gang-of-cpus-on-a-small-machine",
        local_two_cpus,
        make_job("job").replicas(3, cpu=1000),
        "needs 3 replicas (3 CPUs exclusive, 6Gi) as one gang; only 2 fit: node local has 2 CPUs free "
        "where 3 are needed",
    ),
    (
        "none-of-the-gang-fits",
        lambda: snapshot(make_node("local").cpus(sockets=1, cores=1, threads=2).obj(), [hold("local", cpus=[0, 1])]),
        make_job("job").replicas(2, cpu=1000, memory=GI),
        "needs 2 replicas (2 CPUs exclusive, 2Gi) as one gang; none fit: node local has 0 CPUs free where 2 are needed",
    ),
    (
        "gang-bigger-than-the-gpus",
        lambda: snapshot(dgx()),
        make_job("job").replicas(2, gpu=8),
        "needs 16 GPUs in one gang; largest free block is 8 on node dgx-0 (8 free in total)",
    ),
    (
        "gpu-gang-with-min-available",
        lambda: snapshot(dgx()),
        make_job("job").replicas(4, gpu=3).min_available(3),
        "needs 9 GPUs in one gang (at least 3 of 4 replicas); largest free block is 8 on node dgx-0 (8 free in total)",
    ),
    (
        "gpu-model-nobody-has",
        lambda: snapshot(dgx()),
        make_job("job").replicas(1, gpu=1, gpu_model="V100"),
        f"needs GPU model V100; no node has it (nodes have {DGX_MODEL})",
    ),
    (
        "gpu-model-only-on-cordoned-nodes",
        lambda: snapshot([changed(dgx(), unschedulable=True), *two_nodes()]),
        make_job("job").replicas(1, gpu=1, gpu_model=DGX_MODEL),
        f"needs GPU model {DGX_MODEL}; only cordoned nodes have it (dgx-0)",
    ),
    (
        "replica-larger-than-every-node-with-the-model",
        lambda: snapshot([dgx(), *two_nodes()]),
        make_job("job").replicas(1, cpu=20000, gpu=1, gpu_model="NVIDIA-A100-PCIE-40GB"),
        "a replica needs 20 CPUs but no node with NVIDIA-A100-PCIE-40GB GPUs has that many: "
        "the largest has 16 CPUs (node node-a)",
    ),
    (
        "memory-per-replica",
        lambda: snapshot(dgx()),
        make_job("job").replicas(1, memory=600 * GI),
        "a replica needs 600Gi memory but no node has that much: the largest has 512Gi memory (node dgx-0)",
    ),
    (
        "memory-of-the-gang",
        lambda: snapshot(dgx()),
        make_job("job").replicas(3, memory=200 * GI),
        "needs 3 replicas (3 CPUs exclusive, 600Gi) as one gang; only 2 fit: node dgx-0 has 512Gi memory free "
        "where 600Gi is needed",
    ),
    (
        "shared-cpu-per-replica",
        lambda: snapshot(dgx()),
        make_job("job").replicas(1, cpu=70500),
        "a replica needs 70500m CPU but no node has that much: the largest has 64000m CPU (node dgx-0)",
    ),
    (
        "cordoned-only-node",
        lambda: snapshot(changed(dgx(), unschedulable=True)),
        make_job("job").replicas(1),
        "no schedulable node: the only node, dgx-0, is cordoned",
    ),
    (
        "single-replica-odd-memory",
        lambda: snapshot(dgx(), [hold("dgx-0", memory=512 * GI - 1536 * 2**20 - 123)]),
        make_job("job").replicas(1, memory=2 * GI),
        "needs 1 replica (1 CPU exclusive, 2Gi); it does not fit: node dgx-0 has 1.5Gi memory free where 2Gi is needed",
    ),
]


@pytest.mark.parametrize(("cluster", "job", "expected"), [pytest.param(*case[1:], id=case[0]) for case in CASES])
def test_reason(cluster: Callable[[], ClusterSnapshot], job: JobBuilder, expected: str) -> None:
    assert waiting_reason(run(cluster(), job), "job") == expected


def test_every_waiting_job_gets_its_own_reason() -> None:
    decisions = run(
        snapshot(dgx()),
        make_job("fits").replicas(1, gpu=6).created(0),
        make_job("gpus").replicas(1, gpu=4).created(1),
        make_job("model").replicas(1, gpu=1, gpu_model="H100").created(2),
        make_job("cpus").replicas(2, cpu=40000).created(3),
    )
    assert decisions.waiting == {
        "default/gpus": "needs 4 GPUs on one node; largest free block is 2 on node dgx-0 (2 free in total)",
        "default/model": f"needs GPU model H100; no node has it (nodes have {DGX_MODEL})",
        "default/cpus": "needs 2 replicas (80 CPUs exclusive, 4Gi) as one gang; only 1 fit: "
        "node dgx-0 has 63 CPUs free where 80 are needed",
    }


@pytest.mark.parametrize(
    ("demand", "text"),
    [
        pytest.param(Demand(), "no resources", id="nothing"),
        pytest.param(Demand(exclusive_cpus=1, memory=GI), "1 CPU exclusive, 1Gi", id="one-cpu"),
        pytest.param(
            Demand(gpus=4, exclusive_cpus=8, memory=64 * GI),
            "4 GPUs, 8 CPUs exclusive, 64Gi",
            id="gpu-replica",
        ),
        pytest.param(
            Demand(gpu_milli=250, shared_cpu_milli=500, memory=1536 * 2**20),
            "250 milli-GPU, 500m CPU shared, 1536Mi",
            id="shares",
        ),
    ],
)
def test_describe_demand(demand: Demand, text: str) -> None:
    assert describe_demand(demand) == text
