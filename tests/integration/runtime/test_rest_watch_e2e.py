"""Watch through a real `phalanx server` process over a real control plane: a job's phases arrive in order, a
watcher that disconnects resumes from its last id without loss or duplicates, and shutting the server down ends
an open watch.

Two watchers follow the same job: one for the whole run (the reference), one that drops its connection while the
job runs (held by a file) and comes back with ``Last-Event-ID``. Both read with a viewer token.
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
from test_rest_server_e2e import make_token, start_server

from conftest import Runtime, generic_job, wait_until

API = "/apis/phalanx.dev/v1alpha1"
JOBS = f"{API}/namespaces/default/trainingjobs"
ORDER = ["", "Pending", "Queued", "Admitted", "Downloading", "Running", "Storing", "Succeeded"]


class Watcher:
    """One SSE connection read in a thread: every (id, event, phase) it got, until it ends or is stopped."""

    def __init__(self, base: str, token: str, query: str, last_id: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        if last_id is not None:
            headers["Last-Event-ID"] = last_id
        self.events: list[tuple[int, str, str]] = []
        self.status = 0
        self.ended = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(f"{base}{JOBS}?{query}", headers), daemon=True)
        self._thread.start()

    def _read(self, url: str, headers: dict[str, str]) -> None:
        try:
            with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(10, read=60)) as response:
                self.status = response.status_code
                block: dict[str, str] = {}
                for line in response.iter_lines():
                    if self._stop.is_set():
                        return
                    if line:
                        key, _, value = line.partition(": ")
                        block[key] = value
                        continue
                    if block.get("event") not in (None, "BOOKMARK"):
                        document: dict[str, Any] = json.loads(block["data"])
                        phase = (document.get("status") or {}).get("phase") or ""
                        self.events.append((int(block["id"]), block["event"], phase))
                    block = {}
        finally:
            self.ended.set()

    def stop(self) -> None:
        """Drop the connection at the next line (the server sees the client go)."""
        self._stop.set()

    def phases(self) -> list[str]:
        return [phase for _, _, phase in self.events]


def test_a_watcher_sees_the_phases_in_order_and_resumes_without_loss_or_duplicates(
    runtime: Runtime, tmp_path: Path
) -> None:
    runtime.start_control_plane()
    base = start_server(runtime, tmp_path / "server.log")
    server = runtime.background[-1]
    viewer = make_token(runtime, "watcher", "viewer", "default")
    editor = make_token(runtime, "ci", "editor", "default")
    query = "watch=true&fieldSelector=metadata.name=w"
    reference = Watcher(base, viewer, query)
    dropping = Watcher(base, viewer, query)
    wait_until(lambda: reference.status == 200 and dropping.status == 200, timeout=60, message="both watches open")

    hold = tmp_path / "release"
    created = httpx.post(
        f"{base}{JOBS}",
        json=generic_job("w", args=["--hold", str(hold)]),
        headers={"Authorization": f"Bearer {editor}"},
        timeout=10,
    )
    assert created.status_code == 201, created.text
    wait_until(lambda: "Running" in dropping.phases(), timeout=90, message="the dropping watcher to see Running")
    dropping.stop()
    hold.touch()
    wait_until(lambda: "Succeeded" in reference.phases(), timeout=90, message="the job to succeed")
    wait_until(dropping.ended.is_set, timeout=30, message="the dropped connection to end")
    before = list(dropping.events)
    resumed = Watcher(base, viewer, query, last_id=str(before[-1][0]))
    wait_until(lambda: "Succeeded" in resumed.phases(), timeout=60, message="the resumed watcher to catch up")

    ids = [rv for rv, _, _ in reference.events]
    assert ids == sorted(set(ids)), reference.events  # strictly increasing: no duplicate, no going back
    assert reference.events[0][1] == "ADDED"
    phases = reference.phases()
    assert [ORDER.index(p) for p in phases] == sorted(ORDER.index(p) for p in phases), phases
    # The feed hands out an object as it is when read, so versions written between two reads arrive as one: the
    # first phase seen is the job's phase at the first read (Pending, or later on a busy machine), never past
    # Running while the job is held.
    assert ORDER.index(phases[0]) <= ORDER.index("Running") and phases[-1] == "Succeeded", phases
    assert "Running" in phases
    # The dropped watcher, before and after its reconnection, got exactly what the reference got.
    assert before + resumed.events == reference.events

    # Shutting the server down ends an open watch and the server exits (no graceful wait on the stream).
    last = Watcher(base, viewer, "watch=true")
    wait_until(lambda: last.status == 200, timeout=30, message="a watch to open")
    server.send_signal(signal.SIGINT)
    wait_until(last.ended.is_set, timeout=30, message="the watch to end with the server")
    assert server.wait(timeout=30) == 130  # the CLI's exit status for an interrupt, after uvicorn's shutdown
    assert "Finished server process" in (tmp_path / "server.log").read_text()
