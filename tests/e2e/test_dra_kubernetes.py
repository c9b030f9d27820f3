"""GPUs through Dynamic Resource Allocation on a real control plane, side by side with kube-scheduler's own DRA.

What is real: the API server serving ``resource.k8s.io/v1``, kube-controller-manager (it makes each Pod's
ResourceClaim from its template, and deallocates and deletes it once the Pod is gone), kube-scheduler (its DRA
allocator), phalanx-operator with ``--gpu-allocation dra``, phalanx-scheduler, and two phalanx-node-agents that
publish their node's GPUs as ResourceSlices (``--resource-slices``). What is simulated: the nodes (kwok) and their
GPUs (an inventory file the agents read: no DRA driver prepares anything on a kwok node).

The two nodes are alike: 8 GPUs, 0-3 on NUMA node 0 and 4-7 on NUMA node 1, NVLink-bridged in pairs (0-1, 2-3,
4-5, 6-7), as PCIe servers with NVLink bridges are. On each, the same claims arrive one after another: 1 GPU,
2 GPUs, a gang of two replicas of 2 GPUs, and 1 GPU, eight GPUs in all. Phalanx's on node ``a``, kube-scheduler's
(plain Pods with claims from ResourceClaimTemplates, ``schedulerName: default-scheduler``) on node ``b``.

- The agents publish one slice per node with the attributes Phalanx schedules on.
- Every claim of a Phalanx Pod is allocated exactly the GPUs of the Pod's placement, reserved for the Pod and
  protected by the finalizer, before the Pod is bound; ``describe job`` says the GPUs are enforced.
- Both schedulers allocate every claim (five each). Phalanx's 2-GPU claims are NVLink pairs within one NUMA
  node; kube-scheduler's first-fit allocator, which knows no topology, hands out pairs without NVLink.
- A deleted job's claims are deallocated and deleted by kube-controller-manager (the finalizer does not strand
  them).
- A GPU kube-scheduler's claim holds on Phalanx's node is held for phalanx-scheduler too: a job that would need
  it waits until that Pod is gone, then gets it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import k8s_testenv
from components import Components, phalanx_cli, wait_alive
from support.sim_jobs import gpu_job
from support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
RESOURCE = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7))
LINKED = {frozenset(pair) for pair in PAIRS}
GPUS = 8


def numa_of(index: int) -> int:
    return index // 4


def inventory(nodes: list[str], model: str) -> list[dict[str, Any]]:
    """Simulated servers: 32 CPUs on two NUMA nodes, 8 GPUs NVLink-bridged in pairs."""
    peer = {a: b for pair in PAIRS for a, b in (pair, pair[::-1])}
    return [
        {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "Node",
            "metadata": {"name": node},
            "status": {
                "memory": 256 * 2**30,
                "cpus": [{"id": cpu, "core": cpu, "socket": cpu // 16, "numa": cpu // 16} for cpu in range(32)],
                "gpus": [
                    {
                        "index": index,
                        "uuid": f"GPU-{node}-{index}",
                        "model": model,
                        "memory": 48 * 2**30,
                        "numa": numa_of(index),
                        "nvlinks": {peer[index]: 4},
                    }
                    for index in range(GPUS)
                ],
            },
        }
        for node in nodes
    ]


@pytest.fixture
def dra_nodes(components: Components, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """Nodes ``a-…`` (Phalanx's) and ``b-…`` (kube-scheduler's), their agents publishing slices; the GPU model."""
    kube = components.kube
    model = kube.unique("DRA-GPU")
    nodes = [kube.unique("a-dra"), kube.unique("b-dra")]
    devices = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER}}
    devices["spec"] = {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}
    created = kube.request("POST", f"{RESOURCE}/deviceclasses", devices)
    assert created.status_code in (201, 409), created.text  # as NVIDIA's chart installs it; one per cluster
    k8s_testenv.create_fake_gpu_nodes(kube.env, nodes, gpus=GPUS, product=model)
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump_all(inventory(nodes, model)))
    for node in nodes:
        wait_alive(components.node_agent(node, "--inventory", str(path), "--resource-slices", "--interval", "0.2"))
    wait_alive(components.operator("--gpu-allocation", "dra"))
    wait_alive(components.scheduler("--lease-duration", "3"))
    yield nodes[0], nodes[1], model
    for node in nodes:
        kube.request("DELETE", f"/api/v1/nodes/{node}")
        kube.request("DELETE", f"{RESOURCE}/resourceslices/{node}-{DRIVER}")


def attribute(device: dict[str, Any], name: str) -> Any:
    return next(iter(device["attributes"][name].values()))


def claim_of(kube: Any, pod: dict[str, Any]) -> dict[str, Any]:
    (status,) = pod["status"]["resourceClaimStatuses"]
    return kube.get(
        f"{RESOURCE}/namespaces/{pod['metadata']['namespace']}/resourceclaims/{status['resourceClaimName']}"
    )


def allocated(claim: dict[str, Any]) -> list[int]:
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return sorted(int(result["device"].removeprefix("gpu-")) for result in results)


def bound_pods(kube: Any, namespace: str, selector: str, count: int) -> list[dict[str, Any]]:
    def bound() -> list[dict[str, Any]] | None:
        pods = kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")["items"]
        done = [pod for pod in pods if pod["spec"].get("nodeName")]
        return done if len(done) == count else None

    return wait_until(bound, 90, f"{count} pod(s) of {selector} bound")


def pinned(job: dict[str, Any], node: str) -> dict[str, Any]:
    job["spec"]["replicas"]["worker"]["template"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return job


def claim_template(name: str, gpus: int) -> dict[str, Any]:
    request = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": gpus}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": request}]}}},
    }


def plain_pod(name: str, node: str, template: str) -> dict[str, Any]:
    """A Pod for kube-scheduler, claiming GPUs from ``template``; kwok runs it until it is deleted."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"dra-peer": "kube-scheduler"},
            "annotations": {"phalanx.dev/sim-hang": "true"},
        },
        "spec": {
            "schedulerName": "default-scheduler",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
            "containers": [
                {"name": "main", "image": "example.org/trainer:1", "resources": {"claims": [{"name": "gpus"}]}}
            ],
        },
    }


