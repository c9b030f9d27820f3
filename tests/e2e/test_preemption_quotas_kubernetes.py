"""Queue quotas and preemption through phalanx-scheduler on the real control plane, as in the embedded runtime.

Each test has an 8-GPU kwok node of its own: its jobs ask for a GPU model only that node has. A critical job
preempts a low-priority one holding every GPU (the victim goes Preempted, loses its Pod, waits Queued; the
critical job is bound only once the victim's Pod is gone); a Queue with a 4-GPU quota keeps its second 4-GPU job
waiting, with the quota as the reason, on a node with room for both; a Queue for another namespace leaves the
job waiting with the fix; reclaiming GPUs a queue of the cohort borrowed preempts the borrower once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import k8s_testenv
from components import Components
from support.sim_jobs import gpu_job

pytestmark = pytest.mark.e2e

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
QUEUES = "/apis/phalanx.dev/v1alpha1/queues"


def job(name: str, gpus: int, model: str, **scheduling: Any) -> dict[str, Any]:
    return gpu_job(name, model, gpus=gpus, scheduling=scheduling)


@pytest.fixture
def gpu_model(components: Components) -> Iterator[str]:
    """A GPU model that one fresh 8-GPU node has, and no other."""
    kube = components.kube
    name, model = kube.unique("preempt-node"), kube.unique("A100-QUOTA")
    k8s_testenv.create_fake_gpu_nodes(kube.env, [name], product=model)
    yield model
    kube.request("DELETE", f"/api/v1/nodes/{name}")


@pytest.fixture
def make_queue(components: Components) -> Iterator[Callable[[dict[str, Any]], str]]:
    """Create a cluster-scoped Queue with a unique name; every one is deleted after the test."""
    kube = components.kube
    names: list[str] = []

    def make(spec: dict[str, Any]) -> str:
        name = kube.unique("team")
        kube.create(
            QUEUES, {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}
        )
        names.append(name)
        return name

    yield make
    for name in names:
        kube.request("DELETE", f"{QUEUES}/{name}")


def phase_of(obj: dict[str, Any]) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


def pods_of(components: Components, namespace: str, job_name: str) -> list[dict[str, Any]]:
    path = f"/api/v1/namespaces/{namespace}/pods?labelSelector=phalanx.dev/job={job_name}"
    return list(components.kube.get(path)["items"])


def test_a_critical_job_preempts_a_low_one_whose_pod_goes_first(
    components: Components, namespace: str, gpu_model: str
) -> None:
    kube = components.kube
    components.operator()
    components.scheduler()
    jobs = JOBS.format(ns=namespace)
    kube.create(jobs, job("low", 8, gpu_model, priorityClass="low"))
    kube.wait_for(f"{jobs}/low", lambda obj: phase_of(obj) == "Running", 60, "low to run")

    kube.create(jobs, job("critical", 8, gpu_model, priorityClass="critical"))
    victim = kube.wait_for(
        f"{jobs}/low",
        lambda obj: any(c["type"] == "Preempted" for c in (obj.get("status") or {}).get("conditions") or []),
        60,
        "low to be preempted",
    )
    [preempted] = [c for c in victim["status"]["conditions"] if c["type"] == "Preempted"]
    assert "critical" in preempted["message"], preempted

    def critical_bound() -> bool:
        return any(pod["spec"].get("nodeName") for pod in pods_of(components, namespace, "critical"))

    kube.wait_for(f"{jobs}/critical", lambda obj: phase_of(obj) == "Running" and critical_bound(), 60, "critical")
    # The critical job's Pod is bound only after the victim's was deleted (it gets all 8 GPUs of the node).
    assert pods_of(components, namespace, "low") == []
    low = kube.wait_for(
        f"{jobs}/low",
        lambda obj: phase_of(obj) == "Queued" and obj["status"].get("reason") == "Waiting",
        60,
        "low to wait again",
    )
    assert low["status"]["message"].startswith(f"needs 8 {gpu_model} GPUs on one node"), low["status"]["message"]
    assert "preemption cannot help" in low["status"]["message"]  # the critical job's priority is higher
    assert low["status"]["attempt"] == 1
    kube.wait_for(
        f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name=low",
        lambda events: any(e["reason"] == "Preempted" and "critical" in e["message"] for e in events["items"]),
        30,
        "the Preempted event",
    )


def test_a_queue_quota_keeps_the_second_job_waiting_on_a_node_with_room(
    components: Components, namespace: str, gpu_model: str, make_queue: Callable[[dict[str, Any]], str]
) -> None:
    kube = components.kube
    components.operator()
    components.scheduler()
    team = make_queue({"quota": {"gpu": 4}})
    jobs = JOBS.format(ns=namespace)
    kube.create(jobs, job("first", 4, gpu_model, queue=team))
    kube.wait_for(f"{jobs}/first", lambda obj: phase_of(obj) == "Running", 60, "first to run")
    kube.create(jobs, job("second", 4, gpu_model, queue=team))
    waiting = kube.wait_for(
        f"{jobs}/second", lambda obj: (obj.get("status") or {}).get("reason") == "Waiting", 60, "second to wait"
    )
    assert phase_of(waiting) == "Queued"
    assert f"queue {team} is at its GPU quota 4/4" in waiting["status"]["message"], waiting["status"]["message"]
    assert pods_of(components, namespace, "second") == []
    counted = kube.wait_for(
        f"{QUEUES}/{team}",
        lambda obj: (obj.get("status") or {}).get("pending") == 1,
        30,
        "the queue's status to count its jobs",
    )["status"]
    assert (counted["admitted"], counted["usage"]["gpu"]) == (1, 4), counted

    kube.request("DELETE", f"{jobs}/first")
    kube.wait_for(f"{jobs}/second", lambda obj: phase_of(obj) == "Running", 60, "second to run once first is gone")


def test_a_queue_for_another_namespace_says_so(
    components: Components, namespace: str, gpu_model: str, make_queue: Callable[[dict[str, Any]], str]
) -> None:
    kube = components.kube
    components.operator()
    components.scheduler()
    team = make_queue({"namespaces": ["somewhere-else"]})
    jobs = JOBS.format(ns=namespace)
    kube.create(jobs, job("stray", 1, gpu_model, queue=team))
    waiting = kube.wait_for(
        f"{jobs}/stray", lambda obj: (obj.get("status") or {}).get("reason") == "Waiting", 60, "stray to wait"
    )
    assert waiting["status"]["message"].startswith(
        f"queue {team} takes jobs of namespace somewhere-else only, not {namespace}"
    )


def test_reclaiming_borrowed_gpus_preempts_the_borrower_once(
    components: Components, namespace: str, gpu_model: str, make_queue: Callable[[dict[str, Any]], str]
) -> None:
    """docs/queues.md's worked example, then one more job of team-b (issue 14, "Reclaim loops").

    The borrower used to be queued again and re-admitted into the room freed for the reclaiming job, then
    preempted again, over and over; the room is now nominated for its preemptor.
    """
    kube = components.kube
    components.operator()
    components.scheduler()
    cohort = kube.unique("research")
    quota = {"gpu": 4, "cpu": 32, "memory": "256Gi"}
    team_a = make_queue({"quota": quota, "cohort": cohort, "weight": 2})
    team_b = make_queue({"quota": quota, "cohort": cohort, "borrowingLimit": {"gpu": 2}})
    jobs = JOBS.format(ns=namespace)
    kube.create(jobs, gpu_job("a-train", gpu_model, workers=3, gpus=2, scheduling={"queue": team_a}))
    kube.wait_for(f"{jobs}/a-train", lambda obj: phase_of(obj) == "Running", 60, "a-train to run")
    kube.create(jobs, gpu_job("b-train", gpu_model, gpus=2, scheduling={"queue": team_b}))
    kube.wait_for(f"{jobs}/b-train", lambda obj: phase_of(obj) == "Running", 60, "b-train to run")
    kube.create(jobs, gpu_job("a-eval", gpu_model, gpus=2, scheduling={"queue": team_a}))
    kube.wait_for(f"{jobs}/a-eval", lambda obj: (obj.get("status") or {}).get("reason") == "Waiting", 60, "a-eval")

    kube.create(jobs, gpu_job("b-more", gpu_model, gpus=2, scheduling={"queue": team_b}))
    kube.wait_for(f"{jobs}/b-more", lambda obj: phase_of(obj) == "Running", 60, "b-more to run")
    train = kube.get(f"{jobs}/a-train")
    preempted = [c for c in (train.get("status") or {}).get("conditions") or [] if c["type"] == "Preempted"]
    assert train["status"]["attempt"] == 1, train["status"]
    assert len(preempted) == 1 and "b-more" in preempted[0]["message"], preempted
    assert phase_of(train) == "Queued"
