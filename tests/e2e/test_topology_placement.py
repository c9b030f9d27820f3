"""phalanx-scheduler places through core.scheduling's plugins: a topology-aware GPU choice on a kwok node.

The node advertises the DGX-1 V100 hybrid cube-mesh (``phalanx.model.topologies``) in its topology annotation.
With one GPU already held, a 4-GPU replica must get the other, fully NVLinked quad; the lowest free indices,
which a topology-blind scheduler would hand out, mix quads and include pairs without NVLink.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations
from typing import Any

import pytest

import k8s_testenv
from components import Components
from phalanx.model.topologies import DGX1_V100, gpu_layout
from support.sim_jobs import gpu_job
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
LAYOUT = gpu_layout(DGX1_V100)
LINKED = {frozenset((gpu.index, peer)) for gpu in LAYOUT for peer in gpu.nvlinks}


def dgx1_annotation() -> dict[str, Any]:
    numa = sorted({gpu.numa for gpu in LAYOUT})
    return {
        "numaNodes": [{"id": n, "gpus": [gpu.index for gpu in LAYOUT if gpu.numa == n]} for n in numa],
        "nvlink": {"type": "NV2", "pairs": sorted(sorted(pair) for pair in LINKED)},
    }


def job(name: str, gpus: int, model: str) -> dict[str, Any]:
    return gpu_job(name, model, gpus=gpus, jobtype="pytorch", cpu="2", memory="4Gi")


@pytest.fixture
def cube_mesh_node(components: Components) -> Iterator[tuple[str, str]]:
    kube = components.kube
    name, model = kube.unique("cube-mesh"), kube.unique("V100-SXM2")
    k8s_testenv.create_fake_gpu_nodes(kube.env, [name], product=model, topology=dgx1_annotation())
    yield name, model
    kube.request("DELETE", f"/api/v1/nodes/{name}")


def bound_gpus(components: Components, namespace: str, job_name: str) -> list[int]:
    kube = components.kube

    def bound() -> list[int] | None:
        pods = kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=phalanx.dev/job={job_name}")["items"]
        if len(pods) == 1 and pods[0]["spec"].get("nodeName"):
            return [int(gpu) for gpu in pods[0]["metadata"]["annotations"]["phalanx.dev/gpus"].split(",")]
        return None

    return wait_until(bound, 60, f"{job_name}'s pod bound with its GPUs")


def test_a_four_gpu_pod_gets_the_free_nvlinked_quad(
    components: Components, namespace: str, cube_mesh_node: tuple[str, str]
) -> None:
    kube = components.kube
    _, model = cube_mesh_node
    components.operator()
    components.scheduler()
    kube.create(JOBS.format(ns=namespace), job("first", 1, model))
    [taken] = bound_gpus(components, namespace, "first")

    kube.create(JOBS.format(ns=namespace), job("wide", 4, model))
    gpus = bound_gpus(components, namespace, "wide")
    assert taken not in gpus and len(set(gpus)) == 4
    assert [pair for pair in combinations(gpus, 2) if frozenset(pair) not in LINKED] == [], gpus
    lowest_free = [index for index in range(8) if index != taken][:4]
    assert any(frozenset(pair) not in LINKED for pair in combinations(lowest_free, 2)), "the test cannot tell"
