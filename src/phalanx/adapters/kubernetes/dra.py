"""Dynamic Resource Allocation (``resource.k8s.io/v1``) on the wire: slices, claim templates and allocations.

Pure functions, no I/O. With DRA a GPU is not a counted extended resource (``nvidia.com/gpu: 2``) that the
kubelet's device plugin hands out as it likes: it is a named device in a ResourceSlice, and a Pod gets exactly
the devices written into its ResourceClaims' allocation, which the DRA driver on the node then prepares. That is
how Phalanx's choice of GPUs (NVLink, NUMA, health) is enforced on a node. Three parties use this module:

- **The node agent** publishes its node's GPUs as one ResourceSlice (``render_resource_slice``) where no DRA
  driver publishes them (a kwok node, or a node whose GPUs NVIDIA's driver does not serve), in the shape of
  NVIDIA's driver (driver ``gpu.nvidia.com``, pool = the node's name, devices ``gpu-<index>``, attributes
  ``index``, ``uuid``, ``productName``, ``resource.kubernetes.io/pciBusID``) plus what Phalanx schedules on
  and NVIDIA's driver does not publish: ``phalanx.dev/numaNode``, ``phalanx.dev/nvlinkPeers`` (``"1,3"``),
  ``phalanx.dev/nvlinkIsland`` (the lowest index of the GPUs reachable over NVLink, equal for GPUs that can
  talk over NVLink) and ``phalanx.dev/healthy``; capacity ``memory``.
- **The operator** gives every Pod of a role with whole GPUs a claim from a ResourceClaimTemplate of the job
  (``render_claim_template``: one request ``gpus``, ``count`` devices of the configured DeviceClass, owned by
  the job) instead of ``nvidia.com/gpu``; kube-controller-manager makes each Pod's claim from it and names it
  in the Pod's ``status.resourceClaimStatuses`` (``pod_claim_name``).
- **phalanx-scheduler**, before it binds such a Pod, writes the claim's allocation as kube-scheduler would:
  the ``resource.kubernetes.io/delete-protection`` finalizer (``finalizer_patch``), then the devices of the
  placement, the node selector and the reservation for the Pod in one status write (``allocation_patch``). The
  devices are found in the node's slices (``devices_for``): by the GPU's UUID when both sides know it (what
  NVIDIA's driver publishes), else by the ``index`` attribute, else by the name ``gpu-<index>``.

The API server does not check that two claims hold different devices; keeping them apart is the scheduler's
job, as it is for kube-scheduler. A claim is deallocated and deleted by kube-controller-manager once its Pod is
gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.model.nodes import GpuInfo

API_VERSION = "resource.k8s.io/v1"
#: NVIDIA's DRA driver for GPUs: its driver name and the DeviceClass its chart installs.
DEFAULT_DRIVER = "gpu.nvidia.com"
DEFAULT_DEVICE_CLASS = "gpu.nvidia.com"
#: The name of the GPU claim in a Pod (``spec.resourceClaims``), of its one request, and in the container.
CLAIM_NAME = "gpus"
REQUEST_NAME = "gpus"
#: What kube-scheduler puts on a claim it allocates: the claim is not deleted before it is deallocated.
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
#: The Pod annotation naming the DRA driver whose devices its claim must get (set by the operator).
ANNOTATION_DRIVER = "phalanx.dev/dra-driver"
#: ... and the DeviceClass its claim asks for, so the scheduler can tell a missing class before it allocates.
ANNOTATION_DEVICE_CLASS = "phalanx.dev/dra-device-class"
ATTRIBUTE_DOMAIN = "phalanx.dev"
MAX_DEVICES_PER_SLICE = 128  # the API server's limit
#: Kubernetes' standard attribute of a device's PCI address (``0000:07:00.0``), as NVIDIA's driver publishes it.
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"


class AllocationError(ValueError):
    """The node's slices do not have the devices of a placement; the message says which and where."""


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """One device of a ResourceSlice, as an allocation result names it."""

    driver: str
    pool: str
    device: str


