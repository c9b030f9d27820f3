"""Watch over MemoryBackend: the broadcaster (one backend read for many watchers, the ring, resume, 410, deletions
carrying the last object), the SSE route (list then changes, selectors, Last-Event-ID, heartbeats, shutdown,
refusals) and fieldSelector on lists."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from phalanx.entrypoints.server.app import create_app
from phalanx.entrypoints.server.feeds import Delivery, KindFeed, Subscription
from phalanx.entrypoints.server.fields import SUPPORTED_FIELDS, FieldRequirement, fields_match, parse_field_selector
from phalanx.entrypoints.server.selectors import SelectorError
from phalanx.model.jobs import TrainingJob
from phalanx.services.port import ExpiredError, Stored, WatchEvent
from support.memory_backend import MemoryBackend
from support.waiting import wait_until

API = "/apis/phalanx.dev/v1alpha1"
ML = f"{API}/namespaces/ml/trainingjobs"


def job(name: str, *, queue: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "generic", "replicas": {"worker": {"count": 1, "template": {"command": ["true"]}}}}
    if queue is not None:
        spec["scheduling"] = {"queue": queue}
    return {"kind": "TrainingJob", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def events(text: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, event, data) of each server-sent event of ``text``."""
    found = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            found.append((fields["id"], fields["event"], json.loads(fields["data"])))
    return found


def names(text: str) -> list[tuple[str, str]]:
    return [(kind, data["metadata"].get("name", "")) for _, kind, data in events(text) if kind != "BOOKMARK"]


class CountingBackend(MemoryBackend):
    """MemoryBackend that counts its watch calls and, like the embedded store, sends deletions without a body."""

    def __init__(self) -> None:
        super().__init__()
        self.watch_calls = 0
        self.listed: list[str | None] = []  # the namespace of each list, in order

    def list(self, kind: Any, namespace: str | None = None, **selection: Any) -> list[Any]:
        found = super().list(kind, namespace, **selection)
        self.listed.append(namespace)
        return found

    def watch(self, kind: type[Stored], resource_version: str, *, timeout: float) -> Iterator[WatchEvent]:
        self.watch_calls += 1
        for event in super().watch(kind, resource_version, timeout=timeout):
            yield (
                WatchEvent(event.type, event.resource_version, event.namespace, event.name, None)
                if (event.type == "DELETED")
                else event
            )


@pytest.fixture
def client() -> Iterator[tuple[TestClient, MemoryBackend]]:
    backend = CountingBackend()
    app = create_app(backend)
    yield TestClient(app), backend
    app.state.stop_watches()


def post(client: TestClient, document: dict[str, Any], namespace: str = "ml") -> None:
    answer = client.post(f"{API}/namespaces/{namespace}/trainingjobs", json=document)
    assert answer.status_code == 201, answer.text


def set_phase(backend: MemoryBackend, namespace: str, name: str, phase: str) -> None:
    current = backend.get(TrainingJob, namespace, name)
    assert current is not None
    backend.write_status(current, {"phase": phase})


# -- the broadcaster ----------------------------------------------------------------------------------------------


def test_many_watchers_share_one_backend_read_and_get_every_change_in_order() -> None:
    backend = CountingBackend()

    async def scenario() -> list[list[tuple[str, int]]]:
        feed = await asyncio.to_thread(KindFeed, backend, TrainingJob)
        loop = asyncio.get_running_loop()
        watchers = [Subscription(loop) for _ in range(20)]
        for watcher in watchers:
            feed.subscribe(watcher, None)
        post_jobs(backend, ["a", "b"])
        got: list[list[tuple[str, int]]] = []
        for watcher in watchers:
            seen: list[Delivery] = []
            while len([d for d in seen if d.type != "BOOKMARK"]) < 2:
                await asyncio.wait_for(watcher.ready.wait(), 10)
                watcher.ready.clear()
                seen += watcher.drain()
            got.append([(d.name, d.resource_version) for d in seen if d.type != "BOOKMARK"])
        feed.close()
        return got

    got = asyncio.run(scenario())
    assert got == [[("a", 1), ("b", 2)]] * 20
    assert backend.watch_calls == 1


