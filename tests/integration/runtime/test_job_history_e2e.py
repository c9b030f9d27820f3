"""The job history on the embedded runtime: a real control plane records real jobs, which stay found after they
are deleted by the user or removed by their TTL (docs/server.md, "Job history")."""

from __future__ import annotations

import json

import pytest

from conftest import Runtime, generic_job
from phalanx.adapters.history.records import HistoryQuery, JobRecord
from phalanx.adapters.history.store import HistoryError, HistoryStore
from phalanx.model.jobs import Phase
from support.waiting import wait_until

pytestmark = pytest.mark.integration


def open_history(runtime: Runtime) -> HistoryStore:
    def attempt() -> HistoryStore | None:
        if not (runtime.state_dir / "history.db").exists():
            return None
        try:
            return HistoryStore.at_path(runtime.state_dir / "history.db")
        except HistoryError:  # the control plane is making its schema right now
            return None

    store: HistoryStore = wait_until(attempt, message="the control plane's history.db")
    return store


def deleted_record(store: HistoryStore, name: str) -> JobRecord | None:
    for record in store.list(HistoryQuery(limit=100)).records:
        if record.name == name and record.deleted_at is not None:
            return record
    return None


def test_a_deleted_job_and_a_ttl_removed_one_are_still_found_in_the_history(runtime: Runtime) -> None:
    runtime.start_control_plane()
    runtime.submit(generic_job("kept"))
    runtime.submit(generic_job("short-lived", run_policy={"ttlSecondsAfterFinished": 0}))
    done = runtime.wait_phase("kept", {Phase.SUCCEEDED, Phase.FAILED})
    assert done.status.phase == Phase.SUCCEEDED, done.status.message
    runtime.cli("delete", "job", "kept", check=True)
    store = open_history(runtime)

    kept = wait_until(lambda: deleted_record(store, "kept"), message="the deleted job's record")
    assert (kept.uid, kept.phase, kept.queue) == (done.metadata.uid, "Succeeded", "default")
    assert kept.finished_at == done.status.completion_time
    assert kept.run_seconds is not None and kept.run_seconds >= 0
    assert kept.placements and "kept-worker-0" in kept.placements
    assert "Succeeded" in [e["reason"] for e in kept.events]

    removed = wait_until(lambda: deleted_record(store, "short-lived"), message="the TTL-removed job's record")
    assert removed.phase == "Succeeded"  # recorded finished, though it went in the pass that finished it
    assert removed.finished_at is not None

    listed = runtime.cli("history", "-o", "json", check=True)
    names = {item["name"]: item for item in json.loads(listed.stdout)["items"]}
    assert names["kept"]["phase"] == "Succeeded" and names["kept"]["deletedAt"]
    assert "short-lived" in names
    table = runtime.cli("history", "--phase", "Succeeded", "--since", "1h", check=True)
    assert "kept" in table.stdout and "short-lived" in table.stdout
    assert "kept" not in runtime.cli("history", "--phase", "Failed", check=True).stdout
    bad = runtime.cli("history", "--since", "yesterday")
    assert bad.returncode != 0 and "--since" in bad.stderr and "Traceback" not in bad.stderr
