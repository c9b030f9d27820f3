"""Preemption and queue quotas in the embedded runtime, with real replica processes on the simulated 8-GPU server.

A critical job stops a low-priority one that holds every GPU, runs, and the victim runs again afterwards; a Queue
with a one-GPU quota admits its jobs one at a time. Replicas write a progress line every 0.05 s while they hold,
so the tests can tell from the files alone whether two replicas ever held the same GPUs at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import REPO, Runtime, processes_mentioning, program_role, read_envs, typed_job, wait_until
from phalanx.model.jobs import Phase
from phalanx.model.loading import parse_queue
from phalanx.model.queues import Queue

INVENTORY = REPO / "examples" / "inventories" / "dgx-2socket-8gpu.yaml"


def gpu_job(name: str, gpus: int, args: list[str], **scheduling: Any) -> dict[str, Any]:
    role = program_role(1, args=args, cpu=1, memory="1Gi", gpu=gpus)
    return typed_job(name, "generic", {"worker": role}, scheduling=scheduling)


def holding_args(tmp_path: Path, name: str) -> list[str]:
    """Arguments that make a replica record its start, write its environment, and hold until released."""
    return [
        "--record",
        str(tmp_path / f"{name}.record"),
        "--env-dir",
        str(tmp_path / f"{name}-env"),
        "--progress",
        str(tmp_path / f"{name}.progress"),
        "--hold",
        str(tmp_path / f"{name}.hold"),
    ]


def starts(tmp_path: Path, name: str) -> list[tuple[int, float]]:
    """(attempt, start time) of every run of the job's replica, in order."""
    path = tmp_path / f"{name}.record"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(int(attempt), float(start)) for _, attempt, _, start in (line.split() for line in lines)]


def progress(tmp_path: Path, name: str) -> list[float]:
    """The times at which the job's replicas were seen holding, across all their runs."""
    path = tmp_path / f"{name}.progress"
    return [float(line.split()[1]) for line in path.read_text().splitlines()] if path.exists() else []


def visible_gpus(tmp_path: Path, name: str) -> list[int]:
    env = read_envs(tmp_path / f"{name}-env")["worker-0"]
    return sorted(int(index) for index in env["CUDA_VISIBLE_DEVICES"].split(","))


