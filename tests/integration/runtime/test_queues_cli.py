"""Queues through the CLI on the embedded backend, with a real control plane process: `phalanx submit -f` of a
Queue (created, then configured, then unchanged), an invalid one rejected with nothing created, `get queues`,
`describe queue` with usage and waiting reasons computed from the jobs, and `delete queue` warning about the jobs
that keep running.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO, Runtime, parse_table, program_role, typed_job
from phalanx.entrypoints.cli.local_api import ApiError, LocalApi
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.queues import Queue
from phalanx.services.embedded.layout import StateLayout

INVENTORY = REPO / "examples" / "inventories" / "dgx-2socket-8gpu.yaml"


def queue_doc(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def write_all(path: Path, documents: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def holding_job(name: str, gpus: int, hold: Path, queue: str) -> dict[str, Any]:
    role = program_role(1, args=["--hold", str(hold)], cpu=1, memory="1Gi", gpu=gpus)
    return typed_job(name, "generic", {"worker": role}, scheduling={"queue": queue})


def stored_queues(runtime: Runtime) -> dict[str, Queue]:
    with runtime.client() as client:
        return {q.metadata.name: q for q in client.store.list(Queue)}


def test_submit_creates_then_configures_and_rejects_an_invalid_queue(runtime: Runtime) -> None:
    runtime.start_control_plane(extra=["--inventory", str(INVENTORY)])
    team_a = queue_doc("team-a", quota={"gpu": 2, "cpu": 8}, cohort="research")
    path = write_all(
        runtime.work_dir / "queues.yaml", [team_a, queue_doc("team-b", quota={"gpu": 2}, cohort="research")]
    )

    created = runtime.cli("submit", "-f", str(path), check=True)
    assert created.stdout.splitlines()[:2] == ["queue/team-a created", "queue/team-b created"]
    assert stored_queues(runtime)["team-a"].spec.weight == 1

    team_a["spec"]["weight"] = 3
    write_all(path, [team_a])
    configured = runtime.cli("submit", "-f", str(path), check=True)
    assert configured.stdout.splitlines()[0] == "queue/team-a configured"
    assert stored_queues(runtime)["team-a"].spec.weight == 3
    version = stored_queues(runtime)["team-a"].metadata.resource_version
    again = runtime.cli("submit", "-f", str(path), check=True)
    assert again.stdout.splitlines()[0] == "queue/team-a unchanged"  # as kubectl apply says: nothing written
    assert stored_queues(runtime)["team-a"].metadata.resource_version == version

    # One bad document among good ones: nothing is created, and the error names the document, field and fix.
    bad = write_all(
        runtime.work_dir / "bad.yaml",
        [
            queue_doc("team-c", quota={"gpu": 1}),
            holding_job("never", 1, runtime.work_dir / "never.hold", "team-c"),
            queue_doc("team-d", quota={"gpu": 1}, priorityClasses=["normal", "urgent"]),
        ],
    )
    rejected = runtime.cli("submit", "-f", str(bad))
    assert rejected.returncode == 2, rejected.stdout + rejected.stderr
    assert "nothing was created" in rejected.stderr
    assert "spec.priorityClasses[1]" in rejected.stderr
    assert "document 3 (queue/team-d): unknown priority class 'urgent'; use one of low, normal, high" in rejected.stderr
    assert set(stored_queues(runtime)) == {"team-a", "team-b"}
    with runtime.client() as client:
        assert client.store.list(TrainingJob) == []

    # The local REST API serves the same queues, and deletes them.
    api = LocalApi(StateLayout(runtime.state_dir).api_socket)
    try:
        assert [item["metadata"]["name"] for item in api.queues()] == ["team-a", "team-b"]
        described = api.queue("team-a")
        assert (described["spec"]["weight"], described["admitted"], described["pending"]) == (3, [], [])
        assert [other["metadata"]["name"] for other in described["cohort"]] == ["team-b"]
        assert api.delete_queue("team-b") == {"deleted": "team-b", "admitted": []}
        with pytest.raises(ApiError) as missing:
            api.queue("team-b")
        assert missing.value.status == 404 and "queue team-b not found" in str(missing.value)
    finally:
        api.close()
    assert set(stored_queues(runtime)) == {"team-a"}


def test_get_describe_and_delete_show_usage_computed_from_the_jobs(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane(extra=["--inventory", str(INVENTORY)])
    queues = write_all(
        runtime.work_dir / "queues.yaml",
        [
            queue_doc("team-a", quota={"gpu": 2}, cohort="research"),
            queue_doc("team-b", quota={"gpu": 2}, cohort="research"),
        ],
    )
    runtime.cli("submit", "-f", str(queues), check=True)

    # team-a borrows team-b's idle quota: 3 GPUs of a quota of 2.
    runtime.submit(holding_job("big", 3, tmp_path / "big.hold", "team-a"))
    runtime.wait_phase("big", {Phase.RUNNING})
    # The cohort has one GPU of quota left: a 2-GPU job of team-a waits (a job of its own queue and priority is
    # never preempted for it).
    runtime.submit(holding_job("waiter", 2, tmp_path / "waiter.hold", "team-a"))
    waiting = runtime.wait_waiting("waiter")
    assert waiting.status.phase == Phase.QUEUED

    listed = runtime.cli("get", "queues", check=True)
    rows = {row["NAME"]: row for row in parse_table(listed.stdout)}
    assert rows["team-a"]["GPU"] == "3/2 (+1)"
    assert rows["team-a"]["CPU"] == "1/-"
    assert rows["team-a"]["MEMORY"] == "1Gi/-"
    assert (rows["team-a"]["ADMITTED"], rows["team-a"]["PENDING"]) == ("1", "1")
    assert (rows["team-b"]["GPU"], rows["team-b"]["ADMITTED"], rows["team-b"]["PENDING"]) == ("0/2", "0", "0")
    assert rows["team-a"]["COHORT"] == "research"

    one = json.loads(runtime.cli("get", "queue", "team-a", "-o", "json", check=True).stdout)
    assert one["kind"] == "Queue" and one["status"]["usage"]["gpu"] == 3 and one["status"]["admitted"] == 1

    described = runtime.cli("describe", "queue", "team-a", check=True).stdout
    assert "default/big" in described and "default/waiter" in described
    assert waiting.status.message.split(";")[0] in described  # its waiting reason
    assert "Other queues of cohort research" in described and "team-b" in described

    deleted = runtime.cli("delete", "queue", "team-a", check=True)
    assert deleted.stdout.strip() == "queue/team-a deleted"
    assert "keep running: default/big" in " ".join(deleted.stderr.split())
    assert "no longer limited by a quota" in " ".join(deleted.stderr.split())
    assert set(stored_queues(runtime)) == {"team-b"}
    with runtime.client() as client:
        assert client.get("big").status.phase == Phase.RUNNING
    missing = runtime.cli("get", "queue", "team-a")
    assert missing.returncode == 1 and "queue team-a not found; queues: team-b" in missing.stderr

    for name in ("big", "waiter"):
        (tmp_path / f"{name}.hold").write_text("go")
    # Without its Queue, the waiting job is no longer limited by a quota: it runs (5 GPUs are free).
    assert runtime.wait_phase("waiter", {Phase.SUCCEEDED, Phase.FAILED}).status.phase == Phase.SUCCEEDED
