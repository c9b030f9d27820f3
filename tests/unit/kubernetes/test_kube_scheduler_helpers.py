"""phalanx-scheduler's pure helpers: what a Pod requests, and what Pods Phalanx did not place hold."""

from __future__ import annotations

from phalanx.adapters.kubernetes.objects import node_from_object
from phalanx.model.jobs import ReplicaPlacement
from phalanx.model.resources import ResourceVector
from phalanx.services.kube_scheduler import _foreign_holdings, pod_requests


def test_pod_requests_sum_containers_and_fall_back_to_limits() -> None:
    pod = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "2"}}},
                {"resources": {"limits": {"cpu": "1", "memory": "512Mi"}}},
            ]
        }
    }
    assert pod_requests(pod) == ResourceVector(cpu_milli=1500, memory=3 * 2**29, gpu=2)


def test_foreign_gpu_pods_take_the_highest_free_indices() -> None:
    node = node_from_object(
        {
            "metadata": {"name": "n"},
            "status": {"allocatable": {"cpu": "4", "memory": "1Gi", "nvidia.com/gpu": "4"}},
        }
    )
    held = [(ReplicaPlacement(node="n", gpus=[3]), ResourceVector(gpu=1))]
    extra = _foreign_holdings({"n": [ResourceVector(cpu_milli=100, gpu=2)]}, held, [node])
    assert [(p.node, p.gpus) for p, _ in extra] == [("n", [2, 1])]
    assert extra[0][1] == ResourceVector(cpu_milli=100, gpu=2)
