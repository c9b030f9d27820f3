"""The operator's reconcile passes against an in-memory API: what it writes, and what it does not.

No network and no informer threads: the caches are filled by hand (as a watch would), the fake API keeps
objects with resourceVersions and answers 404 and 409 as the API server does.
"""

from __future__ import annotations

import copy
import itertools
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from phalanx.adapters.kubernetes.api import (
    EVENTS,
    JOBTYPES,
    PODS,
    TRAININGJOBS,
    ConflictError,
    NotFoundError,
    Resource,
)
from phalanx.adapters.kubernetes.informer import Informer
from phalanx.core.clock import Clock, VirtualClock
from phalanx.services.kubernetes.operator import KubeOperator
from phalanx.services.kubernetes.reconcile import OperatorSettings

NS = "team-a"


class FakeApi:
    """Objects by (plural, namespace, name), resourceVersions, uid preconditions; every write recorded."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.writes: list[tuple[str, str, str]] = []
        self.reads: list[tuple[str, str, str | None]] = []
        self.versions = itertools.count(100)
        self.lock = threading.Lock()

    def _key(self, resource: Resource, namespace: str | None, name: str) -> tuple[str, str, str]:
        return resource.plural, (namespace or "") if resource.namespaced else "", name

    def create(self, resource: Resource, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        meta = obj["metadata"]
        namespace = namespace or meta.get("namespace")
        if "generateName" in meta:
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        key = self._key(resource, namespace, meta["name"])
        with self.lock:
            if key in self.objects:
                raise ConflictError(409, "AlreadyExists", f"{meta['name']} already exists")
            meta.update(uid=str(uuid.uuid4()), resourceVersion=str(next(self.versions)))
            obj.setdefault("kind", resource.kind)
            self.objects[key] = obj
            self.writes.append(("create", resource.plural, meta["name"]))
        return copy.deepcopy(obj)

    def replace(self, resource: Resource, body: dict[str, Any], *, subresource: str | None = None) -> dict[str, Any]:
        meta = body["metadata"]
        key = self._key(resource, meta.get("namespace"), meta["name"])
        with self.lock:
            current = self.objects.get(key)
            if current is None:
                raise NotFoundError(404, "NotFound", meta["name"])
            if current["metadata"]["resourceVersion"] != meta.get("resourceVersion"):
                raise ConflictError(409, "Conflict", "the object has been modified")
            updated = copy.deepcopy(current)
            if subresource == "status":
                updated["status"] = copy.deepcopy(body["status"])
            else:
                updated.update({k: copy.deepcopy(v) for k, v in body.items() if k != "status"})
                if body.get("spec") != current.get("spec"):  # as for a CRD with a status subresource
                    updated["metadata"]["generation"] = int(current["metadata"].get("generation") or 0) + 1
            updated["metadata"]["resourceVersion"] = str(next(self.versions))
            self.objects[key] = updated
            self.writes.append((subresource or "replace", resource.plural, meta["name"]))
        return copy.deepcopy(updated)

    def replace_status(self, resource: Resource, body: dict[str, Any]) -> dict[str, Any]:
        return self.replace(resource, body, subresource="status")

    def get(
        self, resource: Resource, name: str, namespace: str | None = None, *, not_older_than: str | None = None
    ) -> dict[str, Any]:
        with self.lock:
            self.reads.append((resource.plural, name, not_older_than))
            obj = self.objects.get(self._key(resource, namespace, name))
        if obj is None:
            raise NotFoundError(404, "NotFound", name)
        return copy.deepcopy(obj)

    def delete(self, resource: Resource, name: str, namespace: str | None = None, *, uid: str | None = None) -> None:
        key = self._key(resource, namespace, name)
        with self.lock:
            current = self.objects.get(key)
            if current is None:
                raise NotFoundError(404, "NotFound", name)
            if uid and current["metadata"]["uid"] != uid:
                raise ConflictError(409, "Conflict", "uid precondition failed")
            del self.objects[key]
            self.writes.append(("delete", resource.plural, name))

    # -- test helpers ---------------------------------------------------------------------------------------------

    def of(self, resource: Resource) -> list[dict[str, Any]]:
        with self.lock:
            return [copy.deepcopy(o) for (plural, _, _), o in self.objects.items() if plural == resource.plural]

    def writes_to(self, plural: str) -> list[tuple[str, str, str]]:
        return [write for write in self.writes if write[1] == plural]


class Harness:
    """An operator on a FakeApi, with its caches fed like a watch would feed them."""

    def __init__(self, api: FakeApi | None = None, *, clock: Clock | None = None, **settings: Any) -> None:
        self.api = api or FakeApi()
        # No resync inside a test: a pass reconciles what changed and what a timer asked for. Pending -> Queued is
        # written at once unless a test says otherwise (no scheduler here to admit a Pending job).
        options = {"workers": 2, "resync_s": 3600.0, "accept_hold_s": 0.0, **settings}
        self.operator = KubeOperator(self.api, OperatorSettings(**options), clock)  # type: ignore[arg-type]
        self.operator.seed_jobtypes()

    def feed(self, informer: Informer, obj: dict[str, Any]) -> None:
        informer.observe(copy.deepcopy(obj))
        if informer.on_change is not None:
            informer.on_change("MODIFIED", obj)

    def submit(self, name: str, spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
        body = {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {
                "name": name,
                "namespace": NS,
                "generation": 1,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": annotations or {},
            },
            "spec": spec,
        }
        created = self.api.create(TRAININGJOBS, body)
        self.feed(self.operator.jobs, created)
        return created

    def job(self, name: str) -> dict[str, Any]:
        return self.api.get(TRAININGJOBS, name, NS)

    def admit(self, name: str) -> None:
        """What the phalanx-scheduler does: placements and Admitted in one status write (from Queued, or Pending)."""
        obj = self.job(name)
        status = obj.setdefault("status", {})
        names = [pod for pod in _replica_names(obj)]
        status["placements"] = {n: {"node": "gpu-0", "cpus": [i], "gpus": [i]} for i, n in enumerate(names)}
        status["phase"] = "Admitted"
        self.feed(self.operator.jobs, self.api.replace_status(TRAININGJOBS, obj))

    def set_pod_phase(self, name: str, phase: str, exit_code: int | None = None) -> None:
        pod = self.api.get(PODS, name, NS)
        pod["status"] = {"phase": phase}
        if exit_code is not None:
            pod["status"]["containerStatuses"] = [{"name": "replica", "state": {"terminated": {"exitCode": exit_code}}}]
        self.feed(self.operator.pods, self.api.replace_status(PODS, pod))

    def drop_deleted_pods(self) -> None:
        """What the watch shows once the kubelet removed the deleted Pods."""
        present = {pod["metadata"]["uid"] for pod in self.api.of(PODS)}
        for pod in self.operator.pods.items():
            if pod["metadata"]["uid"] not in present:
                self.operator.pods.forget(NS, pod["metadata"]["name"])
                self.operator._pod_changed("DELETED", pod)

    def sync(self) -> float:
        wait = self.operator.sync()
        self.operator.flush()
        return wait

    def events(self) -> list[tuple[str, str]]:
        return [(event["reason"], event["message"]) for event in self.api.of(EVENTS)]

    def reasons(self) -> list[str]:
        return [reason for reason, _ in self.events()]

    def status_writes(self) -> int:
        return len([write for write in self.api.writes_to("trainingjobs") if write[0] == "status"])

    def start_pods(self, *names: str) -> None:
        for name in names:
            self.set_pod_phase(name, "Running")


def _replica_names(obj: dict[str, Any]) -> list[str]:
    name = obj["metadata"]["name"]
    return [f"{name}-{role}-{i}" for role, spec in obj["spec"]["replicas"].items() for i in range(spec.get("count", 1))]


def template(**extra: Any) -> dict[str, Any]:
    return {"image": "example.org/trainer:1", "command": ["python", "train.py"], **extra}


def pytorch(workers: int = 2, **run_policy: Any) -> dict[str, Any]:
    return {
        "type": "pytorch",
        "replicas": {"worker": {"count": workers, "template": template()}},
        "runPolicy": run_policy,
    }


def pod_names(harness: Harness) -> list[str]:
    return sorted(pod["metadata"]["name"] for pod in harness.api.of(PODS))


@pytest.fixture
def harness() -> Harness:
    return Harness()


def test_builtin_jobtypes_are_created_once_and_a_users_own_is_left_alone() -> None:
    harness = Harness()
    assert {obj["metadata"]["name"] for obj in harness.api.of(JOBTYPES)} >= {"pytorch", "mpi", "generic"}
    created = len(harness.api.writes_to("jobtypes"))
    harness.operator.seed_jobtypes()
    assert len(harness.api.writes_to("jobtypes")) == created, "seeding twice writes nothing"


def test_a_new_job_is_queued_then_gets_pods_and_a_service_once_admitted(harness: Harness) -> None:
    harness.submit("ddp", pytorch())
    harness.sync()
    assert harness.job("ddp")["status"]["phase"] == "Queued"
    assert pod_names(harness) == []
    harness.admit("ddp")
    harness.sync()
    assert pod_names(harness) == ["ddp-worker-0", "ddp-worker-1"]
    assert harness.api.get(Resource("Service", "services"), "ddp", NS)["spec"]["clusterIP"] == "None"
    pod = harness.api.get(PODS, "ddp-worker-1", NS)
    assert pod["metadata"]["annotations"]["phalanx.dev/gpus"] == "1"
    assert ("Accepted", "waiting for quota and room") in harness.events()


def test_a_job_of_one_replica_gets_its_pod_and_no_service(harness: Harness) -> None:
    harness.submit("solo", pytorch(workers=1))
    harness.sync()
    harness.admit("solo")
    harness.sync()
    assert pod_names(harness) == ["solo-worker-0"]
    assert harness.api.of(Resource("Service", "services")) == []
    spec = harness.api.get(PODS, "solo-worker-0", NS)["spec"]
    assert "subdomain" not in spec, "no Service: the Pod must not name one"
    assert spec["nodeName"] == "gpu-0", "a gang of one is created on its node: nothing to bind it with"


def test_downloading_waits_for_the_pods_to_start_and_is_written_with_running(harness: Harness) -> None:
    harness.submit("ddp", pytorch())
    harness.sync()
    harness.admit("ddp")
    admitted = harness.status_writes()
    version = harness.job("ddp")["metadata"]["resourceVersion"]
    harness.api.reads.clear()
    wait = harness.sync()
    assert pod_names(harness) == ["ddp-worker-0", "ddp-worker-1"]
    # Without a write to check the version the plan was made on, one read checks it before the Pods are created.
    assert harness.api.reads == [("trainingjobs", "ddp", version)]
    assert harness.job("ddp")["status"]["phase"] == "Admitted", "Downloading is held, not written"
    assert harness.status_writes() == admitted
    assert "Staging" not in harness.reasons(), "a held status's events go out with it"
    assert 0 < wait <= harness.operator.settings.hold_s, "the loop wakes to write it if the pods never start"
    harness.start_pods("ddp-worker-0")
    harness.sync()
    assert harness.status_writes() == admitted, "one pod of two started: still Downloading, still held"
    harness.start_pods("ddp-worker-1")
    harness.sync()
    status = harness.job("ddp")["status"]
    assert status["phase"] == "Running"
    assert harness.status_writes() == admitted + 1, "Downloading and Running in one write"
    assert len([read for read in harness.api.reads if read[2]]) == 1, "passes that create nothing read nothing"
    conditions = {condition["type"]: condition for condition in status["conditions"]}
    assert conditions["Downloading"]["status"] == "False" and conditions["Running"]["status"] == "True"
    assert conditions["Downloading"]["reason"] == "Staging"
    assert conditions["Downloading"]["lastTransitionTime"] <= conditions["Running"]["lastTransitionTime"]
    reasons = harness.reasons()
    assert reasons.count("Staging") == 1 and reasons.count("Started") == 1


def test_a_held_status_is_written_once_its_time_is_up_if_the_pods_have_not_started() -> None:
    clock = VirtualClock()
    harness = Harness(clock=clock, hold_s=5.0)
    harness.submit("ddp", pytorch())
    harness.sync()
    harness.admit("ddp")
    harness.sync()
    assert harness.job("ddp")["status"]["phase"] == "Admitted"
    clock.advance(5.1)
    harness.sync()  # the timer's pass
    assert harness.job("ddp")["status"]["phase"] == "Downloading"
    assert harness.reasons().count("Staging") == 1
    harness.start_pods("ddp-worker-0", "ddp-worker-1")
    harness.sync()
    assert harness.job("ddp")["status"]["phase"] == "Running"
    assert harness.reasons().count("Staging") == 1


def test_without_a_hold_time_downloading_is_written_at_once() -> None:
    harness = Harness(hold_s=0.0)
    harness.submit("ddp", pytorch())
    harness.sync()
    harness.admit("ddp")
    harness.sync()
    assert harness.job("ddp")["status"]["phase"] == "Downloading"
    assert pod_names(harness) == ["ddp-worker-0", "ddp-worker-1"]


def test_a_held_status_is_dropped_when_the_job_changes_and_the_job_is_planned_from_what_is_stored(
    harness: Harness,
) -> None:
    harness.submit("ddp", pytorch())
    harness.sync()
    harness.admit("ddp")
    harness.sync()
    job = harness.job("ddp")
    job["spec"]["runPolicy"]["suspend"] = True
    harness.feed(harness.operator.jobs, harness.api.replace(TRAININGJOBS, job))
    harness.sync()
    status = harness.job("ddp")["status"]
    assert status["phase"] == "Halting", "Admitted -> Halting: the held Downloading never happened"
    assert "Downloading" not in {condition["type"] for condition in status["conditions"]}
    assert "Staging" not in harness.reasons()
    assert pod_names(harness) == []


def test_a_restarted_operator_that_lost_a_held_status_creates_no_pod_and_writes_running(harness: Harness) -> None:
    harness.submit("ddp", pytorch())
    harness.sync()
    harness.admit("ddp")
    harness.sync()  # pods created, Downloading held in the first operator's memory only
    fresh = Harness(harness.api)
    fresh.feed(fresh.operator.jobs, harness.job("ddp"))
    for pod in harness.api.of(PODS):
        fresh.feed(fresh.operator.pods, pod)
    fresh.start_pods("ddp-worker-0", "ddp-worker-1")
    fresh.sync()
    assert len([w for w in harness.api.writes_to("pods") if w[0] == "create"]) == 2
    status = harness.job("ddp")["status"]
    assert status["phase"] == "Running"
    assert {"Downloading", "Running"} <= {condition["type"] for condition in status["conditions"]}


def test_a_new_job_waits_unqueued_for_the_scheduler_then_is_queued_when_its_time_is_up() -> None:
    clock = VirtualClock()
    harness = Harness(clock=clock, accept_hold_s=2.0)
    harness.submit("ddp", pytorch())
    wait = harness.sync()
    assert "status" not in harness.job("ddp"), "Pending -> Queued is held for the scheduler"
    assert 0 < wait <= 2.0
    assert harness.reasons() == []
    clock.advance(2.1)
    harness.sync()
    status = harness.job("ddp")["status"]
    assert (status["phase"], status["reason"]) == ("Queued", "Accepted")
    assert harness.reasons() == ["Accepted"]


def test_a_job_the_scheduler_accepted_and_admitted_at_once_is_never_queued_by_the_operator() -> None:
    harness = Harness(accept_hold_s=2.0)
    harness.submit("ddp", pytorch())
    harness.sync()
    harness.admit("ddp")  # what phalanx-scheduler writes for a Pending job that fits: Queued and Admitted at once
    harness.sync()
    assert pod_names(harness) == ["ddp-worker-0", "ddp-worker-1"]
    assert harness.status_writes() == 1, "only the scheduler's"
    assert "Accepted" not in harness.reasons(), "the held Queued and its event went with the job's change"


def test_a_job_halted_while_its_acceptance_is_held_is_halted_at_once() -> None:
    harness = Harness(accept_hold_s=2.0)
    harness.submit("ddp", pytorch())
    harness.sync()
    job = harness.job("ddp")
    job["spec"]["runPolicy"]["suspend"] = True
    harness.feed(harness.operator.jobs, harness.api.replace(TRAININGJOBS, job))
    harness.sync()
    assert harness.job("ddp")["status"]["phase"] == "Halted"


def test_a_one_pod_job_costs_the_operator_one_status_write_on_its_way_to_running() -> None:
    harness = Harness(accept_hold_s=2.0)
    seeded = len(harness.api.writes)
    harness.submit("solo", pytorch(workers=1))
    harness.sync()
    harness.admit("solo")
    harness.sync()
    harness.start_pods("solo-worker-0")
    harness.sync()
    assert harness.job("solo")["status"]["phase"] == "Running"
    assert harness.status_writes() == 1 + 1, "the scheduler's Admitted (with Queued), then Running"
    created = {write[1] for write in harness.api.writes[seeded:] if write[0] == "create"}
    assert created == {"trainingjobs", "pods", "events"}, "no Service, no ConfigMap for one replica"


def test_a_pass_on_an_unchanged_world_writes_nothing(harness: Harness) -> None:
    harness.submit("ddp", pytorch())
    harness.sync()
    harness.admit("ddp")
    harness.sync()
    before = list(harness.api.writes)
    harness.operator.mark_all()
    harness.sync()
    harness.sync()
    assert harness.api.writes == before


def test_the_job_runs_and_succeeds_and_its_exited_pods_stay_for_their_logs(harness: Harness) -> None:
    harness.submit("ddp", pytorch())
    harness.sync()
    harness.admit("ddp")
    harness.sync()
    for name in ("ddp-worker-0", "ddp-worker-1"):
        harness.set_pod_phase(name, "Running")
    harness.sync()
    assert harness.job("ddp")["status"]["phase"] == "Running"
    for name in ("ddp-worker-0", "ddp-worker-1"):
        harness.set_pod_phase(name, "Succeeded", exit_code=0)
    harness.sync()
    status = harness.job("ddp")["status"]
    assert status["phase"] == "Succeeded"
    assert status["replicaStatuses"]["worker"]["succeeded"] == 2
    assert pod_names(harness) == ["ddp-worker-0", "ddp-worker-1"]  # exited: kept until the job is deleted


def test_a_status_write_that_conflicts_applies_nothing_and_is_retried(harness: Harness) -> None:
    harness.submit("ddp", pytorch())
    harness.sync()
    harness.admit("ddp")
    # Someone writes the job after the operator's cache saw it: the operator's PUT gets 409.
    stale = harness.operator.jobs.get(NS, "ddp")
    assert stale is not None
    newer = harness.job("ddp")
    newer["metadata"]["annotations"] = {"touched": "yes"}
    harness.api.replace(TRAININGJOBS, newer)
    wait = harness.sync()
    assert pod_names(harness) == [], "a plan made on a stale job must not be applied"
    assert wait <= harness.operator.settings.retry_s
    harness.feed(harness.operator.jobs, harness.job("ddp"))
    harness.sync()
    assert pod_names(harness) == ["ddp-worker-0", "ddp-worker-1"]


def test_a_replayed_pass_after_a_restart_creates_no_second_pod(harness: Harness) -> None:
    harness.submit("ddp", pytorch())
    harness.sync()
    harness.admit("ddp")
    harness.sync()
    # A new operator whose pod cache has not caught up yet: its creates meet 409 AlreadyExists.
    fresh = Harness(harness.api)
    fresh.feed(fresh.operator.jobs, harness.job("ddp"))
    fresh.sync()
    assert pod_names(harness) == ["ddp-worker-0", "ddp-worker-1"]
    assert len([w for w in harness.api.writes_to("pods") if w[0] == "create"]) == 2


def test_a_failed_replica_is_deleted_once_and_recreated_with_the_next_attempt_after_backoff(harness: Harness) -> None:
    harness.submit("ddp", pytorch(restartPolicy="OnFailure", backoffSeconds=0))
    harness.sync()
    harness.admit("ddp")
    harness.sync()
    for name in ("ddp-worker-0", "ddp-worker-1"):
        harness.set_pod_phase(name, "Running")
    harness.sync()
    harness.set_pod_phase("ddp-worker-1", "Failed", exit_code=1)
    harness.sync()
    assert harness.job("ddp")["status"]["phase"] == "Restarting"
    assert pod_names(harness) == ["ddp-worker-0"]
    deletes = [w for w in harness.api.writes_to("pods") if w[0] == "delete"]
    # Before the watch reports the deletion, another pass neither deletes again nor creates the new pod.
    harness.operator.mark_all()
    harness.sync()
    assert [w for w in harness.api.writes_to("pods") if w[0] == "delete"] == deletes
    assert pod_names(harness) == ["ddp-worker-0"]
    harness.drop_deleted_pods()
    harness.sync()
    assert pod_names(harness) == ["ddp-worker-0", "ddp-worker-1"]
    assert harness.api.get(PODS, "ddp-worker-1", NS)["metadata"]["labels"]["phalanx.dev/attempt"] == "1"


def test_an_invalid_spec_fails_the_job_with_the_field_path_and_the_loop_goes_on(harness: Harness) -> None:
    harness.submit("bad", {"type": "pytorch", "replicas": {"trainer": {"template": template()}}})
    harness.submit("good", pytorch())
    harness.sync()
    bad = harness.job("bad")["status"]
    assert (bad["phase"], bad["reason"]) == ("Failed", "InvalidSpec")
    assert bad["message"].startswith("spec.replicas.trainer: job type 'pytorch' has no role 'trainer'")
    assert harness.job("good")["status"]["phase"] == "Queued"
    assert ("InvalidSpec", bad["message"]) in harness.events()


def test_a_job_type_the_cache_has_not_seen_yet_is_looked_up_before_the_job_is_called_invalid(harness: Harness) -> None:
    jobtype = harness.api.get(JOBTYPES, "pytorch")
    jobtype["metadata"] = {"name": "mine"}
    harness.api.create(JOBTYPES, jobtype)  # created in the API; its watch event has not arrived
    harness.submit("ddp", {**pytorch(), "type": "mine"})
    harness.sync()
    assert harness.job("ddp")["status"]["phase"] == "Queued"


def test_a_job_without_an_image_fails_before_it_is_queued_unless_the_operator_has_a_default() -> None:
    spec = {"type": "pytorch", "replicas": {"worker": {"template": {"command": ["python", "x.py"]}}}}
    plain = Harness()
    plain.submit("noimage", spec)
    plain.sync()
    status = plain.job("noimage")["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec")
    assert "spec.replicas.worker.template.image" in status["message"]
    defaulted = Harness(image="example.org/default:1")
    defaulted.submit("noimage", spec)
    defaulted.sync()
    defaulted.admit("noimage")
    defaulted.sync()
    assert defaulted.api.get(PODS, "noimage-worker-0", NS)["spec"]["containers"][0]["image"] == "example.org/default:1"


def test_halt_deletes_every_pod_and_resume_queues_the_job_again(harness: Harness) -> None:
    harness.submit("ddp", pytorch())
    harness.sync()
    harness.admit("ddp")
    harness.sync()
    for name in ("ddp-worker-0", "ddp-worker-1"):
        harness.set_pod_phase(name, "Running")
    harness.sync()
    job = harness.job("ddp")
    job["spec"]["runPolicy"]["suspend"] = True
    harness.feed(harness.operator.jobs, harness.api.replace(TRAININGJOBS, job))
    harness.sync()
    assert harness.job("ddp")["status"]["phase"] == "Halting"
    assert pod_names(harness) == []
    harness.drop_deleted_pods()
    harness.sync()
    halted = harness.job("ddp")["status"]
    assert (halted["phase"], halted["attempt"]) == ("Halted", 1)
    job = harness.job("ddp")
    job["spec"]["runPolicy"]["suspend"] = False
    harness.feed(harness.operator.jobs, harness.api.replace(TRAININGJOBS, job))
    harness.sync()
    assert harness.job("ddp")["status"]["phase"] == "Queued"


def test_an_orphan_pod_is_deleted_once_its_job_is_confirmed_gone(harness: Harness) -> None:
    harness.submit("ddp", pytorch(workers=1))
    harness.sync()
    harness.admit("ddp")
    harness.sync()
    job = harness.job("ddp")
    harness.api.delete(TRAININGJOBS, "ddp", NS)
    harness.operator.jobs.forget(NS, "ddp")
    harness.sync()
    assert pod_names(harness) == []
    # A pod whose job the cache does not show yet, but the API does, is kept.
    harness.submit("late", pytorch(workers=1))
    harness.sync()
    harness.admit("late")
    harness.sync()
    harness.operator.jobs.forget(NS, "late")
    harness.sync()
    assert pod_names(harness) == ["late-worker-0"]
    assert job["metadata"]["uid"] != harness.job("late")["metadata"]["uid"]


def test_a_finished_job_is_deleted_when_its_ttl_has_passed(harness: Harness) -> None:
    harness.submit("ddp", pytorch(workers=1, ttlSecondsAfterFinished=60))
    harness.sync()
    harness.admit("ddp")
    harness.sync()
    harness.set_pod_phase("ddp-worker-0", "Succeeded", exit_code=0)
    wait = harness.sync()
    assert harness.job("ddp")["status"]["phase"] == "Succeeded"
    assert 50 < wait <= 60, "the loop wakes for the TTL timer"
    finished = harness.job("ddp")
    finished["status"]["completionTime"] = (datetime.now(UTC) - timedelta(seconds=61)).isoformat()
    harness.feed(harness.operator.jobs, harness.api.replace_status(TRAININGJOBS, finished))
    harness.sync()
    with pytest.raises(NotFoundError):
        harness.job("ddp")


def test_every_job_is_looked_at_again_at_the_latest_resync_s_after_its_last_reconcile() -> None:
    clock = VirtualClock()
    harness = Harness(clock=clock, resync_s=30.0, accept_hold_s=0.0)
    harness.submit("ddp", pytorch())
    wait = harness.sync()
    assert 29 < wait <= 30
    reconciles = harness.operator.counters.snapshot()["reconciles"]
    clock.advance(20)
    harness.sync()
    assert harness.operator.counters.snapshot()["reconciles"] == reconciles, "not due yet, and nothing changed"
    clock.advance(11)
    harness.sync()
    assert harness.operator.counters.snapshot()["reconciles"] == reconciles + 1
