"""``labelSelector``: the equality and existence forms the port selects on; every other form refused by name."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from phalanx.entrypoints.server.app import create_app
from phalanx.entrypoints.server.selectors import SelectorError, parse_label_selector
from support.memory_backend import MemoryBackend

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/default/trainingjobs"


@pytest.mark.parametrize(
    ("text", "selector"),
    [
        ("", {}),
        ("team=ml", {"team": "ml"}),
        ("team==ml", {"team": "ml"}),
        ("team=ml,tier", {"team": "ml", "tier": None}),
        (" team = ml , phalanx.dev/sweep=s1 ", {"team": "ml", "phalanx.dev/sweep": "s1"}),
        ("team=", {"team": ""}),
    ],
    ids=["empty", "equals", "double-equals", "and-exists", "spaces-and-prefix", "empty-value"],
)
def test_the_supported_forms(text: str, selector: dict[str, str | None]) -> None:
    assert parse_label_selector(text) == selector


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("team!=ml", "'!='"),
        ("team in (ml,cv)", "'in'"),
        ("team notin (ml)", "'notin'"),
        ("!team", "absent"),
        ("team=(ml)", "a set of values"),
        ("team=ml,,tier", "empty requirement"),
        ("team=ml,team=cv", "'team' twice"),
        ("bad key=ml", "not a label key"),
        ("team=has space", "not a label value"),
        (f"team={'v' * 64}", "not a label value"),
        ("x" * 5000, "past 4096"),
    ],
    ids=["not-equals", "in", "notin", "absent", "set", "empty", "twice", "bad-key", "bad-value", "long-value", "long"],
)
def test_other_forms_are_refused_by_name(text: str, words: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_label_selector(text)
    assert words in str(caught.value)
    assert "use key=value or key" in str(caught.value) or "twice" in words


def job(name: str, labels: dict[str, str]) -> dict[str, Any]:
    template = {"command": ["python", "train.py"], "resources": {"cpu": 1, "memory": "64Mi"}}
    return {
        "kind": "TrainingJob",
        "metadata": {"name": name, "labels": labels},
        "spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}},
    }


@pytest.fixture
def client() -> TestClient:
    client = TestClient(create_app(MemoryBackend()))
    for name, labels in (("a", {"team": "ml", "tier": "gold"}), ("b", {"team": "ml"}), ("c", {"team": "cv"})):
        assert client.post(JOBS, json=job(name, labels)).status_code == 201
    return client


@pytest.mark.parametrize(
    ("selector", "names"),
    [("team=ml", ["a", "b"]), ("team=ml,tier", ["a"]), ("tier=silver", []), ("", ["a", "b", "c"])],
    ids=["equals", "and-exists", "none", "all"],
)
def test_a_list_selects_by_labels(client: TestClient, selector: str, names: list[str]) -> None:
    response = client.get(JOBS, params={"labelSelector": selector})
    assert [item["metadata"]["name"] for item in response.json()["items"]] == names


def test_a_refused_selector_is_a_400_status(client: TestClient) -> None:
    response = client.get(JOBS, params={"labelSelector": "team!=ml"})
    body = response.json()
    assert (response.status_code, body["kind"], body["reason"]) == (400, "Status", "BadRequest")
    assert "labelSelector 'team!=ml' uses '!='" in body["message"]
