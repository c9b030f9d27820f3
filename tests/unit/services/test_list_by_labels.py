"""The port's ``list(kind, namespace, labels=...)``: every backend selects the same objects, and selects early.

The memory backend and the Kubernetes backends (a LIST with a label selector; the operator's informer caches,
selected before parsing) are checked here; the embedded store's SQL selection in tests/integration/store.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from phalanx.adapters.kubernetes.api import SWEEPS
from phalanx.adapters.kubernetes.informer import Informer
from phalanx.model.sweeps import Sweep, parse_sweep
from phalanx.services.kubernetes.cached_backend import CachedKubeBackend
from phalanx.services.kubernetes.operations import KubeBackend
from phalanx.services.port import selector_text, selects
from support.memory_backend import MemoryBackend
from support.memory_kube_api import MemoryKubeApi

SWEEP: dict[str, Any] = {
    "apiVersion": "phalanx.dev/v1alpha1",
    "kind": "Sweep",
    "metadata": {"name": "s", "namespace": "ml"},
    "spec": {
        "parameters": [{"name": "lr", "type": "double", "min": 0.1, "max": 1.0}],
        "algorithm": {"name": "random"},
        "objective": {"metric": "loss", "direction": "minimize"},
        "maxTrials": 1,
        "trial": {"spec": {"type": "generic", "replicas": {"worker": {"template": {"command": ["x"]}}}}},
    },
}
# name, namespace, labels
OBJECTS = [
    ("a", "ml", {"run": "r1", "step": "train"}),
    ("b", "ml", {"run": "r1"}),
    ("c", "ml", {"run": "r2", "step": "train"}),
    ("d", "other", {"run": "r1", "step": "eval"}),
]
CASES = [
    ({"run": "r1"}, "ml", ["a", "b"]),
    ({"run": "r1"}, None, ["a", "b", "d"]),
    ({"step": None}, None, ["a", "c", "d"]),
    ({"run": "r1", "step": None}, None, ["a", "d"]),
    ({"run": "r3"}, None, []),
    ({}, "ml", ["a", "b", "c"]),
]


def sweep(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    doc = copy.deepcopy(SWEEP)
    doc["metadata"] |= {"name": name, "namespace": namespace, "labels": labels}
    return doc


def test_a_selector_asks_for_values_or_for_a_label_whatever_its_value() -> None:
    assert selects({"run": "r1", "step": None}, {"run": "r1", "step": "x"}) is True
    assert selects({"run": "r1", "step": None}, {"run": "r1"}) is False
    assert selects({"run": "r1"}, {"run": "r2"}) is False
    assert selects(None, {}) is True
    assert selector_text({"step": None, "run": "r1"}) == "run=r1,step"


@pytest.mark.parametrize(("labels", "namespace", "expected"), CASES)
def test_the_memory_backend_selects(labels: dict[str, str | None], namespace: str | None, expected: list[str]) -> None:
    backend = MemoryBackend()
    for name, ns, own in OBJECTS:
        backend.create(parse_sweep(sweep(name, ns, own)))
    assert sorted(s.metadata.name for s in backend.list(Sweep, namespace, labels=labels)) == expected


@pytest.mark.parametrize(("labels", "namespace", "expected"), CASES)
def test_the_kubernetes_backend_sends_the_selector_to_the_api_server(
    labels: dict[str, str | None], namespace: str | None, expected: list[str]
) -> None:
    api = MemoryKubeApi()
    for name, ns, own in OBJECTS:
        api.put(SWEEPS, sweep(name, ns, own))
    assert sorted(s.metadata.name for s in KubeBackend(api).list(Sweep, namespace, labels=labels)) == expected


@pytest.mark.parametrize(("labels", "namespace", "expected"), CASES)
def test_the_operator_s_backend_selects_its_cache_before_parsing(
    labels: dict[str, str | None], namespace: str | None, expected: list[str]
) -> None:
    api = MemoryKubeApi()
    informer = Informer(api, SWEEPS)
    for name, ns, own in OBJECTS:
        informer.observe(api.put(SWEEPS, sweep(name, ns, own)))
    parsed: list[str] = []

    class Counting(CachedKubeBackend):
        def _parse(self, kind: type, obj: dict[str, Any]) -> Any:
            parsed.append(obj["metadata"]["name"])
            return super()._parse(kind, obj)

    backend = Counting(api, {Sweep: informer}, dict)
    calls = len(api.calls)
    assert sorted(s.metadata.name for s in backend.list(Sweep, namespace, labels=labels)) == expected
    assert sorted(parsed) == expected, "only the objects selected are parsed"
    assert len(api.calls) == calls, "read from the cache: no request"
    backend.list(Sweep)  # every one parsed now; a later selection keeps those parses
    parsed.clear()
    backend.list(Sweep, namespace, labels=labels)
    assert parsed == []
