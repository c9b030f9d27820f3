"""phalanx-scheduler's helpers: what a Pod requests, what Pods Phalanx did not place hold, how jobs are parsed."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.adapters.kubernetes.api import EVENTS, TRAININGJOBS
from phalanx.adapters.kubernetes.objects import job_from_object
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.resources import ResourceVector
from phalanx.services.kubernetes import scheduler as kube_scheduler
from phalanx.services.kubernetes.scheduler import KubeScheduler, SchedulerSettings, pod_requests
from support.memory_kube_api import MemoryKubeApi


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


def _job(version: int, generation: int, phase: str) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {
            "name": "ddp",
            "namespace": "team-a",
            "uid": "u-1",
            "resourceVersion": str(version),
            "generation": generation,
        },
        "spec": {"type": "pytorch", "replicas": {"worker": {"count": 2, "template": {"command": ["python", "t.py"]}}}},
        "status": {"phase": phase},
    }


def test_a_jobs_spec_is_validated_once_per_generation_and_its_status_read_at_every_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    def counting(obj: dict[str, Any], jobtypes: Any) -> Any:
        calls.append(obj["metadata"]["resourceVersion"])
        return job_from_object(obj, jobtypes)

    monkeypatch.setattr(kube_scheduler, "job_from_object", counting)
    scheduler = KubeScheduler(None, SchedulerSettings())  # type: ignore[arg-type]  # no I/O: caches fed by hand
    jobtypes = builtin_jobtypes()
    for version, generation, phase in [(1, 1, "Pending"), (2, 1, "Queued"), (3, 1, "Admitted"), (4, 2, "Admitted")]:
        scheduler.jobs.observe(_job(version, generation, phase))
        [(_, job)] = scheduler._current_jobs(jobtypes)
        assert (job.status.phase, job.metadata.resource_version) == (phase, str(version))
        assert job.spec.replicas["worker"].count == 2
    assert calls == ["1", "4"], "validated at generation 1 and again at generation 2 only"


def status_writes(api: MemoryKubeApi) -> list[dict[str, Any]]:
    """The scheduler's writes to jobs, each a PUT of the status subresource."""
    writes = api.writes_to(TRAININGJOBS.plural)
    assert [(write.verb, write.subresource) for write in writes] == [("replace", "status")] * len(writes)
    return [write.body for write in writes]


def event_reasons(api: MemoryKubeApi) -> list[str]:
    return [event["reason"] for event in api.of(EVENTS)]


def _node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8", "pods": "110"}},
    }


def _scheduler_with(job: dict[str, Any]) -> tuple[KubeScheduler, MemoryKubeApi]:
    api = MemoryKubeApi()
    scheduler = KubeScheduler(api, SchedulerSettings(workers=1))
    scheduler.nodes.observe(_node("gpu-0"))
    scheduler.jobs.observe(api.put(TRAININGJOBS, job))
    return scheduler, api


def _new_job(**run_policy: Any) -> dict[str, Any]:
    job = _job(1, 1, "Pending")
    del job["status"]
    template = {"image": "example.org/t:1", "command": ["python", "t.py"], "resources": {"gpu": 1}}
    job["spec"] = {
        "type": "pytorch",
        "replicas": {"worker": {"count": 2, "template": template}},
        "runPolicy": run_policy,
    }
    return job


def test_a_new_job_that_fits_is_accepted_and_admitted_in_one_write() -> None:
    scheduler, api = _scheduler_with(_new_job())
    result = scheduler.cycle()
    scheduler.flush()
    assert result.admitted == ["team-a/ddp"]
    [write] = status_writes(api)
    status = write["status"]
    assert status["phase"] == "Admitted"
    conditions = {condition["type"]: condition for condition in status["conditions"]}
    assert (conditions["Queued"]["reason"], conditions["Queued"]["status"]) == ("Accepted", "False")
    assert (conditions["Admitted"]["reason"], conditions["Admitted"]["status"]) == ("Scheduled", "True")
    assert set(status["placements"]) == {"ddp-worker-0", "ddp-worker-1"}
    assert event_reasons(api) == ["Accepted", "Scheduled"], "the planner's event, then the scheduler's"


@pytest.mark.parametrize(
    ("run_policy", "image"),
    [({"suspend": True}, "example.org/t:1"), ({}, None)],
    ids=["submitted-halted", "no-image-the-operator-may-default"],
)
def test_a_new_job_the_operator_must_decide_on_is_left_to_it(run_policy: dict[str, Any], image: str | None) -> None:
    job = _new_job(**run_policy)
    job["spec"]["replicas"]["worker"]["template"]["image"] = image
    scheduler, api = _scheduler_with(job)
    result = scheduler.cycle()
    scheduler.flush()
    assert result.admitted == [] and status_writes(api) == [] and event_reasons(api) == []


def test_a_new_job_that_does_not_fit_is_queued_by_the_write_that_says_why_it_waits() -> None:
    job = _new_job()
    job["spec"]["replicas"]["worker"]["count"] = 3
    job["spec"]["replicas"]["worker"]["template"]["resources"]["gpu"] = 4  # 12 GPUs on 8-GPU nodes: 2 fit
    scheduler, api = _scheduler_with(job)
    result = scheduler.cycle()
    scheduler.flush()
    assert result.admitted == []
    [write] = status_writes(api)
    status = write["status"]
    assert (status["phase"], status["reason"]) == ("Queued", "Waiting")
    assert status["message"] == result.waiting["team-a/ddp"]
    assert [(c["type"], c["reason"]) for c in status["conditions"]] == [("Queued", "Accepted")]
    assert event_reasons(api) == ["Accepted", "Waiting"]


def test_an_admission_written_through_the_port_is_in_the_parse_cache_for_the_next_cycle() -> None:
    scheduler, api = _scheduler_with(_new_job())
    assert scheduler.cycle().admitted == ["team-a/ddp"]
    scheduler.flush()

    def parse_again(obj: dict[str, Any], jobtypes: Any) -> None:
        raise AssertionError(f"parsed {obj['metadata']['resourceVersion']} again")

    scheduler._parse_job = parse_again  # type: ignore[method-assign,assignment]
    [(obj, job)] = scheduler._current_jobs(builtin_jobtypes())
    assert job.status.phase == "Admitted" and set(job.status.placements) == {"ddp-worker-0", "ddp-worker-1"}
    assert (
        job.metadata.resource_version
        == obj["metadata"]["resourceVersion"]
        == api.of(TRAININGJOBS)[0]["metadata"]["resourceVersion"]
    ), "the version the write answered, which the cache holds"


def test_an_admission_whose_write_is_lost_admits_nothing_and_says_nothing() -> None:
    scheduler, api = _scheduler_with(_new_job())
    api.put(TRAININGJOBS, _new_job())  # another client wrote it since the scheduler's cache saw it: a 409
    result = scheduler.cycle()
    scheduler.flush()
    assert result.admitted == []
    assert "status" not in api.of(TRAININGJOBS)[0], "the other client's version stands"
    assert "Scheduled" not in event_reasons(api)