def post_jobs(backend: MemoryBackend, names_: list[str]) -> None:
    client = TestClient(create_app(backend))
    for name in names_:
        post(client, job(name))


def test_a_resume_older_than_the_ring_reads_the_backend_then_the_ring_without_loss_or_duplicates() -> None:
    backend = CountingBackend()
    post_jobs(backend, ["a"])  # version 1, before the feed starts: only the backend has it

    async def scenario() -> list[tuple[str, str]]:
        feed = await asyncio.to_thread(KindFeed, backend, TrainingJob, keep=2)
        await asyncio.to_thread(post_jobs, backend, ["b", "c", "d"])  # 2, 3, 4: the ring keeps 3 and 4
        await asyncio.to_thread(wait_until, lambda: feed.position == 4, 10, "the feed at 4")
        watcher = Subscription(asyncio.get_running_loop())
        await asyncio.to_thread(feed.subscribe, watcher, 0)
        feed.close()
        return [(d.type, d.name) for d in watcher.drain() if d.type != "BOOKMARK"]

    assert asyncio.run(scenario()) == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c"), ("ADDED", "d")]


def test_a_resume_older_than_the_backend_keeps_is_expired() -> None:
    backend = CountingBackend()
    post_jobs(backend, ["a", "b"])
    backend.expire_changes(1)

    async def scenario() -> None:
        feed = await asyncio.to_thread(KindFeed, backend, TrainingJob)
        try:
            await asyncio.to_thread(feed.subscribe, Subscription(asyncio.get_running_loop()), 0)
        finally:
            feed.close()

    with pytest.raises(ExpiredError):
        asyncio.run(scenario())


# -- the route ----------------------------------------------------------------------------------------------------


