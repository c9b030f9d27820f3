"""`phalanx get queues` and `describe queue`: usage computed from the jobs, and the table that shows it."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console

from phalanx.entrypoints.cli.render import print_queue_description, queues_table, usage_of_quota
from phalanx.model.errors import SpecError
from phalanx.model.jobs import ReplicaPlacement, TrainingJob
from phalanx.model.loading import parse_queue
from phalanx.model.queues import Queue
from phalanx.services.operations import validate_documents
from phalanx.services.queue_views import describe_queue, job_usage, queue_views


def queue(name: str, **spec: Any) -> Queue:
    return parse_queue({"kind": "Queue", "metadata": {"name": name}, "spec": spec})


def job(
    name: str,
    phase: str,
    queue_name: str | None,
    *,
    placed: int = 0,
    count: int = 2,
    message: str = "",
    deleting: bool = False,
    **resources: Any,
) -> TrainingJob:
    scheduling = {"queue": queue_name} if queue_name else {}
    parsed = TrainingJob.model_validate(
        {
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "type": "generic",
                "scheduling": scheduling,
                "replicas": {
                    "worker": {
                        "count": count,
                        "template": {
                            "command": ["true"],
                            "resources": resources or {"cpu": 2, "memory": "1Gi", "gpu": 1},
                        },
                    }
                },
            },
        }
    )
    placements = {f"{name}-worker-{i}": ReplicaPlacement(node="n", gpus=[i]) for i in range(placed)}
    status = parsed.status.model_copy(update={"phase": phase, "placements": placements, "message": message})
    meta = parsed.metadata
    if deleting:
        meta = meta.model_copy(update={"deletion_timestamp": datetime.now(UTC)})
    return parsed.model_copy(update={"status": status, "metadata": meta})


def test_usage_sums_the_placed_replicas_of_holding_jobs_only() -> None:
    jobs = [
        job("a", "Running", "team", placed=2),
        job("b", "Admitted", "team", placed=1),  # one of two replicas placed: only that one counts
        job("c", "Queued", "team", message="needs 2 GPUs; queue team is at its GPU quota 3/4"),
        job("d", "Pending", "team"),
        job("e", "Succeeded", "team", placed=2),  # finished: holds nothing
        job("f", "Running", "team", placed=2, deleting=True),  # being deleted: counts for nothing
        job("g", "Running", "other", placed=2),
        job("h", "Halting", "team", placed=1, cpu="500m", memory="512Mi", gpuMilli=250),
        job("i", "Running", None, placed=2),  # spec.scheduling.queue defaults to `default`
    ]
    views = {v.name: v for v in queue_views([queue("team"), queue("idle"), queue("default")], jobs)}
    assert list(views) == ["default", "idle", "team"]  # sorted by name
    team = views["team"]
    assert [j.metadata.name for j in team.admitted] == ["a", "b", "h"]
    assert [j.metadata.name for j in team.pending] == ["c", "d"]
    assert (team.admitted_count, team.pending_count) == (3, 2)
    assert team.usage.cpu_milli == 3 * 2000 + 500
    assert team.usage.memory == 3 * 2**30 + 512 * 2**20
    assert team.usage.gpu_milli == 3 * 1000 + 250
    assert views["idle"].usage.cpu_milli == 0 and not views["idle"].admitted
    assert [j.metadata.name for j in views["default"].admitted] == ["i"]
    # The wire form carries the status as computed now.
    current = team.current()
    assert (current.status.admitted, current.status.pending, current.status.usage.cpu) == (3, 2, 6500)


def test_a_job_without_placements_uses_nothing() -> None:
    assert job_usage(job("a", "Running", "team")).cpu_milli == 0


def test_a_repeated_queue_name_keeps_the_first_and_unknown_jobs_count_for_no_queue() -> None:
    first = queue("team", weight=2)
    views = queue_views([first, queue("team", weight=3)], [job("a", "Running", "nowhere", placed=2)])
    assert len(views) == 1 and views[0].queue.spec.weight == 2
    assert views[0].admitted == []


def test_without_the_jobs_the_scheduler_status_is_shown() -> None:
    stored = queue("team", quota={"gpu": 4})
    stored = stored.model_copy(
        update={"status": stored.status.model_validate({"admitted": 2, "pending": 1, "usage": {"gpu": 3}})}
    )
    [view] = queue_views([stored], None)
    assert view.from_status and (view.admitted_count, view.pending_count) == (2, 1)
    assert view.usage.gpu_milli == 3000


def test_usage_of_quota_shows_what_is_borrowed_and_resources_without_quota() -> None:
    team = queue("team", quota={"gpu": 2, "cpu": 8}, cohort="research")
    [view] = queue_views([team], [job("a", "Running", "team", placed=2, count=3, cpu=3, memory="1Gi", gpu=1.0)])
    assert usage_of_quota(view, "gpu", plain=True) == "2/2"
    [view] = queue_views([team], [job("a", "Running", "team", placed=3, count=3, cpu=3, memory="1Gi", gpu=1)])
    assert usage_of_quota(view, "gpu", plain=True) == "3/2 (+1)"
    assert usage_of_quota(view, "gpu") == "[yellow]3/2 (+1)[/]"
    assert usage_of_quota(view, "cpu", plain=True) == "9/8 (+1)"
    assert usage_of_quota(view, "memory", plain=True) == "3Gi/-"  # no memory quota: not limited
    [shared] = queue_views([team], [job("s", "Running", "team", placed=1, count=1, cpu="500m", gpuMilli=500)])
    assert usage_of_quota(shared, "gpu", plain=True) == "0.5/2"
    assert usage_of_quota(shared, "cpu", plain=True) == "500m/8"


def render(renderable: Any) -> str:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(renderable)
    return out.getvalue()


def test_the_table_has_one_row_per_queue_with_usage_over_quota() -> None:
    queues = [queue("team-a", quota={"gpu": 4}, cohort="research", weight=2), queue("team-b")]
    jobs = [
        job("big", "Running", "team-a", placed=3, count=3, cpu=1, memory="1Gi", gpu=2),
        job("wait", "Queued", "team-a"),
    ]
    lines = render(queues_table(queue_views(queues, jobs))).splitlines()
    assert lines[0].split() == ["NAME", "COHORT", "WEIGHT", "GPU", "CPU", "MEMORY", "ADMITTED", "PENDING"]
    assert lines[1].split() == ["team-a", "research", "2", "6/4", "(+2)", "3/-", "3Gi/-", "1", "1"]
    assert lines[2].split() == ["team-b", "-", "1", "0/-", "0/-", "0/-", "0", "0"]


def test_describe_shows_the_jobs_their_waiting_reason_and_the_cohort() -> None:
    queues = [
        queue("team-a", quota={"gpu": 4}, cohort="research", borrowingLimit={"gpu": 2}),
        queue("team-b", quota={"gpu": 4}, cohort="research"),
        queue("solo", quota={"gpu": 1}),
    ]
    jobs = [
        job("run", "Running", "team-a", placed=2),
        job("wait", "Queued", "team-a", message="needs 2 GPUs; queue team-a is at its GPU quota 2/4"),
    ]
    described = describe_queue("team-a", queues, jobs)
    assert described is not None
    assert [v.name for v in described.cohort] == ["team-b"]
    assert describe_queue("nope", queues, jobs) is None
    solo = describe_queue("solo", queues, jobs)
    assert solo is not None and solo.cohort == []
    out = io.StringIO()
    print_queue_description(Console(file=out, width=200, color_system=None), described)
    text = out.getvalue()
    assert "Name:              team-a" in text
    assert "ns/run" in text and "Running" in text
    assert "ns/wait" in text and "needs 2 GPUs; queue team-a is at its GPU quota 2/4" in text
    assert "Other queues of cohort research" in text and "team-b" in text
    gpu_row = next(line for line in text.splitlines() if line.strip().startswith("GPU "))
    assert gpu_row.split() == ["GPU", "2/4", "2"]


def test_submit_validation_takes_queues_and_names_the_document_and_the_fix() -> None:
    good = {"kind": "Queue", "metadata": {"name": "team-a"}, "spec": {"quota": {"gpu": 1}}}
    bad = {"kind": "Queue", "metadata": {"name": "team-b"}, "spec": {"priorityClasses": ["urgent"]}}
    [parsed] = validate_documents([good], {})
    assert isinstance(parsed, Queue)
    with pytest.raises(SpecError) as raised:
        validate_documents([good, bad], {})
    [error] = raised.value.errors
    assert error.path == "spec.priorityClasses[0]"
    assert error.message.startswith("document 2 (queue/team-b): unknown priority class 'urgent'; use one of")