def device_name(index: int) -> str:
    """The device of GPU ``index`` in a slice (NVIDIA's driver names its devices ``gpu-<minor>``)."""
    return f"gpu-{index}"


def slice_name(node: str, driver: str = DEFAULT_DRIVER) -> str:
    """The ResourceSlice a node agent publishes for its node."""
    return f"{node}-{driver}"


def nvlink_islands(gpus: Sequence[GpuInfo]) -> dict[int, int]:
    """GPU index -> the lowest index of the GPUs it reaches over NVLink, hop by hop (itself when none)."""
    peers: dict[int, set[int]] = {gpu.index: set() for gpu in gpus}
    for gpu in gpus:
        for peer, links in gpu.nvlinks.items():
            if links > 0 and peer in peers:
                peers[gpu.index].add(peer)
                peers[peer].add(gpu.index)
    island: dict[int, int] = {}
    for start in sorted(peers):
        if start in island:
            continue
        stack, seen = [start], {start}
        while stack:
            for peer in peers[stack.pop()]:
                if peer not in seen:
                    seen.add(peer)
                    stack.append(peer)
        for index in seen:
            island[index] = start
    return island


def _device(gpu: GpuInfo, island: int, healthy: bool) -> dict[str, Any]:
    peers = ",".join(str(peer) for peer, links in sorted(gpu.nvlinks.items()) if links > 0)
    attributes: dict[str, Any] = {
        "index": {"int": gpu.index},
        "productName": {"string": gpu.model},
        f"{ATTRIBUTE_DOMAIN}/numaNode": {"int": gpu.numa},
        f"{ATTRIBUTE_DOMAIN}/nvlinkPeers": {"string": peers},
        f"{ATTRIBUTE_DOMAIN}/nvlinkIsland": {"int": island},
        f"{ATTRIBUTE_DOMAIN}/healthy": {"bool": healthy},
    }
    if gpu.uuid:
        attributes["uuid"] = {"string": gpu.uuid}
    if gpu.pci_bus_id:
        attributes[PCI_BUS_ID] = {"string": gpu.pci_bus_id}
    device: dict[str, Any] = {"name": device_name(gpu.index), "attributes": attributes}
    if gpu.memory:
        device["capacity"] = {"memory": {"value": str(gpu.memory)}}
    return device


def render_resource_slice(
    node: str,
    gpus: Sequence[GpuInfo],
    unhealthy: Iterable[int] = (),
    *,
    driver: str = DEFAULT_DRIVER,
    generation: int = 1,
) -> dict[str, Any]:
    """The ResourceSlice of a node's GPUs, in index order, its unhealthy ones marked ``healthy: false``.

    Unhealthy GPUs stay in the slice (a device that vanishes and comes back would look like a new one to a
    claim); Phalanx's scheduler does not choose them, and a DeviceClass may select ``healthy`` ones only.

    Raises:
        AllocationError: more GPUs than one slice may hold.

    """
    if len(gpus) > MAX_DEVICES_PER_SLICE:
        raise AllocationError(f"node {node} has {len(gpus)} GPUs; one ResourceSlice holds {MAX_DEVICES_PER_SLICE}")
    ordered = sorted(gpus, key=lambda gpu: gpu.index)
    islands = nvlink_islands(ordered)
    bad = set(unhealthy)
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(node, driver),
            "labels": {"app.kubernetes.io/managed-by": "phalanx"},
        },
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [_device(gpu, islands[gpu.index], gpu.healthy and gpu.index not in bad) for gpu in ordered],
        },
    }


