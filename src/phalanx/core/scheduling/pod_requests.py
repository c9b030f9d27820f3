"""What a Pod asks of a node when it has init containers and sidecars, counted as Kubernetes counts it.

A Pod's effective request is, per resource, the larger of two moments: while its init containers run one after
the other (each init container beside the native sidecars — init containers with ``restartPolicy: Always`` —
started before it), and while its containers run (all of them plus every sidecar). A container's request is its
``requests`` entry, or its ``limits`` entry where it gives no request, as Kubernetes defaults it.

Phalanx places a replica by its own container's resources (its exclusive CPUs and GPUs are that container's);
what the replica's init containers and sidecars add on top is its *overhead*, taken from the node's shared CPU
pool and its memory, so the node is never counted fuller or emptier than the kubelet counts it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.core.scheduling.demands import pins_cpus
from phalanx.model.jobs import ReplicaTemplate
from phalanx.model.pods import Container
from phalanx.model.resources import QuantityError, ResourceVector, parse_cpu, parse_memory

GPU_RESOURCE = "nvidia.com/gpu"


def container_request(resources: Mapping[str, Any] | None) -> ResourceVector:
    """A container's request from its ``resources`` (``requests``, else ``limits``); unreadable amounts count 0."""
    resources = resources or {}
    wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    cpu = memory = gpu = 0
    with contextlib.suppress(QuantityError):
        cpu = parse_cpu(wanted.get("cpu", 0))
    with contextlib.suppress(QuantityError):
        memory = parse_memory(wanted.get("memory", 0))
    with contextlib.suppress(ValueError):
        gpu = int(str(wanted.get(GPU_RESOURCE, 0)))
    return ResourceVector(cpu_milli=cpu, memory=memory, gpu=gpu)


def _most(a: ResourceVector, b: ResourceVector) -> ResourceVector:
    return ResourceVector(
        max(a.cpu_milli, b.cpu_milli), max(a.memory, b.memory), max(a.gpu, b.gpu), max(a.gpu_milli, b.gpu_milli)
    )


def pod_request(containers: Iterable[ResourceVector], init: Iterable[tuple[ResourceVector, bool]]) -> ResourceVector:
    """The effective request of a Pod.

    Args:
        containers: the requests of its containers.
        init: its init containers in order, each with whether it is a sidecar (``restartPolicy: Always``).
    """
    sidecars = ResourceVector()
    starting = ResourceVector()
    for request, is_sidecar in init:
        starting = _most(starting, sidecars + request)
        if is_sidecar:
            sidecars = sidecars + request
    running = sidecars
    for request in containers:
        running = running + request
    return _most(starting, running)


def pod_spec_request(spec: Mapping[str, Any]) -> ResourceVector:
    """The effective request of a Pod spec as the API server holds it."""
    containers = [container_request(c.get("resources")) for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    init = [
        (container_request(c.get("resources")), c.get("restartPolicy") == "Always")
        for c in spec.get("initContainers") or []
        if isinstance(c, Mapping)
    ]
    return pod_request(containers, init)


def _extra(container: Container) -> ResourceVector:
    resources = container.resources
    return container_request({"requests": resources.requests, "limits": resources.limits} if resources else None)


def template_overhead(template: ReplicaTemplate) -> ResourceVector:
    """What a replica's init containers and sidecars add to its own container's request (zero without them).

    Init containers come first and sidecars after them, as a replica's Pod is written
    (``adapters.kubernetes.rendering``).
    """
    if not template.init_containers and not template.sidecars:
        return ResourceVector()
    own = template.resources.vector()
    init = [(_extra(c), False) for c in template.init_containers] + [(_extra(c), True) for c in template.sidecars]
    total = pod_request([own], init)
    return ResourceVector(
        max(0, total.cpu_milli - own.cpu_milli),
        max(0, total.memory - own.memory),
        max(0, total.gpu - own.gpu),
        max(0, total.gpu_milli - own.gpu_milli),
    )


def is_guaranteed(template: ReplicaTemplate) -> bool:
    """Whether a replica's Pod is of Kubernetes' Guaranteed QoS class: only such a replica gets exclusive CPUs.

    Its own container's ceiling must be its reservation (``pins_cpus``), and every init container and sidecar
    must give CPU and memory limits with equal requests (or none, which Kubernetes defaults to the limits): the
    kubelet's static CPU manager pins no cores for a Pod one container of which could take more than it asked.
    """
    resources = template.resources
    if not pins_cpus(resources.vector(), resources.ceiling()):
        return False
    return all(_is_guaranteed_container(c) for c in [*template.init_containers, *template.sidecars])


def _is_guaranteed_container(container: Container) -> bool:
    if container.resources is None:
        return False
    limits, requests = container.resources.limits, container.resources.requests
    for name, parse in (("cpu", parse_cpu), ("memory", parse_memory)):
        if name not in limits:
            return False
        try:
            if name in requests and parse(requests[name]) != parse(limits[name]):
                return False
        except QuantityError:
            return False
    return True
