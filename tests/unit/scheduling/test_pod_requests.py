"""Init containers and sidecars count as Kubernetes counts them (``core.scheduling.pod_requests``).

Before, the scheduler placed a replica by its own container only, and summed only ``containers`` of a foreign
Pod: a replica with a 1-CPU sidecar was charged 1 CPU less than the kubelet admits it for.
"""

from __future__ import annotations

from scheduling_builders import GI, make_node

from phalanx.core.scheduling import build_snapshot
from phalanx.core.scheduling.demands import demand_of
from phalanx.core.scheduling.holdings import usage_of
from phalanx.core.scheduling.pod_requests import pod_request, pod_spec_request, template_overhead
from phalanx.model.jobs import ReplicaPlacement, ReplicaTemplate, TrainingJob
from phalanx.model.resources import ResourceVector
from phalanx.services.scheduling import replica_requests

MI = 2**20


def cpu(milli: int, memory: int = 0) -> ResourceVector:
    return ResourceVector(cpu_milli=milli, memory=memory)


def test_containers_and_sidecars_add_up_and_init_containers_take_their_peak() -> None:
    main = [cpu(1000, 100 * MI)]
    assert pod_request(main, []) == cpu(1000, 100 * MI)
    # a big init container alone is the peak
    assert pod_request(main, [(cpu(3000, 10 * MI), False)]) == cpu(3000, 100 * MI)
    # a sidecar runs beside the main container and beside the init containers after it
    assert pod_request(main, [(cpu(500, 50 * MI), True), (cpu(2000), False)]) == cpu(2500, 150 * MI)
    assert pod_request(main, [(cpu(2000), False), (cpu(500, 50 * MI), True)]) == cpu(2000, 150 * MI)


def test_a_pod_spec_counts_limits_where_no_request_is_given() -> None:
    spec = {
        "containers": [{"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "1Gi"}}}],
        "initContainers": [
            {"resources": {"requests": {"cpu": "4"}}},
            {"restartPolicy": "Always", "resources": {"limits": {"cpu": "250m", "memory": "64Mi"}}},
        ],
    }
    assert pod_spec_request(spec) == cpu(4000, GI + 64 * MI)


def job_with_sidecar() -> TrainingJob:
    template = {
        "command": ["python", "train.py"],
        "resources": {"cpu": 2, "memory": "1Gi"},
        # Limits equal to the requests, on CPU and memory: the Pod is Guaranteed, so its own CPUs may be exclusive
        # (test_resource_limits.py: without them the kubelet pins none, and neither does Phalanx).
        "initContainers": [
            {"name": "fetch", "command": ["true"], "resources": {"limits": {"cpu": "3", "memory": "64Mi"}}}
        ],
        "sidecars": [{"name": "log", "command": ["tail"], "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}}}],
    }
    return TrainingJob.model_validate(
        {"metadata": {"name": "j"}, "spec": {"replicas": {"worker": {"count": 2, "template": template}}}}
    )


def test_a_replica_with_an_init_container_and_a_sidecar_carries_their_overhead() -> None:
    template = job_with_sidecar().spec.replicas["worker"].template
    # running: 2 + 0.5 CPU, 1Gi + 128Mi; starting: 3 CPU (init), 64Mi -> 3 CPU, 1Gi + 128Mi
    assert template_overhead(template) == cpu(1000, 128 * MI)
    assert template_overhead(ReplicaTemplate(command=["x"])) == ResourceVector()
    request = replica_requests(job_with_sidecar())[0]
    assert request.overhead == cpu(1000, 128 * MI)
    demand = demand_of(request)
    # the replica's own 2 CPUs stay exclusive cores; the overhead comes from the shared pool
    assert (demand.exclusive_cpus, demand.shared_cpu_milli, demand.memory) == (2, 1000, GI + 128 * MI)
    assert usage_of(request).cpu_milli == 3000


def test_a_held_exclusive_placement_counts_its_overhead_in_the_shared_pool() -> None:
    node = make_node("n").cpus().obj()
    request = replica_requests(job_with_sidecar())[0]
    placement = ReplicaPlacement(node="n", cpus=[0, 1])
    (snap,) = build_snapshot([node], [(placement, request.total())]).nodes
    assert snap.used_exclusive_cpus == frozenset({0, 1})
    assert snap.used_shared_cpu_milli == 1000
    assert snap.used_memory == GI + 128 * MI