def test_claims_get_the_placements_gpus_and_phalanx_keeps_nvlink_pairs_where_kube_scheduler_does_not(
    components: Components, namespace: str, dra_nodes: tuple[str, str, str], tmp_path: Path
) -> None:
    kube = components.kube
    node_a, node_b, model = dra_nodes

    # The agents' slices: every GPU, with what Phalanx schedules on.
    for node in (node_a, node_b):
        published = kube.wait_for(
            f"{RESOURCE}/resourceslices/{node}-{DRIVER}",
            lambda s: len(s["spec"]["devices"]) == GPUS,
            30,
            f"{node}'s ResourceSlice",
        )
        assert published["spec"]["driver"] == DRIVER and published["spec"]["nodeName"] == node
        assert published["spec"]["pool"]["name"] == node
        devices = {device["name"]: device for device in published["spec"]["devices"]}
        assert attribute(devices["gpu-2"], "phalanx.dev/numaNode") == 0
        assert attribute(devices["gpu-5"], "phalanx.dev/numaNode") == 1
        assert attribute(devices["gpu-2"], "phalanx.dev/nvlinkPeers") == "3"
        assert attribute(devices["gpu-6"], "phalanx.dev/nvlinkIsland") == 6
        assert attribute(devices["gpu-6"], "uuid") == f"GPU-{node}-6"
        assert attribute(devices["gpu-6"], "productName") == model
        assert attribute(devices["gpu-6"], "phalanx.dev/healthy") is True
        assert devices["gpu-6"]["capacity"]["memory"]["value"] in ("48Gi", str(48 * 2**30))

    # Phalanx: the claims arrive one after another, each waiting until the one before holds its GPUs.
    jobs_path = JOBS.format(ns=namespace)
    shapes = (("one", 1, 1), ("pair", 1, 2), ("gang", 2, 2), ("last", 1, 1))
    phalanx_claims: list[list[int]] = []
    for name, workers, gpus in shapes:
        kube.create(jobs_path, pinned(gpu_job(name, model, workers=workers, gpus=gpus), node_a))
        for pod in bound_pods(kube, namespace, f"phalanx.dev/job={name}", workers):
            assert pod["spec"]["nodeName"] == node_a
            assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"].get("limits", {})
            placed = sorted(int(gpu) for gpu in pod["metadata"]["annotations"]["phalanx.dev/gpus"].split(","))
            claim = claim_of(kube, pod)
            assert allocated(claim) == placed, (name, claim.get("status"))
            results = claim["status"]["allocation"]["devices"]["results"]
            assert {(r["driver"], r["pool"], r["request"]) for r in results} == {(DRIVER, node_a, "gpus")}
            terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
            assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_a]}]}]
            assert claim["status"]["reservedFor"] == [
                {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
            ]
            assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
            phalanx_claims.append(placed)

    described = " ".join(phalanx_cli(kube, namespace, tmp_path, "describe", "job", "gang").stdout.split())
    assert "which GPUs are enforced: each replica's ResourceClaim is allocated exactly these GPUs" in described

    # kube-scheduler: the same claims, in the same order, on the twin node.
    for gpus in (1, 2):
        kube.create(f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates", claim_template(f"gpus-{gpus}", gpus))
    peer_claims: list[list[int]] = []
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    for number, gpus in enumerate((1, 2, 2, 2, 1)):
        kube.create(pods_path, plain_pod(f"peer-{number}", node_b, f"gpus-{gpus}"))
        pod = wait_until(
            lambda n=number: (p := kube.get(f"{pods_path}/peer-{n}"))["spec"].get("nodeName") and p,
            90,
            f"kube-scheduler binding peer-{number}",
        )
        assert pod["spec"]["nodeName"] == node_b
        peer_claims.append(allocated(claim_of(kube, pod)))

    def pairs(claims: list[list[int]]) -> list[frozenset[int]]:
        return [frozenset(claim) for claim in claims if len(claim) == 2]

    assert len(phalanx_claims) == len(peer_claims) == 5  # every claim allocated, by both
    assert sorted(gpu for claim in phalanx_claims for gpu in claim) == list(range(GPUS))  # each GPU once
    assert sorted(gpu for claim in peer_claims for gpu in claim) == list(range(GPUS))
    assert all(pair in LINKED for pair in pairs(phalanx_claims)), phalanx_claims
    assert all(len({numa_of(gpu) for gpu in pair}) == 1 for pair in pairs(phalanx_claims)), phalanx_claims
    unlinked = [sorted(pair) for pair in pairs(peer_claims) if pair not in LINKED]
    assert unlinked, f"kube-scheduler's pairs {peer_claims} were all NVLinked: nothing to compare"
    print(f"DRA claims: phalanx-scheduler {phalanx_claims}; kube-scheduler {peer_claims} (no NVLink: {unlinked})")

    # The agents checked their GPUs many times meanwhile (every 0.2 s): a slice is written again only on a change.
    for node in (node_a, node_b):
        assert kube.get(f"{RESOURCE}/resourceslices/{node}-{DRIVER}")["spec"]["pool"]["generation"] == 1

    # A deleted job's claim is deallocated and deleted once its Pod is gone.
    (pod,) = kube.get(f"{pods_path}?labelSelector=phalanx.dev/job=one")["items"]
    freed = allocated(claim_of(kube, pod))
    claim_path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{claim_of(kube, pod)['metadata']['name']}"
    kube.request("DELETE", f"{jobs_path}/one")
    wait_until(lambda: not kube.exists(claim_path), 90, "the deleted job's claim gone")

    # kube-scheduler takes the freed GPU on Phalanx's node: phalanx-scheduler sees that claim's device as held
    # and gives it to nobody else; a 1-GPU job waits, saying why, instead of sharing it.
    kube.create(pods_path, plain_pod("peer-on-a", node_a, "gpus-1"))
    taken = wait_until(
        lambda: (p := kube.get(f"{pods_path}/peer-on-a"))["spec"].get("nodeName") and allocated(claim_of(kube, p)),
        90,
        "kube-scheduler allocating the freed GPU",
    )
    assert taken == freed
    kube.create(jobs_path, pinned(gpu_job("late", model, gpus=1), node_a))
    late = kube.wait_for(
        f"{jobs_path}/late",
        lambda j: "GPU" in str((j.get("status") or {}).get("message") or ""),
        60,
        "the late job waiting, saying why",
    )
    assert late["status"]["phase"] == "Queued", late["status"]
    assert kube.get(f"{pods_path}?labelSelector=phalanx.dev/job=late")["items"] == []
    kube.request("DELETE", f"{pods_path}/peer-on-a")
    (bound,) = bound_pods(kube, namespace, "phalanx.dev/job=late", 1)
    assert allocated(claim_of(kube, bound)) == freed, "the GPU went to the waiting job once kube-scheduler's Pod left"
