"""Reclaim within a cohort preempts once: docs/queues.md's worked example, then one more job of team-b.

Issue 14 ("Reclaim loops"): team-a's ``a-train`` borrows 2 of team-b's GPUs; when team-b submits a job under its
quota, the scheduler reclaims them by preempting ``a-train``. Before the fix, ``a-train`` was queued again and
re-admitted into the room freed for team-b's job (team-a, holding nothing then, came first by fair share), then
preempted again, 98-186 times over 15-32 s. The room a preemption frees is now nominated for its preemptor
(``core.scheduling.passes``): one preemption, then team-b's job runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import REPO, Runtime, program_role, typed_job
from phalanx.entrypoints.client import Client
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.loading import parse_queue
from support.waiting import wait_until

INVENTORY = REPO / "examples" / "inventories" / "dgx-2socket-8gpu.yaml"


def team_job(name: str, team: str, *, workers: int, hold: Path) -> dict[str, Any]:
    role = program_role(workers, args=["--hold", str(hold)], cpu=1, memory="1Gi", gpu=2)
    job = typed_job(name, "generic", {"worker": role}, scheduling={"queue": team})
    job["metadata"]["namespace"] = team
    return job


def wait_phase(runtime: Runtime, team: str, name: str, phase: Phase) -> TrainingJob:
    with Client(state_dir=runtime.state_dir, namespace=team) as client:
        return client.wait(name, until={phase}, timeout=60)


def queue(name: str, **spec: Any) -> Any:
    document = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"quota": {"gpu": 4, "cpu": 32, "memory": "256Gi"}, "cohort": "research", "namespaces": [name]},
    }
    document["spec"].update(spec)
    return parse_queue(document)


def test_reclaiming_borrowed_gpus_preempts_the_borrower_once(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane(extra=["--inventory", str(INVENTORY)])
    with runtime.client() as client:
        client.store.create(queue("team-a", weight=2))
        client.store.create(queue("team-b", borrowingLimit={"gpu": 2}))
    hold = tmp_path / "hold"

    runtime.submit(team_job("a-train", "team-a", workers=3, hold=hold))
    wait_phase(runtime, "team-a", "a-train", Phase.RUNNING)
    runtime.submit(team_job("b-train", "team-b", workers=1, hold=hold))
    wait_phase(runtime, "team-b", "b-train", Phase.RUNNING)
    runtime.submit(team_job("a-eval", "team-a", workers=1, hold=hold))
    with Client(state_dir=runtime.state_dir, namespace="team-a") as client:
        waiting = wait_until(lambda: (job := client.get("a-eval")).status.reason == "Waiting" and job)
    assert waiting.status.phase == Phase.QUEUED

    # team-b is under its quota (2/4): its next job reclaims the 2 GPUs team-a borrows, by preempting a-train.
    runtime.submit(team_job("b-more", "team-b", workers=1, hold=hold))
    assert wait_phase(runtime, "team-b", "b-more", Phase.RUNNING).status.phase == Phase.RUNNING

    with Client(state_dir=runtime.state_dir, namespace="team-a") as client:
        preempted = [e for e in client.store.list_events("TrainingJob", "team-a", "a-train") if e.reason == "Preempted"]
        train = client.get("a-train")
    assert len(preempted) == 1, [e.message for e in preempted]
    assert "team-b/b-more" in preempted[0].message, preempted[0].message
    # a-train (6 GPUs) waits: team-b holds its 4 now, and a-eval of team-a may take 2 of the 4 left.
    assert train.status.phase == Phase.QUEUED, train.status.phase