def test_a_critical_job_preempts_a_low_one_that_runs_again_after_it(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane(extra=["--inventory", str(INVENTORY)])
    runtime.submit(gpu_job("low", 8, holding_args(tmp_path, "low"), priorityClass="low"))
    first = runtime.wait_phase("low", {Phase.RUNNING})
    wait_until(lambda: progress(tmp_path, "low"), message="low to hold its GPUs")
    assert first.status.placements["low-worker-0"].gpus == list(range(8))
    assert visible_gpus(tmp_path, "low") == list(range(8))

    runtime.submit(gpu_job("critical", 8, holding_args(tmp_path, "critical"), priorityClass="critical"))
    critical = runtime.wait_phase("critical", {Phase.RUNNING})
    assert critical.status.placements["critical-worker-0"].gpus == list(range(8))
    wait_until(lambda: progress(tmp_path, "critical"), message="critical to hold its GPUs")
    assert visible_gpus(tmp_path, "critical") == list(range(8))

    # The victim went Running -> Preempted -> Queued, and waits behind the critical job.
    victim = runtime.wait_waiting("low")
    assert victim.status.phase == Phase.QUEUED
    assert victim.status.message.startswith("needs 8 GPUs"), victim.status.message
    assert victim.status.attempt == first.status.attempt + 1
    assert [c.type for c in victim.status.conditions][-2:] == ["Preempted", "Queued"]
    with runtime.client() as client:
        events = client.store.list_events("TrainingJob", "default", "low")
        critical_events = client.store.list_events("TrainingJob", "default", "critical")
    preempted = [event for event in events if event.reason == "Preempted"]
    assert len(preempted) == 1
    assert preempted[0].type == "Warning"  # as phalanx-scheduler records it on Kubernetes: the job was stopped
    assert preempted[0].message.startswith("preempted to make room for default/critical, whose priority 1000"), (
        preempted[0].message
    )
    # The preemptor was not admitted in the cycle that preempted: it waited for the victim's replica to stop.
    waited = [event.message for event in critical_events if event.reason == "Waiting"]
    assert any(message.startswith("preempted default/low to make room") for message in waited), waited
    assert processes_mentioning(str(tmp_path / "low.hold")) == []

    [(low_attempt, _)] = starts(tmp_path, "low")
    [(_, critical_start)] = starts(tmp_path, "critical")
    assert max(progress(tmp_path, "low")) < critical_start, "low still held the GPUs when critical started"

    (tmp_path / "critical.hold").write_text("go")
    done = runtime.wait_phase("critical", {Phase.SUCCEEDED, Phase.FAILED})
    assert done.status.phase == Phase.SUCCEEDED, done.status.message
    critical_end = max(progress(tmp_path, "critical"))

    again = runtime.wait_phase("low", {Phase.RUNNING})
    assert again.status.placements["low-worker-0"].gpus == list(range(8))
    wait_until(lambda: len(starts(tmp_path, "low")) == 2, message="low's second run to start")
    [_, (second_attempt, second_start)] = starts(tmp_path, "low")
    assert second_attempt == low_attempt + 1
    assert second_start > critical_end, "low started again while critical still held the GPUs"
    assert [t for t in progress(tmp_path, "low") if critical_start <= t <= critical_end] == []

    (tmp_path / "low.hold").write_text("go")
    final = runtime.wait_phase("low", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.SUCCEEDED, final.status.message


def test_a_queue_with_a_one_gpu_quota_runs_its_jobs_one_at_a_time(runtime: Runtime, tmp_path: Path) -> None:
    # The Queue goes into the store directly here; `phalanx submit -f` creates one too (test_queues_cli.py).
    runtime.start_control_plane(extra=["--inventory", str(INVENTORY)])
    queue = parse_queue(
        {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": "team-a"},
            "spec": {"quota": {"gpu": 1}},
        }
    )
    with runtime.client() as client:
        client.store.create(queue)

    runtime.submit(gpu_job("first", 1, holding_args(tmp_path, "first"), queue="team-a"))
    runtime.wait_phase("first", {Phase.RUNNING})
    runtime.submit(gpu_job("second", 1, holding_args(tmp_path, "second"), queue="team-a"))
    waiting = runtime.wait_waiting("second")
    assert waiting.status.phase == Phase.QUEUED
    assert waiting.status.message == (
        "needs 1 GPU; queue team-a is at its GPU quota 1/1 and no cohort to borrow from; "
        "preemption cannot help: no running job it may preempt holds what it lacks"
    )

    def counted() -> Any:
        with runtime.client() as client:
            [stored] = [q for q in client.store.list(Queue) if q.metadata.name == "team-a"]
        return stored.status if stored.status.pending == 1 and stored.status.admitted == 1 else None

    status = wait_until(counted, message="team-a's status to count its jobs")
    assert status.usage.gpu == 1

    # The quota limits its own queue only: a job of the default queue (no Queue object) still gets a GPU.
    runtime.submit(gpu_job("other", 1, holding_args(tmp_path, "other")))
    runtime.wait_phase("other", {Phase.RUNNING})
    assert runtime.wait_waiting("second").status.phase == Phase.QUEUED
    assert starts(tmp_path, "second") == []

    wait_until(lambda: progress(tmp_path, "first"), message="first to hold its GPU")
    (tmp_path / "first.hold").write_text("go")
    assert runtime.wait_phase("first", {Phase.SUCCEEDED, Phase.FAILED}).status.phase == Phase.SUCCEEDED
    first_end = max(progress(tmp_path, "first"))
    runtime.wait_phase("second", {Phase.RUNNING})
    wait_until(lambda: starts(tmp_path, "second"), message="second to start")
    [(_, second_start)] = starts(tmp_path, "second")
    assert second_start > first_end

    for name in ("second", "other"):
        (tmp_path / f"{name}.hold").write_text("go")
        final = runtime.wait_phase(name, {Phase.SUCCEEDED, Phase.FAILED})
        assert final.status.phase == Phase.SUCCEEDED, final.status.message


def test_a_queue_for_other_namespaces_leaves_the_job_waiting_with_the_fix(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane(extra=["--inventory", str(INVENTORY)])
    queue = parse_queue(
        {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": "team-z"},
            "spec": {"quota": {"gpu": 8}, "namespaces": ["team-z"]},
        }
    )
    with runtime.client() as client:
        client.store.create(queue)
    runtime.submit(gpu_job("stray", 1, holding_args(tmp_path, "stray"), queue="team-z"))
    waiting = runtime.wait_waiting("stray")
    assert waiting.status.phase == Phase.QUEUED
    assert waiting.status.message == (
        "queue team-z takes jobs of namespace team-z only, not default: set spec.scheduling.queue to a queue that "
        "takes default, or add default to the queue's spec.namespaces"
    )
    assert starts(tmp_path, "stray") == []
