"""The job history on the embedded runtime: a real control plane records real jobs, which stay found after they
are deleted by the user or removed by their TTL (docs/server.md, "Job history")."""

from __future__ import annotations

import json

import pytest

from conftest import Runtime, generic_job
from phalanx.adapters.history.records import HistoryQuery, JobRecord
from phalanx.adapters.history.store import HistoryError, HistoryStore
from phalanx.model.jobs import Phase
from support.postgres import fresh_database
from support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(params=["sqlite", "postgresql"])
def history_url(request: pytest.FixtureRequest) -> str | None:
    """None: the control plane's default, history.db in its state directory; else a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return None
    return fresh_database(request.getfixturevalue("postgres"), "history")


def start(runtime: Runtime, history_url: str | None, *extra: str) -> list[str]:
    """Start a control plane keeping its history at ``history_url``; the options that make the CLI read it."""
    where = [] if history_url is None else ["--history-url", history_url]
    runtime.start_control_plane(extra=[*where, *extra])
    return where


def open_history(runtime: Runtime, history_url: str | None) -> HistoryStore:
    def attempt() -> HistoryStore | None:
        if history_url is None and not (runtime.state_dir / "history.db").exists():
            return None
        try:
            return HistoryStore(history_url or f"sqlite:///{runtime.state_dir / 'history.db'}")
        except HistoryError:  # the control plane is making its schema right now
            return None

    store: HistoryStore = wait_until(attempt, message="the control plane's history.db")
    return store


def deleted_record(store: HistoryStore, name: str) -> JobRecord | None:
    for record in store.list(HistoryQuery(limit=100)).records:
        if record.name == name and record.deleted_at is not None:
            return record
    return None


def test_a_deleted_job_and_a_ttl_removed_one_are_still_found_in_the_history(
    runtime: Runtime, history_url: str | None
) -> None:
    where = start(runtime, history_url)
    runtime.submit(generic_job("kept"))
    runtime.submit(generic_job("short-lived", run_policy={"ttlSecondsAfterFinished": 0}))
    done = runtime.wait_phase("kept", {Phase.SUCCEEDED, Phase.FAILED})
    assert done.status.phase == Phase.SUCCEEDED, done.status.message
    runtime.cli("delete", "job", "kept", check=True)
    store = open_history(runtime, history_url)

    kept = wait_until(lambda: deleted_record(store, "kept"), message="the deleted job's record")
    assert (kept.uid, kept.phase, kept.queue) == (done.metadata.uid, "Succeeded", "default")
    assert kept.finished_at == done.status.completion_time
    assert kept.run_seconds is not None and kept.run_seconds >= 0
    assert kept.placements and "kept-worker-0" in kept.placements
    assert "Succeeded" in [e["reason"] for e in kept.events]

    removed = wait_until(lambda: deleted_record(store, "short-lived"), message="the TTL-removed job's record")
    assert removed.phase == "Succeeded"  # recorded finished, though it went in the pass that finished it
    assert removed.finished_at is not None

    listed = runtime.cli("history", *where, "-o", "json", check=True)
    listed_items = json.loads(listed.stdout)["items"]
    names = {item["name"]: item for item in listed_items}
    assert names["kept"]["phase"] == "Succeeded" and names["kept"]["deletedAt"]
    assert "short-lived" in names
    first = json.loads(runtime.cli("history", *where, "--limit", "1", "-o", "json", check=True).stdout)
    second = json.loads(
        runtime.cli("history", *where, "--limit", "1", "--continue", first["next"], "-o", "json", check=True).stdout
    )
    assert [first["items"][0]["name"], second["items"][0]["name"]] == [i["name"] for i in listed_items]
    assert second["next"] is None
    bad_page = runtime.cli("history", *where, "--continue", "nonsense")
    assert bad_page.returncode != 0 and "cursor" in bad_page.stderr and "Traceback" not in bad_page.stderr
    table = runtime.cli("history", *where, "--phase", "Succeeded", "--since", "1h", check=True)
    assert "kept" in table.stdout and "short-lived" in table.stdout
    assert "kept" not in runtime.cli("history", *where, "--phase", "Failed", check=True).stdout
    bad = runtime.cli("history", "--since", "yesterday")
    assert bad.returncode != 0 and "--since" in bad.stderr and "Traceback" not in bad.stderr


def test_retention_keeps_only_the_newest_records(runtime: Runtime, history_url: str | None) -> None:
    where = start(runtime, history_url, "--history-keep", "1")
    for name in ("first", "second"):
        runtime.submit(generic_job(name))
        assert runtime.wait_phase(name, {Phase.SUCCEEDED, Phase.FAILED}).status.phase == Phase.SUCCEEDED
    store = open_history(runtime, history_url)
    wait_until(
        lambda: [r.name for r in store.list(HistoryQuery()).records] == ["second"],
        message="only the newest record, the other dropped by --history-keep 1",
    )
    summary = json.loads(runtime.cli("history", *where, "--summary", "-o", "json", check=True).stdout)
    assert [(q["queue"], q["count"]) for q in summary["queues"]] == [("default", 1)]
