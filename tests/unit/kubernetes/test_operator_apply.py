"""The operator's pure pieces: the planner's view of Pods, what a plan creates, orphans, events, spec errors."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from phalanx.adapters.kubernetes.rendering import RenderError, render_pod
from phalanx.core.reconcile import CreateReplica, DeleteReplica, Plan
from phalanx.model.errors import FieldError, SpecError
from phalanx.model.jobs import Phase, ReplicaPlacement, TrainingJob, TrainingJobStatus
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.replicas import ReplicaPhase
from phalanx.model.validation import validate_job
from phalanx.services.kubernetes.apply import (
    PodSettings,
    Timers,
    check_renderable,
    event_body,
    invalid_spec_message,
    may_hold,
    observe_job_pods,
    orphan_pods,
    render_children,
    render_creates,
)

UID = "0b5e6f3c-1111-2222-3333-444455556666"
JOBTYPES = builtin_jobtypes()


def make_job(kind: str, replicas: dict[str, Any], *, name: str = "train") -> tuple[TrainingJob, JobType]:
    raw = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "team-a", "uid": UID},
        "spec": {"type": kind, "replicas": replicas},
    }
    return validate_job(raw, JOBTYPES), JOBTYPES[kind]


def template(**extra: Any) -> dict[str, Any]:
    return {"image": "example.org/trainer:1", "command": ["python", "train.py"], **extra}


def pod(
    name: str,
    *,
    role: str = "worker",
    index: int = 0,
    attempt: int = 0,
    phase: str = "Running",
    uid: str = "pod-uid",
    job_uid: str | None = UID,
    deleting: bool = False,
    exit_code: int | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "team-a",
        "uid": uid,
        "labels": {
            "phalanx.dev/job": "train",
            "phalanx.dev/role": role,
            "phalanx.dev/replica-index": str(index),
            "phalanx.dev/attempt": str(attempt),
        },
        "annotations": {"phalanx.dev/job-uid": job_uid} if job_uid else {},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": phase}
    if exit_code is not None:
        status["containerStatuses"] = [
            {"name": "replica", "state": {"terminated": {"exitCode": exit_code, "finishedAt": "2026-01-01T00:00:05Z"}}}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {}, "status": status}


# -- observing ---------------------------------------------------------------------------------------------------


def test_pods_become_replicas_with_role_index_attempt_phase_and_exit_code() -> None:
    replicas = observe_job_pods(
        [
            pod("train-worker-1", index=1, attempt=2, phase="Failed", uid="b", exit_code=3),
            pod("train-worker-0", uid="a"),
        ],
        deleting=set(),
    )
    assert [(r.name, r.role, r.index, r.attempt, r.phase, r.exit_code) for r in replicas] == [
        ("train-worker-0", "worker", 0, 0, ReplicaPhase.RUNNING, None),
        ("train-worker-1", "worker", 1, 2, ReplicaPhase.FAILED, 3),
    ]


def test_a_pod_this_process_deleted_counts_as_deleting_before_the_watch_says_so() -> None:
    [replica] = observe_job_pods([pod("train-worker-0", uid="a")], deleting={"a"})
    assert replica.deleting
    [other] = observe_job_pods([pod("train-worker-0", uid="a", deleting=True)], deleting=set())
    assert other.deleting


def test_a_pod_without_the_operator_labels_is_not_a_replica() -> None:
    foreign = pod("train-worker-0")
    del foreign["metadata"]["labels"]["phalanx.dev/role"]
    assert observe_job_pods([foreign], deleting=set()) == ()


# -- creating ----------------------------------------------------------------------------------------------------


def test_a_plan_creates_pods_with_its_attempt_the_placement_annotations_and_the_scheduler_name() -> None:
    job, jobtype = make_job(
        "pytorch", {"master": {"template": template()}, "worker": {"count": 2, "template": template()}}
    )
    placement = ReplicaPlacement(node="gpu-3", cpus=[4, 5], gpus=[0, 1])
    decided = Plan(
        status=TrainingJobStatus(),
        actions=(
            CreateReplica(role="worker", index=1, attempt=2, placement=placement),
            DeleteReplica(name="train-worker-0", reason="ReplicaFailed"),
        ),
    )
    [created] = render_creates(job, jobtype, decided, PodSettings(scheduler_name="my-scheduler"))
    meta, spec = created["metadata"], created["spec"]
    assert meta["name"] == "train-worker-1"
    assert meta["labels"]["phalanx.dev/attempt"] == "2"
    assert meta["annotations"]["phalanx.dev/node"] == "gpu-3"
    assert meta["annotations"]["phalanx.dev/gpus"] == "0,1"
    assert meta["annotations"]["phalanx.dev/cpus"] == "4,5"
    assert meta["annotations"]["phalanx.dev/job-uid"] == UID
    assert spec["schedulerName"] == "my-scheduler"
    assert "nodeName" not in spec, "the scheduler binds the pod; the operator never picks its node"
    env = {item["name"]: item["value"] for item in spec["containers"][0]["env"]}
    assert env["RANK"] == "2"
    assert env["PHALANX_ATTEMPT"] == "2"


@pytest.mark.parametrize(("workers", "bound"), [(1, True), (2, False)], ids=["gang-of-one", "gang-of-two"])
def test_only_the_pod_of_a_gang_of_one_is_created_on_its_node(workers: int, bound: bool) -> None:
    job, jobtype = make_job("generic", {"worker": {"count": workers, "template": template()}})
    placements = {f"train-worker-{i}": ReplicaPlacement(node=f"gpu-{i}", gpus=[i]) for i in range(workers)}
    job = job.model_copy(update={"status": TrainingJobStatus(phase=Phase.DOWNLOADING, placements=placements)})
    actions = tuple(
        CreateReplica(role="worker", index=i, attempt=0, placement=placements[f"train-worker-{i}"])
        for i in range(workers)
    )
    created = render_creates(job, jobtype, Plan(status=job.status, actions=actions), PodSettings())
    assert [pod["spec"].get("nodeName") for pod in created] == (["gpu-0"] if bound else [None] * workers)
    assert all(pod["spec"]["schedulerName"] == "phalanx-scheduler" for pod in created)


def test_a_shared_gpu_placement_is_annotated_and_in_the_env() -> None:
    job, jobtype = make_job("generic", {"worker": {"template": template(resources={"gpuMilli": 250})}})
    placement = ReplicaPlacement(node="gpu-0", gpus=[3], gpu_milli=250)
    created = render_pod(job, jobtype, "worker", 0, 0, placement=placement)
    assert created["metadata"]["annotations"]["phalanx.dev/gpu-milli"] == "250"
    assert created["metadata"]["annotations"]["phalanx.dev/gpus"] == "3"
    assert {"name": "PHALANX_GPU_MILLI", "value": "250"} in created["spec"]["containers"][0]["env"]


def test_without_a_placement_a_pod_has_no_placement_annotations() -> None:
    job, jobtype = make_job("generic", {"worker": {"template": template()}})
    annotations = render_pod(job, jobtype, "worker", 0, 0)["metadata"]["annotations"]
    assert not {"phalanx.dev/node", "phalanx.dev/gpus", "phalanx.dev/cpus"} & set(annotations)


def test_an_mpi_job_needs_a_service_and_a_hostfile_a_pytorch_job_only_a_service() -> None:
    mpi, mpi_type = make_job(
        "mpi", {"launcher": {"template": template()}, "worker": {"count": 2, "template": template()}}
    )
    assert [child["kind"] for child in render_children(mpi, mpi_type)] == ["Service", "ConfigMap"]
    ddp, ddp_type = make_job("pytorch", {"worker": {"count": 2, "template": template()}})
    [service] = render_children(ddp, ddp_type)
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"


def test_a_job_of_one_replica_needs_neither_service_nor_hostfile() -> None:
    job, jobtype = make_job("generic", {"worker": {"template": template()}})
    assert render_children(job, jobtype) == []


@pytest.mark.parametrize(
    ("stored", "planned", "held"),
    [
        (Phase.ADMITTED, Phase.DOWNLOADING, True),
        (Phase.PENDING, Phase.QUEUED, True),
        (Phase.PENDING, Phase.HALTED, False),
        (Phase.PENDING, Phase.FAILED, False),
        (Phase.ADMITTED, Phase.RUNNING, False),
        (Phase.DOWNLOADING, Phase.RUNNING, False),
        (Phase.ADMITTED, Phase.HALTING, False),
        (Phase.ADMITTED, Phase.FAILED, False),
        (Phase.RUNNING, Phase.RESTARTING, False),
    ],
    ids=lambda value: value if isinstance(value, bool) else str(value),
)
def test_only_accepting_and_starting_to_download_may_wait_for_the_next_write(
    stored: Phase, planned: Phase, held: bool
) -> None:
    assert may_hold(TrainingJobStatus(phase=stored), TrainingJobStatus(phase=planned)) is held


def test_a_role_without_an_image_is_found_before_admission_and_the_operator_default_fills_it() -> None:
    job, jobtype = make_job("pytorch", {"worker": {"template": {"command": ["python", "train.py"]}}})
    with pytest.raises(RenderError, match=r"spec\.replicas\.worker\.template\.image"):
        check_renderable(job, jobtype, PodSettings())
    check_renderable(job, jobtype, PodSettings(image="example.org/default:1"))


def test_a_pod_name_longer_than_a_dns_label_is_found_before_admission() -> None:
    job, jobtype = make_job("pytorch", {"worker": {"template": template()}}, name="j" * 60)
    with pytest.raises(RenderError, match=r"shorten metadata\.name"):
        check_renderable(job, jobtype, PodSettings())


# -- orphans, events, errors -------------------------------------------------------------------------------------


def test_orphans_are_pods_whose_job_uid_names_no_live_job() -> None:
    mine = pod("train-worker-0", uid="a")
    orphan = pod("old-worker-0", uid="b", job_uid="gone")
    foreign = pod("other-0", uid="c", job_uid=None)
    going = pod("old-worker-1", uid="d", job_uid="gone", deleting=True)
    assert orphan_pods([mine, orphan, foreign, going], live_job_uids={UID}) == [orphan]


def test_an_event_names_the_job_by_uid() -> None:
    job = {"apiVersion": "phalanx.dev/v1alpha1", "metadata": {"name": "train", "namespace": "team-a", "uid": UID}}
    body = event_body(
        job,
        "Started",
        "x" * 5000,
        warning=True,
        now=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        component="phalanx-operator",
        instance="op-1",
    )
    assert body["involvedObject"] == {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "name": "train",
        "namespace": "team-a",
        "uid": UID,
    }
    assert body["type"] == "Warning"
    assert body["metadata"] == {"generateName": "train.", "namespace": "team-a"}
    assert body["firstTimestamp"] == "2026-01-02T03:04:05Z"
    assert len(body["message"]) == 1024


def test_a_spec_error_becomes_one_line_of_field_paths() -> None:
    error = SpecError([FieldError("spec.type", "unknown job type 'x'"), FieldError("spec.size", "bad")])
    assert invalid_spec_message(error) == "spec.type: unknown job type 'x'; spec.size: bad"


def test_normal_events_are_budgeted_under_a_burst_and_warnings_never_are() -> None:
    from phalanx.services.kubernetes.apply import EventBudget

    now = [0.0]
    budget = EventBudget(burst=3, per_s=2.0, clock=lambda: now[0])
    assert [budget.allow(warning=False) for _ in range(4)] == [True, True, True, False]
    assert budget.allow(warning=True)
    now[0] = 0.5  # one token back
    assert [budget.allow(warning=False) for _ in range(2)] == [True, False]


def test_an_informer_index_follows_writes_and_deletions() -> None:
    from phalanx.adapters.kubernetes.api import PODS
    from phalanx.adapters.kubernetes.informer import Informer
    from phalanx.services.kubernetes.apply import job_uid_of

    informer = Informer(None, PODS, index=job_uid_of)  # type: ignore[arg-type]

    def pod(name: str, job_uid: str, version: str) -> dict[str, Any]:
        meta = {"name": name, "namespace": "ns", "resourceVersion": version}
        return {"metadata": {**meta, "annotations": {"phalanx.dev/job-uid": job_uid}}}

    informer.observe(pod("a", "u1", "1"))
    informer.observe(pod("b", "u1", "2"))
    informer.observe(pod("c", "u2", "3"))
    assert sorted(p["metadata"]["name"] for p in informer.indexed("u1")) == ["a", "b"]
    informer.observe(pod("b", "u2", "4"))  # a new Pod of the same name, for another job
    assert [p["metadata"]["name"] for p in informer.indexed("u1")] == ["a"]
    informer.forget("ns", "a")
    assert informer.indexed("u1") == []
    assert sorted(p["metadata"]["name"] for p in informer.indexed("u2")) == ["b", "c"]


# -- timers ------------------------------------------------------------------------------------------------------


def test_timers_give_the_due_keys_once_and_the_earliest_deadline() -> None:
    timers: Timers[str] = Timers()
    timers.set("a", 5.0)
    timers.set("b", 2.0)
    timers.set("c", 9.0)
    assert timers.earliest() == 2.0
    assert timers.pop_due(1.0) == []
    assert timers.pop_due(5.0) == ["b", "a"]
    assert timers.pop_due(5.0) == [], "a due key is given once"
    assert (timers.earliest(), len(timers)) == (9.0, 1)


def test_a_replaced_or_cancelled_deadline_never_fires() -> None:
    timers: Timers[str] = Timers()
    timers.set("a", 1.0)
    timers.set("a", 7.0)  # looked at again later instead
    timers.set("b", 2.0)
    timers.cancel("b")
    assert timers.earliest() == 7.0
    assert timers.pop_due(6.0) == []
    assert timers.pop_due(7.0) == ["a"]
    assert timers.earliest() is None


def test_timers_stay_small_when_one_key_is_set_again_and_again() -> None:
    timers: Timers[str] = Timers()
    for step in range(10_000):
        timers.set("busy", float(step))
    assert len(timers._heap) <= 2 * len(timers) + 64
    assert timers.pop_due(10_000.0) == ["busy"]


def test_background_flush_waits_for_writes_and_those_they_start_and_gives_up_at_its_timeout() -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from phalanx.services.kubernetes.apply import Background

    background, done, release = Background(), [], threading.Event()
    with ThreadPoolExecutor(2) as pool:

        def second() -> None:
            done.append("second")

        def first() -> None:
            background.track(pool.submit(second))  # an explanation that posts an Event
            done.append("first")

        background.track(pool.submit(first))
        background.flush()
        assert sorted(done) == ["first", "second"]
        background.track(pool.submit(release.wait))
        background.flush(timeout=0.05)  # returns although the write is still under way
        assert not release.is_set()
        release.set()
        background.flush()
