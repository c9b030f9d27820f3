"""The job history over the API on the embedded backend: a real control plane records, a real server serves.

A job created through `phalanx server`, run to the end by the control plane and deleted through the server, is
answered in its namespace's history (the state directory's history.db, which the server opens by default) to a
token of that namespace, and refused to a token of another namespace; tokens come from `phalanx token create`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from test_rest_server_e2e import API, JOBS, make_token, start_server

from conftest import Runtime, generic_job, wait_until

HISTORY = f"{API}/namespaces/default/history"


def test_a_job_run_and_deleted_through_the_api_is_in_its_namespace_history(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane()
    base = start_server(runtime, tmp_path / "server.log")
    editor = make_token(runtime, "team-default", "editor", "default")
    stranger = make_token(runtime, "team-other", "viewer", "other")

    def call(method: str, path: str, token: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(
            method, f"{base}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=10, **kwargs
        )

    assert call("POST", JOBS, editor, json=generic_job("remembered")).status_code == 201

    def finished() -> bool:
        return call("GET", f"{JOBS}/remembered", editor).json().get("status", {}).get("phase") == "Succeeded"

    wait_until(finished, timeout=90, message="the job to succeed")
    assert call("DELETE", f"{JOBS}/remembered", editor).status_code in (200, 202)
    wait_until(lambda: call("GET", f"{JOBS}/remembered", editor).status_code == 404, timeout=60, message="gone")

    def recorded() -> dict[str, Any] | None:
        answer = call("GET", HISTORY, editor, params={"phase": "Succeeded"})
        assert answer.status_code == 200, answer.text
        found = [item for item in answer.json()["items"] if item["name"] == "remembered" and item["deletedAt"]]
        return found[0] if found else None

    record = wait_until(recorded, timeout=60, message="the deleted job in the history")
    assert record["namespace"] == "default" and record["runSeconds"] is not None
    queues = call("GET", HISTORY, editor).json()["queues"]
    assert [(summary["queue"], summary["count"]) for summary in queues] == [("default", 1)]
    refused = call("GET", HISTORY, stranger)
    assert refused.status_code == 403, refused.text
    assert "reaches namespaces other only" in refused.json()["message"]
    # Every namespace, to a token for a few, is the namespaces it reaches: its own records, never another's.
    everywhere = call("GET", f"{API}/history", editor)
    assert everywhere.status_code == 200, everywhere.text
    assert {item["namespace"] for item in everywhere.json()["items"]} == {"default"}
    theirs = call("GET", f"{API}/history", stranger)
    assert theirs.status_code == 200 and theirs.json()["items"] == [], theirs.text
