"""A POST over the embedded store answers with the object as stored, without reading it back: the answer is the
same JSON a GET of the object gives right after (a Dataset's URL password masked in both), for each kind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from phalanx.adapters.store import SqliteStore
from phalanx.entrypoints.server.app import create_app
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SqliteBackend

API = "/apis/phalanx.dev/v1alpha1"
TEMPLATE = {"command": ["python", "train.py"], "args": ["--lr", "0.1"], "resources": {"cpu": 1, "memory": "64Mi"}}
JOB = {
    "metadata": {"name": "train", "labels": {"team": "vision"}},
    "spec": {"type": "generic", "replicas": {"worker": {"count": 2, "template": TEMPLATE}}},
}
DATASET = {"metadata": {"name": "images"}, "spec": {"source": {"url": "s3://reader:s3cret@bucket/images"}}}
QUEUE = {"metadata": {"name": "team-a"}, "spec": {"quota": {"gpu": 4}}}


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    layout = StateLayout(tmp_path)
    return TestClient(create_app(SqliteBackend(SqliteStore(tmp_path / "state.db"), layout)))


@pytest.mark.parametrize(
    ("collection", "document"),
    [
        (f"{API}/namespaces/default/trainingjobs", JOB),
        (f"{API}/namespaces/default/datasets", DATASET),
        (f"{API}/queues", QUEUE),
    ],
    ids=["trainingjob", "dataset", "queue"],
)
def test_the_answer_to_a_post_is_what_a_get_reads_after_it(
    client: TestClient, collection: str, document: dict[str, Any]
) -> None:
    created = client.post(collection, json=document)
    assert created.status_code == 201, created.json()
    read = client.get(f"{collection}/{document['metadata']['name']}")
    assert read.status_code == 200, read.json()
    assert created.json() == read.json()
    assert created.json()["metadata"]["uid"] and created.json()["metadata"]["resourceVersion"]
    assert "s3cret" not in created.text


def test_the_job_answered_carries_the_defaults_the_door_applied(client: TestClient) -> None:
    created = client.post(f"{API}/namespaces/default/trainingjobs", json=JOB).json()
    assert created["spec"]["scheduling"]["queue"] == "default"
    assert created["spec"]["replicas"]["worker"]["template"]["args"] == ["--lr", "0.1"]
    assert created["status"]["phase"] == "Pending"
