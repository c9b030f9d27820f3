"""A replica's resources: what Phalanx reserves (``cpu``, ``memory``) and the ceiling it enforces (``limits``).

Kubernetes' requests and limits: the scheduler, quotas and the simulator count the reserved amount; the Pod's
limits (Kubernetes) and the replica's cgroup (embedded runtime) hold the ceiling. Only a replica whose ceiling is
its reservation (Guaranteed QoS) gets exclusive cores.
"""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.core.scheduling.demands import pins_cpus
from phalanx.model.errors import SpecError
from phalanx.model.jobs import Resources
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.resources import ResourceVector
from phalanx.model.validation import validate_job
from phalanx.services.scheduling import replica_requests

JOBTYPES = builtin_jobtypes()
GI = 2**30
RESOURCES = "spec.replicas.worker.template.resources"


def job(resources: dict[str, Any], **spec: Any) -> dict[str, Any]:
    template = {"command": ["true"], "resources": resources}
    return {"metadata": {"name": "j"}, "spec": {"replicas": {"worker": {"template": template}}, **spec}}


def resources_of(document: dict[str, Any]) -> Resources:
    return validate_job(document, JOBTYPES).spec.replicas["worker"].template.resources


def refusals(document: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        validate_job(document, JOBTYPES)
    return {error.path: error.message for error in caught.value.errors}


def test_a_ceiling_above_the_reservation_is_kept_and_the_reservation_is_what_is_counted() -> None:
    resources = resources_of(job({"cpu": 2, "memory": "4Gi", "limits": {"cpu": "4", "memory": "8Gi"}}))
    assert resources.vector() == ResourceVector(cpu_milli=2000, memory=4 * GI)
    assert resources.ceiling() == ResourceVector(cpu_milli=4000, memory=8 * GI)


def test_without_limits_the_ceiling_is_the_reservation() -> None:
    resources = resources_of(job({"cpu": "1500m", "memory": "2Gi", "gpu": 1}))
    assert resources.limits is None
    assert resources.ceiling() == resources.vector() == ResourceVector(cpu_milli=1500, memory=2 * GI, gpu=1)


def test_a_ceiling_of_one_resource_leaves_the_other_at_its_reservation() -> None:
    resources = resources_of(job({"cpu": 1, "memory": "1Gi", "limits": {"memory": "3Gi"}}))
    assert resources.ceiling() == ResourceVector(cpu_milli=1000, memory=3 * GI)


def test_a_size_sets_the_reservation_and_a_ceiling_lifts_what_is_enforced() -> None:
    # medium reserves 2 CPUs and 8Gi.
    resources = resources_of(job({"limits": {"cpu": 6, "memory": "16Gi"}}, size="medium"))
    assert resources.vector() == ResourceVector(cpu_milli=2000, memory=8 * GI)
    assert resources.ceiling() == ResourceVector(cpu_milli=6000, memory=16 * GI)


@pytest.mark.parametrize(
    ("resources", "spec", "path", "words"),
    [
        ({"cpu": 4, "limits": {"cpu": 2}}, {}, f"{RESOURCES}.limits.cpu", "2 is below the 4 CPU reserved"),
        ({"memory": "4Gi", "limits": {"memory": "1Gi"}}, {}, f"{RESOURCES}.limits.memory", "1Gi is below the 4Gi"),
        # The reservation came from the size (large: 4 CPUs): the ceiling is checked after defaulting.
        ({"limits": {"cpu": 2}}, {"size": "large"}, f"{RESOURCES}.limits.cpu", "size's"),
        ({"gpu": 1, "limits": {"gpu": 2}}, {}, f"{RESOURCES}.limits.gpu", "GPUs have no ceiling"),
        ({"limits": {"nvidia.com/gpu": 1}}, {}, f"{RESOURCES}.limits.nvidia.com/gpu", "set the GPUs with"),
        ({"limits": {"cpu": 0}}, {}, f"{RESOURCES}.limits.cpu", "must be > 0"),
        ({"limits": {"ephemeralStorage": "1Gi"}}, {}, f"{RESOURCES}.limits.ephemeralStorage", "unknown field"),
    ],
    ids=["cpu-below", "memory-below", "below-the-size", "gpu", "gpu-kubernetes-name", "zero", "unknown"],
)
def test_a_bad_ceiling_is_refused_at_its_path(
    resources: dict[str, Any], spec: dict[str, Any], path: str, words: str
) -> None:
    found = refusals(job(resources, **spec))
    assert path in found, found
    assert words in found[path]


@pytest.mark.parametrize(
    ("reserved", "ceiling", "pinned"),
    [
        (ResourceVector(cpu_milli=2000, memory=GI), ResourceVector(cpu_milli=2000, memory=GI), True),
        (ResourceVector(cpu_milli=2000, memory=GI), ResourceVector(cpu_milli=4000, memory=GI), False),
        # A memory ceiling above makes the Pod Burstable: the kubelet's static CPU manager pins no cores for it.
        (ResourceVector(cpu_milli=2000, memory=GI), ResourceVector(cpu_milli=2000, memory=2 * GI), False),
    ],
    ids=["guaranteed", "cpu-ceiling", "memory-ceiling"],
)
def test_only_a_replica_without_a_ceiling_above_its_reservation_pins_cpus(
    reserved: ResourceVector, ceiling: ResourceVector, pinned: bool
) -> None:
    assert pins_cpus(reserved, ceiling) is pinned


def test_the_scheduler_sees_the_reservation_and_shares_cores_with_a_bursting_replica() -> None:
    bursting = validate_job(job({"cpu": 2, "memory": "1Gi", "limits": {"cpu": 4}}), JOBTYPES)
    guaranteed = validate_job(job({"cpu": 2, "memory": "1Gi"}), JOBTYPES)
    [request] = replica_requests(bursting)
    assert request.resources == ResourceVector(cpu_milli=2000, memory=GI)
    assert request.pin_cpus is False
    assert [r.pin_cpus for r in replica_requests(guaranteed)] == [True]


@pytest.mark.parametrize(
    ("sidecar_resources", "pinned"),
    [
        ({"limits": {"cpu": "100m", "memory": "64Mi"}}, True),  # requests default to the limits: Guaranteed
        ({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}, True),
        (None, False),  # no limits: the Pod is Burstable
        ({"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}, False),
        ({"limits": {"cpu": "100m"}}, False),  # no memory limit
    ],
    ids=["limits-only", "equal", "none", "cpu-above", "no-memory-limit"],
)
def test_a_sidecar_that_is_not_guaranteed_leaves_the_replica_without_exclusive_cpus(
    sidecar_resources: dict[str, Any] | None, pinned: bool
) -> None:
    # Kubernetes' QoS class counts every container of the Pod, init containers and sidecars too.
    sidecar: dict[str, Any] = {"name": "shipper", "image": "example.org/shipper:1"}
    if sidecar_resources is not None:
        sidecar["resources"] = sidecar_resources
    document = job({"cpu": 2, "memory": "1Gi"})
    document["spec"]["replicas"]["worker"]["template"]["sidecars"] = [sidecar]
    [request] = replica_requests(validate_job(document, JOBTYPES))
    assert request.pin_cpus is pinned
