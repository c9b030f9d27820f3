"""The informer's cache against the in-memory API: lists, watch events, and the echoes of this process's own writes."""

from __future__ import annotations

import itertools
from typing import Any

from phalanx.adapters.kubernetes.api import TRAININGJOBS, KubeApiError
from phalanx.adapters.kubernetes.informer import Informer
from support.memory_kube_api import MemoryKubeApi


def job(name: str, phase: str = "Queued") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a"}, "status": {"phase": phase}}


def version(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["resourceVersion"])


def set_phase(api: MemoryKubeApi, name: str, phase: str) -> dict[str, Any]:
    """Another client's (or this process's) status write; the object written."""
    current = api.get(TRAININGJOBS, name, "team-a")
    return api.replace_status(TRAININGJOBS, {**current, "status": {"phase": phase}})


def informer_on(api: MemoryKubeApi) -> tuple[Informer, list[tuple[str, str]]]:
    """An informer that has listed (the watch not started: a test runs it once, to the changes so far)."""
    seen: list[tuple[str, str]] = []
    informer = Informer(api, TRAININGJOBS, on_change=lambda kind, obj: seen.append((kind, version(obj))))
    informer._list()
    seen.clear()
    informer.signal.wait(0)
    return informer, seen


def test_the_echo_of_an_observed_write_is_no_change_but_a_later_version_is() -> None:
    api = MemoryKubeApi()
    api.create(TRAININGJOBS, job("a"))
    informer, seen = informer_on(api)
    informer.observe(set_phase(api, "a", "Admitted"))  # this process's write
    assert informer.signal.wait(0)
    running = set_phase(api, "a", "Running")  # someone else's
    informer._watch()
    assert seen == [("MODIFIED", version(running))], "the Admitted write was this process's, already in the cache"
    cached = informer.get("team-a", "a")
    assert cached is not None and cached["status"]["phase"] == "Running"


def test_an_echo_alone_does_not_wake_the_loop() -> None:
    api = MemoryKubeApi()
    api.create(TRAININGJOBS, job("a"))
    informer, seen = informer_on(api)
    written = set_phase(api, "a", "Admitted")
    informer.observe(written)
    informer.signal.wait(0)
    informer._watch()
    assert seen == []
    assert not informer.signal.wait(0)
    assert informer.resource_version == version(written), "the watch still resumes after the echo"


def test_events_of_versions_never_observed_are_reported() -> None:
    api = MemoryKubeApi()
    api.create(TRAININGJOBS, job("a"))
    informer, seen = informer_on(api)
    added = api.create(TRAININGJOBS, job("b"))
    modified = set_phase(api, "a", "Admitted")
    api.delete(TRAININGJOBS, "b", "team-a")
    informer._watch()
    assert [kind for kind, _ in seen] == ["ADDED", "MODIFIED", "DELETED"]
    assert seen[:2] == [("ADDED", version(added)), ("MODIFIED", version(modified))]
    assert int(seen[2][1]) > int(version(modified)), "a deletion is a version of its own"
    assert informer.get("team-a", "b") is None
    assert informer.signal.wait(0)


def test_start_synced_names_the_caches_that_did_not_fill_and_stops_early_when_asked() -> None:
    import threading

    import pytest

    from phalanx.adapters.kubernetes.api import PODS
    from phalanx.adapters.kubernetes.informer import start_synced

    api = MemoryKubeApi()
    api.create(TRAININGJOBS, job("a"))
    forbidden = MemoryKubeApi()
    forbidden.fail["list"] = itertools.repeat(KubeApiError(403, "Forbidden", "cannot list"))  # every LIST refused
    filled = Informer(api, TRAININGJOBS)
    refused = Informer(forbidden, PODS)
    assert start_synced([filled], timeout=5.0)
    with pytest.raises(KubeApiError, match="the caches of pods did not fill"):
        start_synced([filled, refused], timeout=0.2)
    stop = threading.Event()
    stop.set()
    assert not start_synced([refused], timeout=5.0, stop=stop)
    for informer in (filled, refused):
        informer.stop()
