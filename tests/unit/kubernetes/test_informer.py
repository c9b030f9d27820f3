"""The informer's cache against a scripted API: lists, watch events, and the echoes of this process's own writes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from phalanx.adapters.kubernetes.api import TRAININGJOBS, KubeApiError, Resource
from phalanx.adapters.kubernetes.informer import Informer


def job(name: str, version: int, phase: str = "Queued") -> dict[str, Any]:
    return {
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "team-a", "resourceVersion": str(version)},
        "status": {"phase": phase},
    }


class ScriptedApi:
    """One LIST answer, then one WATCH that yields the scripted events and ends."""

    def __init__(self, items: list[dict[str, Any]], events: list[tuple[str, dict[str, Any]]]) -> None:
        self.items = items
        self.events = events

    def list(self, resource: Resource, namespace: str | None = None, **_: Any) -> tuple[list[dict[str, Any]], str]:
        return list(self.items), "1"

    def watch(self, resource: Resource, version: str, namespace: str | None = None, **_: Any) -> Iterator[Any]:
        yield from self.events


def informer_on(api: ScriptedApi) -> tuple[Informer, list[tuple[str, str]]]:
    seen: list[tuple[str, str]] = []
    informer = Informer(
        api,  # type: ignore[arg-type]
        TRAININGJOBS,
        on_change=lambda kind, obj: seen.append((kind, obj["metadata"]["resourceVersion"])),
    )
    informer._list()
    seen.clear()
    informer.signal.wait(0)
    return informer, seen


def test_the_echo_of_an_observed_write_is_no_change_but_a_later_version_is() -> None:
    api = ScriptedApi([job("a", 1)], [("MODIFIED", job("a", 5, "Admitted")), ("MODIFIED", job("a", 6, "Running"))])
    informer, seen = informer_on(api)
    informer.observe(job("a", 5, "Admitted"))  # this process wrote version 5
    assert informer.signal.wait(0)
    informer._watch()
    assert seen == [("MODIFIED", "6")], "version 5 was this process's own write, already in the cache"
    cached = informer.get("team-a", "a")
    assert cached is not None and cached["status"]["phase"] == "Running"


def test_an_echo_alone_does_not_wake_the_loop() -> None:
    api = ScriptedApi([job("a", 1)], [("MODIFIED", job("a", 5))])
    informer, seen = informer_on(api)
    informer.observe(job("a", 5))
    informer.signal.wait(0)
    informer._watch()
    assert seen == []
    assert not informer.signal.wait(0)
    assert informer.resource_version == "5", "the watch still resumes after the echo"


def test_events_of_versions_never_observed_are_reported() -> None:
    api = ScriptedApi([job("a", 1)], [("ADDED", job("b", 2)), ("MODIFIED", job("a", 3)), ("DELETED", job("b", 4))])
    informer, seen = informer_on(api)
    informer._watch()
    assert seen == [("ADDED", "2"), ("MODIFIED", "3"), ("DELETED", "4")]
    assert informer.get("team-a", "b") is None
    assert informer.signal.wait(0)


class ForbiddenApi(ScriptedApi):
    """Every LIST is refused, as when the service account lacks a permission."""

    def list(self, resource: Resource, namespace: str | None = None, **_: Any) -> tuple[list[dict[str, Any]], str]:
        raise KubeApiError(403, "Forbidden", "cannot list")


def test_start_synced_names_the_caches_that_did_not_fill_and_stops_early_when_asked() -> None:
    import threading

    import pytest

    from phalanx.adapters.kubernetes.api import PODS
    from phalanx.adapters.kubernetes.informer import start_synced

    filled = Informer(ScriptedApi([job("a", 1)], []), TRAININGJOBS)  # type: ignore[arg-type]
    refused = Informer(ForbiddenApi([], []), PODS)  # type: ignore[arg-type]
    assert start_synced([filled], timeout=5.0)
    with pytest.raises(KubeApiError, match="the caches of pods did not fill"):
        start_synced([filled, refused], timeout=0.2)
    stop = threading.Event()
    stop.set()
    assert not start_synced([refused], timeout=5.0, stop=stop)
    for informer in (filled, refused):
        informer.stop()
