"""holdings_of: what replicas, Pods and placements hold on nodes, the same for the embedded runtime and Kubernetes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from phalanx.adapters.kubernetes.objects import job_from_object, node_from_object
from phalanx.model.jobs import ReplicaPlacement, TrainingJob
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.meta import ObjectMeta
from phalanx.model.replicas import Replica, ReplicaObjectSpec
from phalanx.model.resources import ResourceVector
from phalanx.services.kubernetes.scheduler import KubeScheduler, SchedulerSettings
from phalanx.services.scheduling import Occupant, holdings_of, replica_occupant, running_jobs

T0 = datetime(2026, 1, 1, tzinfo=UTC)

WORKER = ResourceVector(cpu_milli=2000, memory=2**30, gpu=1)


def job(
    phase: str, placements: dict[str, dict[str, Any]], count: int = 2, run_policy: dict[str, Any] | None = None
) -> TrainingJob:
    obj = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "ddp", "namespace": "team-a", "uid": "u-1", "generation": 1},
        "spec": {
            "type": "generic",
            "replicas": {
                "worker": {
                    "count": count,
                    "template": {"command": ["true"], "resources": {"cpu": "2", "memory": "1Gi", "gpu": 1}},
                }
            },
            "runPolicy": run_policy or {},
        },
        "status": {"phase": phase, "placements": placements},
    }
    return job_from_object(obj, builtin_jobtypes())


def placed(gpu: int, node: str = "n") -> dict[str, Any]:
    return {"node": node, "gpus": [gpu]}


def replica(name: str, gpu: int, job_uid: str = "u-1") -> Replica:
    spec = ReplicaObjectSpec(
        job_name="ddp",
        job_uid=job_uid,
        role="worker",
        index=0,
        command=["true"],
        placement=ReplicaPlacement(node="n", gpus=[gpu]),
        cpu_milli=500,
        memory=7,
    )
    return Replica(metadata=ObjectMeta(name=name, namespace="team-a"), spec=spec)


def node(gpus: int = 4) -> Any:
    allocatable = {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": str(gpus)}
    return node_from_object({"metadata": {"name": "n"}, "status": {"allocatable": allocatable}})


def test_a_placement_without_a_replica_holds_what_the_job_requests() -> None:
    held = holdings_of([job("Admitted", {"ddp-worker-0": placed(0), "ddp-worker-1": placed(1)})], [])
    assert [(p.gpus, v) for p, v in held] == [([0], WORKER), ([1], WORKER)]


def test_a_replica_is_counted_once_with_what_its_spec_says() -> None:
    held = holdings_of(
        [job("Running", {"ddp-worker-0": placed(0), "ddp-worker-1": placed(1)})],
        [replica_occupant(replica("ddp-worker-0", 0))],
    )
    assert [(p.gpus, v) for p, v in held] == [
        ([0], ResourceVector(cpu_milli=500, memory=7, gpu=1)),
        ([1], WORKER),
    ]


def test_a_replica_still_exiting_after_its_job_finished_holds_its_placement() -> None:
    finished = job("Succeeded", {"ddp-worker-0": placed(0), "ddp-worker-1": placed(1)})
    held = holdings_of([finished], [replica_occupant(replica("ddp-worker-1", 1))])
    assert [p.gpus for p, _ in held] == [[1]], "the finished job's other placement holds nothing"


@pytest.mark.parametrize(("policy", "end"), [("Running", "now"), ("None", None)], ids=["stopping", "left-running"])
def test_a_finished_jobs_replica_runs_on_with_an_end_only_when_it_is_being_stopped(
    policy: str, end: str | None
) -> None:
    finished = job("Succeeded", {}, run_policy={"cleanPodPolicy": policy})
    (running,) = running_jobs(
        [finished], [replica("ddp-worker-1", 1)], jobtypes=builtin_jobtypes(), nodes=["n"], now=T0
    )
    assert running.expected_end == (T0 if end == "now" else None)
    assert [a.gpus for a in running.assignments] == [(1,)]
    assert not running.preemptible


def test_a_replica_of_an_older_job_of_the_same_name_does_not_stand_for_the_new_jobs_placement() -> None:
    held = holdings_of(
        [job("Admitted", {"ddp-worker-0": placed(0)})], [replica_occupant(replica("ddp-worker-0", 3, "old"))]
    )
    assert sorted(p.gpus[0] for p, _ in held) == [0, 3]


def test_a_placement_the_spec_no_longer_names_is_left_out() -> None:
    shrunk = job("Admitted", {"ddp-worker-0": placed(0), "ddp-worker-1": placed(1)}, count=1)
    assert [p.gpus for p, _ in holdings_of([shrunk], [])] == [[0]]


def test_occupants_without_a_placement_take_the_highest_free_gpus_and_never_the_same_one() -> None:
    own = Occupant("n", WORKER, ReplicaPlacement(node="n", gpus=[3]), ("u-9", "x"))
    foreign = [Occupant("n", ResourceVector(cpu_milli=100, gpu=2)), Occupant("n", ResourceVector(gpu=2))]
    held = holdings_of([], [own, *foreign], [node(4)])
    assert [(p.node, p.gpus) for p, _ in held] == [("n", [3]), ("n", [2, 1]), ("n", [0])]
    assert held[1][1] == ResourceVector(cpu_milli=100, gpu=2)
    assert held[2][1] == ResourceVector(gpu=1), "only the GPU left free is counted"


def pod(
    name: str, node_name: str | None, job_uid: str = "u-1", phase: str = "Running", gpus: int = 1
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"resources": {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"pod-{name}",
            "labels": {"phalanx.dev/job": "ddp"},
            "annotations": {"phalanx.dev/job-uid": job_uid},
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def kube_holdings(jobs: list[TrainingJob], pods: list[dict[str, Any]], binding: dict[str, str] | None = None) -> Any:
    scheduler = KubeScheduler(None, SchedulerSettings())  # type: ignore[arg-type]  # no I/O: only the observation
    scheduler._binding.update(binding or {})
    return scheduler._holdings([({}, j) for j in jobs], pods, [node(4)])


def test_kubernetes_a_pod_on_its_placement_stands_for_it() -> None:
    admitted = job("Running", {"ddp-worker-0": placed(0), "ddp-worker-1": placed(1)})
    held = kube_holdings([admitted], [pod("ddp-worker-0", "n")])
    assert [(p.gpus, v) for p, v in held] == [([0], WORKER), ([1], WORKER)]


def test_kubernetes_a_pod_away_from_its_placement_holds_its_requests_and_the_placement_stays_held() -> None:
    moved = job("Running", {"ddp-worker-0": placed(0, node="elsewhere")})
    held = kube_holdings([moved], [pod("ddp-worker-0", "n")])
    assert [(p.node, p.gpus) for p, _ in held] == [("elsewhere", [0]), ("n", [3])]


def test_kubernetes_a_finished_pod_holds_nothing_and_a_binding_in_flight_holds_its_node() -> None:
    finished = kube_holdings([], [pod("other-0", "n", job_uid="gone", phase="Succeeded")])
    assert finished == []
    unbound = pod("other-0", None, job_uid="gone")
    assert kube_holdings([], [unbound]) == []
    in_flight = kube_holdings([], [unbound], binding={"pod-other-0": "n"})
    assert [(p.node, p.gpus) for p, _ in in_flight] == [("n", [3])]