def test_a_watch_without_a_place_lists_first_then_sends_each_change_once(
    client: tuple[TestClient, MemoryBackend],
) -> None:
    http, backend = client
    post(http, job("a"))
    post(http, job("other"), namespace="cv")
    assert isinstance(backend, CountingBackend)

    def later() -> None:
        # The watch lists ml once it has joined the feed: changes from then on are the watch's to send.
        wait_until(lambda: "ml" in backend.listed, 10, "the watch to list its namespace")
        set_phase(backend, "ml", "a", "Running")
        post(http, job("b"))
        http.delete(f"{ML}/a")

    backend.listed.clear()
    threading.Thread(target=later).start()
    answer = http.get(f"{ML}?watch=true&timeoutSeconds=4")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert names(answer.text) == [("ADDED", "a"), ("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    ids = [int(i) for i, kind, _ in events(answer.text) if kind != "BOOKMARK"]
    assert ids[1:] == sorted(set(ids[1:])) and ids[0] <= ids[1]
    deleted = events(answer.text)[-1][2]
    assert deleted["status"]["phase"] == "Running"  # the deletion carries the object as last seen


def test_a_watch_resumes_after_the_last_event_id_which_wins_over_resource_version(
    client: tuple[TestClient, MemoryBackend],
) -> None:
    http, _ = client
    for name in ("a", "b", "c"):
        post(http, job(name))
    answer = http.get(f"{ML}?watch=true&resourceVersion=1&timeoutSeconds=1", headers={"Last-Event-ID": "2"})
    assert names(answer.text) == [("ADDED", "c")]
    assert next(i for i, _, _ in events(answer.text)) == "3"


def test_label_and_field_selectors_and_the_namespace_choose_what_a_watch_shows(
    client: tuple[TestClient, MemoryBackend],
) -> None:
    http, backend = client
    post(http, job("a", queue="gpus", labels={"team": "x"}))
    post(http, job("b", queue="cpus", labels={"team": "x"}))
    post(http, job("c", queue="gpus"))
    post(http, job("d", queue="gpus", labels={"team": "x"}), namespace="cv")
    set_phase(backend, "ml", "b", "Running")
    set_phase(backend, "ml", "a", "Queued")
    selected = "labelSelector=team=x&fieldSelector=spec.scheduling.queue=gpus&timeoutSeconds=1"
    # From the start (a list): a only; b is in another queue, c has no label, d is in cv.
    assert names(http.get(f"{ML}?watch=true&{selected}").text) == [("ADDED", "a")]
    # From version 1: a's change, not b's.
    assert names(http.get(f"{ML}?watch=true&resourceVersion=1&{selected}").text) == [("MODIFIED", "a")]
    every = f"{API}/trainingjobs?watch=true&resourceVersion=0&timeoutSeconds=1&fieldSelector=status.phase!=Running"
    assert sorted(names(http.get(every).text)) == [("ADDED", "a"), ("ADDED", "c"), ("ADDED", "d")]


def test_a_quiet_watch_sends_bookmarks_and_shutdown_ends_it(client: tuple[TestClient, MemoryBackend]) -> None:
    http, _ = client
    post(http, job("a"))
    feeds = http.app.state.watch_feeds  # type: ignore[attr-defined]
    feeds.heartbeat = 0.05
    stop = threading.Timer(0.5, http.app.state.stop_watches)  # type: ignore[attr-defined]
    stop.start()
    answer = http.get(f"{ML}?watch=true&resourceVersion=1")  # no timeout: only the shutdown ends it
    stop.join()
    bookmarks = [(i, data) for i, kind, data in events(answer.text) if kind == "BOOKMARK"]
    assert bookmarks, answer.text
    assert bookmarks[0][0] == "1"
    assert bookmarks[0][1]["metadata"] == {"resourceVersion": "1"}
    again = http.get(f"{ML}?watch=true&resourceVersion=1")
    assert again.status_code == 503 and "shutting down" in again.json()["message"]


@pytest.mark.parametrize(
    ("query", "headers", "code", "words"),
    [
        ("resourceVersion=abc", {}, 400, "resourceVersion 'abc' is not a resourceVersion"),
        ("resourceVersion=1", {"Last-Event-ID": "x1"}, 400, "the Last-Event-ID header 'x1'"),
        ("fieldSelector=spec.image=x", {}, 400, "'spec.image' is not a field this server selects on"),
        ("labelSelector=a!=b", {}, 400, "uses '!='"),
        ("timeoutSeconds=0", {}, 400, "timeoutSeconds '0'"),
        ("resourceVersion=1", {}, 410, "older than the changes kept"),
    ],
)
def test_a_watch_that_cannot_be_served_is_a_status_naming_the_problem(
    query: str, headers: dict[str, str], code: int, words: str
) -> None:
    backend = MemoryBackend()
    http = TestClient(create_app(backend))
    for name in ("a", "b", "c"):
        post(http, job(name))
    backend.expire_changes(2)
    answer = http.get(f"{ML}?watch=true&{query}", headers=headers)
    assert answer.status_code == code, answer.text
    assert answer.json()["kind"] == "Status" and words in answer.json()["message"]
    http.app.state.stop_watches()  # type: ignore[attr-defined]


def test_the_openapi_document_names_the_watch_parameters(client: tuple[TestClient, MemoryBackend]) -> None:
    http, _ = client
    document = http.get("/openapi.json").json()
    listing = document["paths"][f"{API}/namespaces/{{namespace}}/trainingjobs"]["get"]
    parameters = {p["name"] for p in listing["parameters"]}
    assert {"watch", "resourceVersion", "timeoutSeconds", "fieldSelector", "labelSelector"} <= parameters
    assert "text/event-stream" in listing["responses"]["200"]["content"]
    assert "410" in listing["responses"]


# -- fieldSelector ------------------------------------------------------------------------------------------------


def test_field_selectors_take_equal_double_equal_and_not_equal() -> None:
    assert parse_field_selector("status.phase=Running, metadata.name==a,spec.scheduling.queue!=gpus") == (
        FieldRequirement("status.phase", "Running"),
        FieldRequirement("metadata.name", "a"),
        FieldRequirement("spec.scheduling.queue", "gpus", equal=False),
    )
    assert parse_field_selector("") == ()
    document = {"metadata": {"name": "a"}, "status": {}}
    assert fields_match(parse_field_selector("status.phase!=Running"), document)  # absent: the empty value
    assert not fields_match(parse_field_selector("status.phase=Running"), document)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("spec.type=generic", "'spec.type' is not a field this server selects on"),
        ("status.phase", "has no '=', '==' or '!='"),
        ("status.phase=a,", "has an empty requirement"),
        ("status.phase=(a)", "holds '=', '!' or a parenthesis"),
    ],
)
def test_a_field_selector_not_supported_is_refused_naming_the_fields_there_are(text: str, words: str) -> None:
    with pytest.raises(SelectorError) as refused:
        parse_field_selector(text)
    assert words in str(refused.value)
    assert all(field in str(refused.value) for field in SUPPORTED_FIELDS)