def slice_devices(resource_slice: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The devices of a slice, as published."""
    return list(((resource_slice.get("spec") or {}).get("devices")) or [])


def claim_template_name(job_name: str, role: str, uid: str) -> str:
    """The ResourceClaimTemplate of a role's GPUs: named after the job, the role and the job's uid.

    The uid makes a template left by an earlier job of the same name (until the garbage collector removes it)
    a different one.
    """
    return f"{job_name}-{role}-gpus-{uid[:8]}"


def render_claim_template(
    metadata: Mapping[str, Any], gpus: int, device_class: str = DEFAULT_DEVICE_CLASS
) -> dict[str, Any]:
    """A ResourceClaimTemplate asking for exactly ``gpus`` devices of ``device_class``.

    Args:
        metadata: its name, namespace, labels and owner (``rendering.owned_metadata``).
        gpus: how many GPUs each Pod's claim gets.
        device_class: the DeviceClass whose devices it asks for (NVIDIA's driver installs ``gpu.nvidia.com``).

    """
    request = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": gpus}
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": dict(metadata),
        "spec": {"spec": {"devices": {"requests": [{"name": REQUEST_NAME, "exactly": request}]}}},
    }


def pod_claim_source(template: str) -> dict[str, Any]:
    """The Pod's ``spec.resourceClaims`` entry of its GPU claim."""
    return {"name": CLAIM_NAME, "resourceClaimTemplateName": template}


def pod_gets_claim(pod: Mapping[str, Any]) -> bool:
    """Whether the Pod has a GPU claim this module gave it (``spec.resourceClaims`` named ``gpus``)."""
    claims = (pod.get("spec") or {}).get("resourceClaims") or []
    return any(claim.get("name") == CLAIM_NAME for claim in claims)


def pod_claim_name(pod: Mapping[str, Any]) -> str | None:
    """The name of the Pod's GPU claim: given in its spec, or made from its template (None: not made yet)."""
    for claim in (pod.get("spec") or {}).get("resourceClaims") or []:
        if claim.get("name") == CLAIM_NAME and claim.get("resourceClaimName"):
            return str(claim["resourceClaimName"])
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if status.get("name") == CLAIM_NAME and status.get("resourceClaimName"):
            return str(status["resourceClaimName"])
    return None


def _attribute(device: Mapping[str, Any], name: str) -> Any:
    value = (device.get("attributes") or {}).get(name) or {}
    for kind in ("int", "string", "bool", "version"):
        if kind in value:
            return value[kind]
    return None


def _newest_devices(
    slices: Iterable[Mapping[str, Any]], node: str, driver: str | None = None
) -> Iterator[tuple[DeviceRef, Any, Any]]:
    """Each device of ``node``'s slices (of ``driver``; None: any) with its ``uuid`` and ``index`` attributes.

    Of a pool published more than once, only the newest generation counts, as for kube-scheduler.
    """
    own = [
        item
        for item in slices
        if (item.get("spec") or {}).get("nodeName") == node
        and (driver is None or (item.get("spec") or {}).get("driver") == driver)
    ]
    newest: dict[tuple[str, str], int] = {}
    for item in own:
        key = (str(item["spec"].get("driver")), str((item["spec"].get("pool") or {}).get("name")))
        newest[key] = max(newest.get(key, 0), int((item["spec"].get("pool") or {}).get("generation") or 0))
    for item in own:
        spec = item["spec"]
        pool = spec.get("pool") or {}
        if int(pool.get("generation") or 0) != newest[(str(spec.get("driver")), str(pool.get("name")))]:
            continue
        for device in slice_devices(item):
            ref = DeviceRef(str(spec.get("driver")), str(pool.get("name")), str(device.get("name")))
            yield ref, _attribute(device, "uuid"), _attribute(device, "index")


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def devices_for(
    slices: Iterable[Mapping[str, Any]], node: str, driver: str, gpus: Mapping[int, GpuInfo], indices: Sequence[int]
) -> list[DeviceRef]:
    """The devices of ``node``'s slices of ``driver`` that are its GPUs ``indices``, in that order.

    A GPU is matched by its UUID when the node reports one and a device has it, else by the ``index``
    attribute, else by the device name ``gpu-<index>`` (``_newest_devices``: the newest generation of a pool).

    Raises:
        AllocationError: a GPU has no device: the message names the node, the driver and the GPU.

    """
    by_uuid: dict[str, DeviceRef] = {}
    by_index: dict[int, DeviceRef] = {}
    by_name: dict[str, DeviceRef] = {}
    for ref, uuid, index in _newest_devices(slices, node, driver):
        if isinstance(uuid, str) and uuid:
            by_uuid[uuid] = ref
        if _is_index(index):
            by_index[index] = ref
        by_name[ref.device] = ref
    if not by_name:
        raise AllocationError(
            f"node {node} publishes no ResourceSlice of the driver {driver}: run its DRA driver, or "
            "phalanx-node-agent --resource-slices where none runs"
        )
    chosen = []
    for index in indices:
        gpu = gpus.get(index)
        found = [
            by_uuid.get(gpu.uuid) if gpu is not None and gpu.uuid else None,
            by_index.get(index),
            by_name.get(device_name(index)),
        ]
        match = next((item for item in found if item is not None), None)
        if match is None:
            raise AllocationError(f"node {node}'s ResourceSlices of {driver} have no device for GPU {index}")
        chosen.append(match)
    return chosen


def gpu_indices(
    slices: Iterable[Mapping[str, Any]], node: str, gpus: Mapping[int, GpuInfo], devices: Iterable[DeviceRef]
) -> list[int]:
    """The GPU indices of ``node`` that allocated ``devices`` are, the inverse of ``devices_for``.

    A device of another node's pool, or of no GPU Phalanx knows, is left out.
    """
    index_of_uuid = {gpu.uuid: index for index, gpu in gpus.items() if gpu.uuid}
    known: dict[DeviceRef, int] = {}
    for ref, uuid, index in _newest_devices(slices, node):
        if isinstance(uuid, str) and uuid in index_of_uuid:
            index = index_of_uuid[uuid]
        if _is_index(index):
            known[ref] = index
    found = []
    for ref in devices:
        index = known.get(ref)
        if index is None and ref.pool == node and ref.device.startswith("gpu-") and ref.device[4:].isdigit():
            index = int(ref.device[4:])
        if index is not None and index not in found:
            found.append(index)
    return sorted(found)


def pod_device_class(pod: Mapping[str, Any]) -> str | None:
    """The DeviceClass the operator's GPU claim of the Pod asks for (from its annotation; None when unknown)."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_DEVICE_CLASS)
    return str(value) if value else None


def pod_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """Every ResourceClaim a Pod uses, whatever their names in the Pod (made from templates once made)."""
    names = [
        str(c["resourceClaimName"])
        for c in (pod.get("spec") or {}).get("resourceClaims") or []
        if c.get("resourceClaimName")
    ]
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if status.get("resourceClaimName"):
            names.append(str(status["resourceClaimName"]))
    return names


def finalizer_patch(claim: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch adding ``delete-protection`` to the claim as read (None: it has it).

    Its other finalizers stay, and its resourceVersion is the precondition: a claim changed since it was read
    is a conflict, not a lost finalizer.
    """
    meta = claim.get("metadata") or {}
    finalizers = list(meta.get("finalizers") or [])
    if DELETE_PROTECTION in finalizers:
        return None
    return {
        "metadata": {"finalizers": [*finalizers, DELETE_PROTECTION], "resourceVersion": meta.get("resourceVersion")}
    }


def allocation_patch(devices: Sequence[DeviceRef], node: str, pod_name: str, pod_uid: str) -> dict[str, Any]:
    """The status of a claim allocated ``devices`` on ``node`` and reserved for the Pod (a merge patch)."""
    return {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": REQUEST_NAME, "driver": ref.driver, "pool": ref.pool, "device": ref.device}
                        for ref in devices
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": pod_name, "uid": pod_uid}],
        }
    }


def allocated_devices(claim: Mapping[str, Any]) -> list[DeviceRef]:
    """The devices a claim was allocated ([] when it is not)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return [DeviceRef(str(r.get("driver")), str(r.get("pool")), str(r.get("device"))) for r in results]


def reserved_for(claim: Mapping[str, Any], pod_uid: str) -> bool:
    """Whether the claim is reserved for the Pod of ``pod_uid``."""
    return any(entry.get("uid") == pod_uid for entry in (claim.get("status") or {}).get("reservedFor") or [])
