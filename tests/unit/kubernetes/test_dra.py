"""Dynamic Resource Allocation: the slices a node agent publishes, the claims the operator renders, and what
phalanx-scheduler writes before it binds a Pod that claims GPUs (claim first, exactly the placement's devices)."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.adapters.devices.discovery import Discovered
from phalanx.adapters.kubernetes import dra
from phalanx.adapters.kubernetes.api import (
    DEVICECLASSES,
    EVENTS,
    NODES,
    PODS,
    RESOURCECLAIMS,
    RESOURCESLICES,
    TRAININGJOBS,
)
from phalanx.adapters.kubernetes.rendering import (
    RenderError,
    gpu_claim_template,
    render_gpu_claim_templates,
    render_pod,
)
from phalanx.core.reconcile import CreateReplica, Plan
from phalanx.model.jobs import ReplicaPlacement, TrainingJob
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.meta import ObjectMeta
from phalanx.model.nodes import GpuInfo, Node, NodeStatus
from phalanx.model.validation import validate_job
from phalanx.services.kubernetes.apply import PodSettings, render_creates
from phalanx.services.kubernetes.node_agent import AgentSettings, NodeAgent
from phalanx.services.kubernetes.scheduler import KubeScheduler, SchedulerSettings
from support.memory_kube_api import MemoryKubeApi


def paired(count: int = 4, *, uuids: bool = False) -> list[GpuInfo]:
    """GPUs NVLink-bridged in pairs (0-1, 2-3...), half on each NUMA node."""
    return [
        GpuInfo(
            index=i,
            uuid=f"GPU-{i}" if uuids else "",
            pci_bus_id=f"0000:{i + 7:02x}:00.0" if uuids else "",
            model="L40S",
            memory=48 * 2**30,
            numa=i // (count // 2),
            nvlinks={i ^ 1: 4},
        )
        for i in range(count)
    ]


def values(device: dict[str, Any]) -> dict[str, Any]:
    return {name: next(iter(value.values())) for name, value in device["attributes"].items()}


def test_a_slice_lists_every_gpu_with_numa_nvlink_health_and_memory_in_nvidias_shape() -> None:
    published = dra.render_resource_slice("n1", list(reversed(paired(uuids=True))), unhealthy=[3], generation=4)
    assert published["metadata"]["name"] == "n1-gpu.nvidia.com"
    spec = published["spec"]
    assert (spec["driver"], spec["nodeName"]) == ("gpu.nvidia.com", "n1")
    assert spec["pool"] == {"name": "n1", "generation": 4, "resourceSliceCount": 1}
    assert [device["name"] for device in spec["devices"]] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    gpu2 = values(spec["devices"][2])
    assert gpu2 == {
        "index": 2,
        "uuid": "GPU-2",
        "resource.kubernetes.io/pciBusID": "0000:09:00.0",
        "productName": "L40S",
        "phalanx.dev/numaNode": 1,
        "phalanx.dev/nvlinkPeers": "3",
        "phalanx.dev/nvlinkIsland": 2,
        "phalanx.dev/healthy": True,
    }
    assert values(spec["devices"][3])["phalanx.dev/healthy"] is False
    assert spec["devices"][0]["capacity"] == {"memory": {"value": str(48 * 2**30)}}


def test_nvlink_islands_follow_links_hop_by_hop() -> None:
    gpus = [GpuInfo(index=0, nvlinks={1: 1}), GpuInfo(index=1, nvlinks={2: 1}), GpuInfo(index=2), GpuInfo(index=3)]
    assert dra.nvlink_islands(gpus) == {0: 0, 1: 0, 2: 0, 3: 3}


def test_a_node_with_more_gpus_than_a_slice_holds_is_refused_with_the_limit() -> None:
    with pytest.raises(dra.AllocationError, match="one ResourceSlice holds 128"):
        dra.render_resource_slice("big", [GpuInfo(index=i) for i in range(129)])


def test_devices_are_found_by_uuid_then_index_then_name_in_the_newest_generation_of_the_pool() -> None:
    ours = dra.render_resource_slice("n1", paired(uuids=True), generation=2)
    # A driver numbering its devices differently: the UUID decides, not the name.
    renamed = [{**device, "name": f"gpu-{3 - values(device)['index']}"} for device in dra.slice_devices(ours)]
    by_uuid = {**ours, "spec": {**ours["spec"], "devices": renamed}}
    stale = dra.render_resource_slice("n1", paired(), generation=1)
    stale["metadata"]["name"] = "old"
    other_node = dra.render_resource_slice("n2", paired())
    gpus = {gpu.index: gpu for gpu in paired(uuids=True)}
    chosen = dra.devices_for([stale, by_uuid, other_node], "n1", "gpu.nvidia.com", gpus, [2, 3])
    assert chosen == [dra.DeviceRef("gpu.nvidia.com", "n1", "gpu-1"), dra.DeviceRef("gpu.nvidia.com", "n1", "gpu-0")]
    # No UUID on the node's side: the index attribute; none in the slice either: the name.
    without_index = dra.render_resource_slice("n1", paired())
    for device in without_index["spec"]["devices"]:
        del device["attributes"]["index"]
    assert [ref.device for ref in dra.devices_for([without_index], "n1", "gpu.nvidia.com", {}, [1])] == ["gpu-1"]


def test_a_gpu_without_a_device_or_a_node_without_a_slice_is_an_error_naming_them() -> None:
    published = dra.render_resource_slice("n1", paired(2))
    with pytest.raises(
        dra.AllocationError, match=r"node n1's ResourceSlices of gpu\.nvidia\.com have no device for GPU 5"
    ):
        dra.devices_for([published], "n1", "gpu.nvidia.com", {}, [5])
    with pytest.raises(dra.AllocationError, match=r"node n2 publishes no ResourceSlice of the driver gpu\.nvidia\.com"):
        dra.devices_for([published], "n2", "gpu.nvidia.com", {}, [0])


def test_the_allocation_names_the_devices_the_node_and_the_pod_and_the_finalizer_keeps_others() -> None:
    refs = [dra.DeviceRef("gpu.nvidia.com", "n1", "gpu-2"), dra.DeviceRef("gpu.nvidia.com", "n1", "gpu-3")]
    status = dra.allocation_patch(refs, "n1", "job-worker-0", "uid-1")["status"]
    assert status["allocation"]["devices"]["results"][1] == {
        "request": "gpus",
        "driver": "gpu.nvidia.com",
        "pool": "n1",
        "device": "gpu-3",
    }
    assert status["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n1"]
    assert status["reservedFor"] == [{"resource": "pods", "name": "job-worker-0", "uid": "uid-1"}]
    claim = {"metadata": {"finalizers": ["other"], "resourceVersion": "7"}, "status": status}
    assert dra.finalizer_patch(claim) == {
        "metadata": {"finalizers": ["other", dra.DELETE_PROTECTION], "resourceVersion": "7"}
    }
    claim["metadata"]["finalizers"].append(dra.DELETE_PROTECTION)
    assert dra.finalizer_patch(claim) is None
    assert dra.allocated_devices(claim) == refs and dra.reserved_for(claim, "uid-1")


def job(gpus: int = 2, workers: int = 2) -> TrainingJob:
    template = {"image": "example.org/t:1", "command": ["python", "t.py"], "resources": {"cpu": "1", "gpu": gpus}}
    body = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "ddp", "namespace": "team-a", "uid": "0123456789ab"},
        "spec": {
            "type": "pytorch",
            "replicas": {
                "master": {"count": 1, "template": {**template, "resources": {"cpu": "1"}}},
                "worker": {"count": workers, "template": template},
            },
        },
    }
    return validate_job(body, builtin_jobtypes())


def test_a_replica_with_gpus_claims_them_from_its_roles_template_instead_of_counting_them() -> None:
    trainingjob, jobtype = job(), builtin_jobtypes()["pytorch"]
    placement = ReplicaPlacement(node="n1", gpus=[2, 3])
    pod = render_pod(trainingjob, jobtype, "worker", 0, 0, placement=placement, dra_driver="gpu.nvidia.com")
    container = pod["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in container["resources"]["requests"]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert container["resources"]["claims"] == [{"name": "gpus"}]
    template = gpu_claim_template(trainingjob, "worker")
    assert template == "ddp-worker-gpus-01234567"
    assert pod["spec"]["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": template}]
    assert pod["metadata"]["annotations"][dra.ANNOTATION_DRIVER] == "gpu.nvidia.com"
    assert pod["metadata"]["annotations"][dra.ANNOTATION_DEVICE_CLASS] == "gpu.nvidia.com"
    assert dra.pod_gets_claim(pod) and dra.pod_claim_name(pod) is None
    # A role without GPUs claims nothing; without DRA GPUs are counted as before.
    master = render_pod(trainingjob, jobtype, "master", 0, 0, dra_driver="gpu.nvidia.com")
    assert "resourceClaims" not in master["spec"] and not dra.pod_gets_claim(master)
    counted = render_pod(trainingjob, jobtype, "worker", 0, 0, placement=placement)
    assert counted["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    with pytest.raises(RenderError, match="its GPU claim is allocated when it is bound"):
        render_pod(trainingjob, jobtype, "worker", 0, 0, placement=placement, bind=True, dra_driver="gpu.nvidia.com")


def test_the_templates_ask_for_each_roles_gpus_and_belong_to_the_job() -> None:
    (template,) = render_gpu_claim_templates(job(gpus=4), "gpu.example.com")
    assert template["kind"] == "ResourceClaimTemplate" and template["metadata"]["namespace"] == "team-a"
    assert template["metadata"]["ownerReferences"][0]["uid"] == "0123456789ab"
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request == {
        "name": "gpus",
        "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "ExactCount", "count": 4},
    }


def test_a_gang_of_one_that_claims_gpus_is_left_for_the_scheduler_to_bind() -> None:
    placement = ReplicaPlacement(node="n1", gpus=[0, 1])
    trainingjob = job(workers=1)
    status = trainingjob.status.model_copy(update={"placements": {"ddp-worker-0": placement}})
    trainingjob = trainingjob.model_copy(update={"status": status})
    create = Plan(status=status, actions=(CreateReplica("worker", 0, 0, placement),))
    jobtype = builtin_jobtypes()["pytorch"]
    (counted,) = render_creates(trainingjob, jobtype, create, PodSettings())
    (claimed,) = render_creates(trainingjob, jobtype, create, PodSettings(dra_driver="gpu.nvidia.com"))
    assert counted["spec"]["nodeName"] == "n1"
    assert "nodeName" not in claimed["spec"] and dra.pod_gets_claim(claimed)


# -- phalanx-scheduler: the claim before the binding -----------------------------------------------------------


def admitted_job() -> dict[str, Any]:
    template = {"image": "example.org/t:1", "command": ["python", "t.py"], "resources": {"gpu": 2}}
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "ddp", "namespace": "team-a", "uid": "job-uid", "resourceVersion": "1", "generation": 1},
        "spec": {"type": "pytorch", "replicas": {"worker": {"count": 2, "template": template}}},
        "status": {
            "phase": "Admitted",
            "placements": {
                "ddp-worker-0": {"node": "n1", "gpus": [2, 3]},
                "ddp-worker-1": {"node": "n1", "gpus": [0, 1]},
            },
        },
    }


def claiming_pod(name: str, claim: str | None) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {"phalanx.dev/job": "ddp"},
            "annotations": {
                "phalanx.dev/job-uid": "job-uid",
                dra.ANNOTATION_DRIVER: "gpu.nvidia.com",
                dra.ANNOTATION_DEVICE_CLASS: "gpu.nvidia.com",
            },
        },
        "spec": {
            "schedulerName": "phalanx-scheduler",
            "resourceClaims": [dra.pod_claim_source("ddp-worker-gpus-job-uid")],
            "containers": [{"name": "replica", "resources": {"claims": [{"name": "gpus"}]}}],
        },
    }
    if claim is not None:
        pod["status"] = {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": claim}]}
    return pod


@pytest.fixture
def scheduler() -> Any:
    api = MemoryKubeApi()
    node = {
        "metadata": {"name": "n1", "labels": {}},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "4", "pods": "110"}},
    }
    scheduler = KubeScheduler(api, SchedulerSettings(workers=1))
    scheduler.nodes.observe(api.put(NODES, node))
    scheduler.jobs.observe(api.put(TRAININGJOBS, admitted_job()))
    # A driver whose device names are not the indices: only the index attribute says which is which.
    published = dra.render_resource_slice("n1", paired())
    for device in published["spec"]["devices"]:
        device["name"] = f"dev-{values(device)['index']}"
    api.put(RESOURCESLICES, published)
    api.put(DEVICECLASSES, {"metadata": {"name": "gpu.nvidia.com"}, "spec": {}})
    yield scheduler, api
    for informer in scheduler._informers:
        informer.stop()


def test_a_gang_waits_for_its_claims_then_each_claim_gets_exactly_its_placement_before_its_pod_is_bound(
    scheduler: Any,
) -> None:
    kube, api = scheduler
    kube.pods.observe(api.put(PODS, claiming_pod("ddp-worker-0", "ddp-worker-0-gpus-x")))
    kube.pods.observe(api.put(PODS, claiming_pod("ddp-worker-1", None)))
    kube.cycle()
    assert api.writes == [], "no claim is touched and no Pod bound while one of the gang's claims is not made"

    for pod in ("ddp-worker-0", "ddp-worker-1"):
        api.put(RESOURCECLAIMS, {"metadata": {"name": f"{pod}-gpus-x", "namespace": "team-a"}, "spec": {}})
    kube.pods.observe(api.put(PODS, claiming_pod("ddp-worker-1", "ddp-worker-1-gpus-x")))
    assert kube.cycle().bound == 2
    for pod, devices in (("ddp-worker-0", ["dev-2", "dev-3"]), ("ddp-worker-1", ["dev-0", "dev-1"])):
        calls = [(c.verb, c.plural, c.subresource) for c in api.calls if c.name in (pod, f"{pod}-gpus-x")]
        writes = [call for call in calls if call[0] != "get"]
        assert writes == [
            ("patch", "resourceclaims", None),
            ("patch", "resourceclaims", "status"),
            ("bind", "pods", "binding"),
        ], "the finalizer, then the allocation and reservation, then the binding"
        claim = api.get(RESOURCECLAIMS, f"{pod}-gpus-x", "team-a")
        assert [ref.device for ref in dra.allocated_devices(claim)] == devices
        assert dra.reserved_for(claim, api.get(PODS, pod, "team-a")["metadata"]["uid"])
        assert claim["metadata"]["finalizers"] == [dra.DELETE_PROTECTION]


def test_a_gang_whose_one_claim_cannot_get_its_devices_is_not_bound_at_all_and_the_job_is_told(
    scheduler: Any,
) -> None:
    kube, api = scheduler
    job = admitted_job()
    job["status"]["placements"]["ddp-worker-0"]["gpus"] = [6, 7]  # beyond the four the slice lists
    kube.jobs.observe(api.put(TRAININGJOBS, job))
    for pod in ("ddp-worker-0", "ddp-worker-1"):
        api.put(RESOURCECLAIMS, {"metadata": {"name": f"{pod}-gpus-x", "namespace": "team-a"}, "spec": {}})
        kube.pods.observe(api.put(PODS, claiming_pod(pod, f"{pod}-gpus-x")))
    assert kube.cycle().bound == 0
    kube.cycle()
    kube.flush()
    for pod in ("ddp-worker-0", "ddp-worker-1"):
        assert not api.get(PODS, pod, "team-a")["spec"].get("nodeName"), "no half-bound gang"
        assert not dra.allocated_devices(api.get(RESOURCECLAIMS, f"{pod}-gpus-x", "team-a"))
    (event,) = [e for e in api.of(EVENTS) if e["reason"] == "GPUClaimsNotAllocated"]  # once, not every cycle
    assert event["type"] == "Warning"
    assert (
        "no replica is bound: node n1's ResourceSlices of gpu.nvidia.com have no device for GPU 6" in event["message"]
    )


def test_a_claim_of_a_device_class_that_does_not_exist_is_not_allocated(scheduler: Any) -> None:
    kube, api = scheduler
    for pod in ("ddp-worker-0", "ddp-worker-1"):
        api.put(RESOURCECLAIMS, {"metadata": {"name": f"{pod}-gpus-x", "namespace": "team-a"}, "spec": {}})
        body = claiming_pod(pod, f"{pod}-gpus-x")
        body["metadata"]["annotations"][dra.ANNOTATION_DEVICE_CLASS] = "gpu.example.com"
        kube.pods.observe(api.put(PODS, body))
    assert kube.cycle().bound == 0
    kube.flush()
    (event,) = [e for e in api.of(EVENTS) if e["reason"] == "GPUClaimsNotAllocated"]
    assert "the DeviceClass gpu.example.com the GPU claims ask for does not exist" in event["message"]


# -- the node agent's slice ------------------------------------------------------------------------------------


def test_the_agent_publishes_its_slice_once_and_a_new_generation_only_when_a_gpu_changes() -> None:
    api = MemoryKubeApi()
    api.put(NODES, {"metadata": {"name": "n1"}, "status": {}})
    healthy = {"value": True}

    def discover() -> Discovered:
        gpus = paired()
        gpus[1] = gpus[1].model_copy(update={"healthy": healthy["value"]})
        return Discovered(node=Node(metadata=ObjectMeta(name="n1"), status=NodeStatus(gpus=gpus)))

    agent = NodeAgent(api, AgentSettings("n1", resource_slices=True), discover)
    agent.cycle()
    agent.cycle()
    published = api.get(RESOURCESLICES, "n1-gpu.nvidia.com")
    assert published["spec"]["pool"]["generation"] == 1 and len(published["spec"]["devices"]) == 4
    assert [c.verb for c in api.writes if c.plural == "resourceslices"] == ["create"]
    healthy["value"] = False
    agent.cycle()
    published = api.get(RESOURCESLICES, "n1-gpu.nvidia.com")
    assert published["spec"]["pool"]["generation"] == 2
    assert values(published["spec"]["devices"][1])["phalanx.dev/healthy"] is False


def test_the_gpus_another_schedulers_claim_holds_are_found_by_uuid_index_or_name() -> None:
    by_uuid = dra.render_resource_slice("n1", paired(uuids=True))
    for device in by_uuid["spec"]["devices"]:
        device["name"] = f"dev-{values(device)['uuid']}"
        del device["attributes"]["index"]
    gpus = {gpu.index: gpu for gpu in paired(uuids=True)}
    refs = [dra.DeviceRef("gpu.nvidia.com", "n1", "dev-GPU-3"), dra.DeviceRef("gpu.nvidia.com", "n1", "dev-GPU-0")]
    assert dra.gpu_indices([by_uuid], "n1", gpus, refs) == [0, 3]
    # Without a slice naming it: a device gpu-<n> of the node's pool is GPU n; anything else is not a GPU we know.
    named = [dra.DeviceRef("gpu.nvidia.com", "n1", "gpu-2"), dra.DeviceRef("other.example.com", "n1", "nic-0")]
    assert dra.gpu_indices([], "n1", {}, named) == [2]
    assert dra.gpu_indices([], "n2", {}, named[:1]) == []
    pod = {
        "spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "shared"}, {"name": "b"}]},
        "status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "pod-b-x"}]},
    }
    assert dra.pod_claim_names(pod) == ["shared", "pod-b-x"]


def test_describe_says_gpus_are_enforced_only_when_every_claim_is_allocated() -> None:
    from phalanx.adapters.kubernetes.objects import replica_from_pod
    from phalanx.entrypoints.cli.render import DEVICES_ADVISORY, DEVICES_CLAIMED, devices_sentence

    trainingjob = job(workers=2)
    bound = claiming_pod("ddp-worker-0", "ddp-worker-0-gpus-x")
    bound["spec"]["nodeName"] = "n1"
    waiting = claiming_pod("ddp-worker-1", "ddp-worker-1-gpus-x")
    replicas = [replica_from_pod(bound, trainingjob), replica_from_pod(waiting, trainingjob)]
    sentence = devices_sentence(replicas)
    assert "1 of 2 are not yet (ddp-worker-1)" in sentence and "GPUClaimsNotAllocated" in sentence
    assert devices_sentence(replicas[:1]) == DEVICES_CLAIMED
    counted = {"metadata": {"name": "ddp-worker-0", "labels": {}}, "spec": {"nodeName": "n1"}}
    assert devices_sentence([replica_from_pod(counted, trainingjob)]) == DEVICES_ADVISORY


def test_describe_shows_a_pod_not_yet_bound_on_its_planned_node_as_planned() -> None:
    import io

    from rich.console import Console

    from phalanx.adapters.kubernetes.objects import replica_from_pod
    from phalanx.entrypoints.cli.render import print_description
    from phalanx.model.jobs import TrainingJobStatus
    from phalanx.services.operations import JobDescription

    planned = {f"ddp-worker-{i}": ReplicaPlacement(node="n1", gpus=[2 * i, 2 * i + 1]) for i in range(2)}
    trainingjob = job(workers=2)
    trainingjob = trainingjob.model_copy(update={"status": TrainingJobStatus(phase="Downloading", placements=planned)})
    bound = claiming_pod("ddp-worker-0", "ddp-worker-0-gpus-x")
    bound["spec"]["nodeName"] = "n1"
    waiting = claiming_pod("ddp-worker-1", "ddp-worker-1-gpus-x")
    replicas = [replica_from_pod(bound, trainingjob), replica_from_pod(waiting, trainingjob)]
    assert [replica.status.bound for replica in replicas] == [True, False]
    out = io.StringIO()
    print_description(Console(file=out, width=200), JobDescription(trainingjob, replicas, []), pods=True)
    replica_rows = [line for line in out.getvalue().split("Replicas", 1)[1].splitlines() if "ddp-worker-" in line]
    assert any("ddp-worker-1" in line and "n1 (planned)" in line for line in replica_rows), replica_rows
    assert any("ddp-worker-0" in line and "n1" in line and "planned" not in line for line in replica_rows)