def test_a_list_takes_a_field_selector(client: tuple[TestClient, MemoryBackend]) -> None:
    http, backend = client
    post(http, job("a", queue="gpus"))
    post(http, job("b", queue="cpus"))
    post(http, job("c", queue="gpus"), namespace="cv")
    set_phase(backend, "ml", "a", "Running")

    def listed(query: str) -> list[str]:
        answer = http.get(f"{API}/trainingjobs?{query}")
        assert answer.status_code == 200, answer.text
        return [item["metadata"]["name"] for item in answer.json()["items"]]

    assert listed("fieldSelector=spec.scheduling.queue=gpus") == ["c", "a"]  # namespace order: cv, ml
    assert listed("fieldSelector=status.phase=Running") == ["a"]
    assert listed("fieldSelector=metadata.namespace!=cv,metadata.name!=a") == ["b"]
    refused = http.get(f"{ML}?fieldSelector=spec.image=x")
    assert refused.status_code == 400 and "metadata.name, metadata.namespace" in refused.json()["message"]


def test_the_watching_section_of_the_docs_names_every_field_and_its_examples_are_served(
    client: tuple[TestClient, MemoryBackend],
) -> None:
    text = (Path(__file__).resolve().parents[3] / "docs" / "server.md").read_text()
    section = text[text.index("## Watching") :]
    assert all(f"`{field}`" in section for field in SUPPORTED_FIELDS)
    example = re.search(r"`(fieldSelector=[^`]+)`", section)
    assert example is not None
    assert parse_field_selector(example.group(1).removeprefix("fieldSelector="))
    http, _ = client
    post(http, job("hello"))
    path = re.search(r"'http://127\.0\.0\.1:8080(/apis/[^']+)'", section)
    assert path is not None
    answer = http.get(f"{path.group(1)}&timeoutSeconds=1")
    assert names(answer.text) == [("ADDED", "hello")]


class ExpiringBackend(MemoryBackend):
    """MemoryBackend whose next feed read finds its place compacted away (``expire`` set), once."""

    def __init__(self) -> None:
        super().__init__()
        self.expire = threading.Event()

    def watch(self, kind: type[Stored], resource_version: str, *, timeout: float) -> Iterator[WatchEvent]:
        if self.expire.is_set():
            self.expire.clear()
            raise ExpiredError("compacted")
        yield from super().watch(kind, resource_version, timeout=min(timeout, 0.2))


def test_a_feed_that_fell_behind_the_kept_changes_ends_its_watchers_and_starts_again() -> None:
    backend = ExpiringBackend()

    async def scenario() -> tuple[str, int, list[str]]:
        feed = await asyncio.to_thread(KindFeed, backend, TrainingJob)
        watcher = Subscription(asyncio.get_running_loop())
        feed.subscribe(watcher, None)
        backend.expire.set()
        await asyncio.wait_for(watcher.ready.wait(), 10)
        while not watcher.closed:
            watcher.ready.clear()
            await asyncio.wait_for(watcher.ready.wait(), 10)
        await asyncio.to_thread(post_jobs, backend, ["after"])  # the feed goes on from where it started again
        head = int(backend.resource_version(TrainingJob))
        await asyncio.to_thread(wait_until, lambda: feed.position >= head, 10, "the feed past the new job")
        again = Subscription(asyncio.get_running_loop())
        await asyncio.to_thread(feed.subscribe, again, 0)
        feed.close()
        return watcher.reason, len(feed._subscribers), [d.name for d in again.drain() if d.type != "BOOKMARK"]

    reason, left, replayed = asyncio.run(scenario())
    assert reason == "changes were missed"
    assert left == 1  # only the second watcher
    assert replayed == ["after"]
