"""phalanx-scheduler's helpers: what a Pod requests, what Pods Phalanx did not place hold, how jobs are parsed."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.adapters.kubernetes.api import ConflictError
from phalanx.adapters.kubernetes.objects import job_from_object
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.resources import ResourceVector
from phalanx.services.kubernetes import scheduler as kube_scheduler
from phalanx.services.kubernetes.scheduler import KubeScheduler, SchedulerSettings, pod_requests


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


class AdmittingApi:
    """Status replacements (conditional on the resourceVersion) and Events, in memory."""

    def __init__(self) -> None:
        self.writes: list[dict[str, Any]] = []
        self.events: list[str] = []
        self.current: dict[str, str] = {}  # job name -> resourceVersion

    def replace_status(self, resource: Any, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        if body["metadata"]["resourceVersion"] != self.current[name]:
            raise ConflictError(409, "Conflict", "the object has been modified")
        self.writes.append(body)
        self.current[name] = str(int(self.current[name]) + 1)
        obj = _job(int(self.current[name]), 1, "Admitted")
        obj["status"] = body["status"]
        return obj

    def create(self, resource: Any, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        self.events.append(body["reason"])
        return body


def _node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8", "pods": "110"}},
    }


def _scheduler_with(job: dict[str, Any]) -> tuple[KubeScheduler, AdmittingApi]:
    api = AdmittingApi()
    api.current[job["metadata"]["name"]] = job["metadata"]["resourceVersion"]
    scheduler = KubeScheduler(api, SchedulerSettings(workers=1))  # type: ignore[arg-type]
    scheduler.nodes.observe(_node("gpu-0"))
    scheduler.jobs.observe(job)
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
    [write] = api.writes
    status = write["status"]
    assert status["phase"] == "Admitted"
    conditions = {condition["type"]: condition for condition in status["conditions"]}
    assert (conditions["Queued"]["reason"], conditions["Queued"]["status"]) == ("Accepted", "False")
    assert (conditions["Admitted"]["reason"], conditions["Admitted"]["status"]) == ("Scheduled", "True")
    assert set(status["placements"]) == {"ddp-worker-0", "ddp-worker-1"}
    assert api.events == ["Accepted", "Scheduled"], "the planner's event, then the scheduler's"


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
    assert result.admitted == [] and api.writes == [] and api.events == []


def test_a_new_job_that_does_not_fit_is_queued_by_the_write_that_says_why_it_waits() -> None:
    job = _new_job()
    job["spec"]["replicas"]["worker"]["count"] = 3
    job["spec"]["replicas"]["worker"]["template"]["resources"]["gpu"] = 4  # 12 GPUs on 8-GPU nodes: 2 fit
    scheduler, api = _scheduler_with(job)
    result = scheduler.cycle()
    scheduler.flush()
    assert result.admitted == []
    [write] = api.writes
    status = write["status"]
    assert (status["phase"], status["reason"]) == ("Queued", "Waiting")
    assert status["message"] == result.waiting["team-a/ddp"]
    assert [(c["type"], c["reason"]) for c in status["conditions"]] == [("Queued", "Accepted")]
    assert api.events == ["Accepted", "Waiting"]
