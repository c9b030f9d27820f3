"""ParsedObjects: an informer's objects parsed once per resourceVersion, invalid ones logged once."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from phalanx.adapters.kubernetes.parsed import ParsedObjects


def obj(name: str, version: str, value: Any, uid: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": uid or f"uid-{name}", "resourceVersion": version}, "spec": value}


def test_an_object_is_parsed_again_only_when_its_version_moves_and_gone_ones_are_forgotten() -> None:
    calls: list[str] = []

    def parse(o: dict[str, Any]) -> int:
        calls.append(o["metadata"]["name"])
        return int(o["spec"])

    parsed = ParsedObjects("Thing", parse)
    assert parsed.all([obj("a", "1", 1), obj("b", "1", 2)]) == [1, 2]
    assert parsed.all([obj("a", "1", 1), obj("b", "1", 2)]) == [1, 2]
    assert calls == ["a", "b"], "unchanged versions are not parsed again"
    assert parsed.all([obj("a", "2", 5)]) == [5]
    assert calls == ["a", "b", "a"] and len(parsed) == 1, "b left the cache and is forgotten"
    # Deleted and created again under the same name: a new uid, parsed afresh even at the same version.
    assert parsed.get(obj("a", "2", 7, uid="uid-new")) == 7


def test_an_invalid_object_is_none_and_logged_once_per_version(caplog: pytest.LogCaptureFixture) -> None:
    parsed = ParsedObjects("Thing", lambda o: int(o["spec"]))
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert parsed.all([obj("bad", "1", "x"), obj("good", "1", "3")]) == [3]
        assert parsed.get(obj("bad", "2", "y")) is None
    warnings = [r.getMessage() for r in caplog.records if "invalid Thing bad" in r.getMessage()]
    assert len(warnings) == 2, warnings


def test_a_parsed_cache_reads_its_informers_objects_and_names_their_kind(caplog: pytest.LogCaptureFixture) -> None:
    from phalanx.adapters.kubernetes.api import QUEUES
    from phalanx.adapters.kubernetes.informer import Informer
    from phalanx.adapters.kubernetes.parsed import ParsedCache

    informer = Informer(None, QUEUES)  # type: ignore[arg-type]  # no I/O: fed by hand
    parsed = ParsedCache(informer, lambda o: int(o["spec"]))
    informer.observe(obj("a", "1", 1))
    informer.observe(obj("bad", "1", "x"))
    with caplog.at_level(logging.WARNING):
        assert parsed.current() == [1]
    assert any("invalid Queue bad" in r.getMessage() for r in caplog.records)
