"""docs/server.md's table of metrics is what /metrics serves: every name, its type and its labels, no more."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from phalanx.entrypoints.server.app import create_app
from phalanx.model.jobs import TrainingJob
from phalanx.model.nodes import Node
from phalanx.services.metrics import SchedulerMetrics
from support.memory_backend import MemoryBackend

JOB = {
    "kind": "TrainingJob",
    "metadata": {"name": "a"},
    "spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": {"command": ["true"]}}}},
}
DOC = Path(__file__).resolve().parents[3] / "docs" / "server.md"


def documented() -> dict[str, tuple[str, set[str]]]:
    section = DOC.read_text().split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(phalanx_\w+)` \| (\w+) \| ([^|]*) \|", section, re.MULTILINE)
    assert rows, "no table of metrics under ## Metrics"
    return {name: (kind, set(re.findall(r"`(\w+)`", labels.split("(")[0]))) for name, kind, labels in rows}


def served() -> dict[str, tuple[str, set[str]]]:
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry)
    backend = MemoryBackend()
    backend.objects[("Node", "", "n1")] = Node.model_validate(
        {"metadata": {"name": "n1"}, "status": {"gpus": [{"index": 0, "model": "H100"}], "source": "simulated"}}
    )
    backend.caches["n1"] = []
    client = TestClient(create_app(backend, registry=registry))  # type: ignore[arg-type]
    # A job, a request, an admission, a preemption and a cycle: each family has a series to show its labels.
    created = client.post("/apis/phalanx.dev/v1alpha1/namespaces/ml/trainingjobs", json=JOB)
    assert created.status_code == 201, created.text
    job = TrainingJob.model_validate(created.json())
    metrics.admitted(job, datetime.now(UTC))
    metrics.preempted(job)
    metrics.cycle_took(0.01)
    found: dict[str, tuple[str, set[str]]] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        if not family.name.startswith("phalanx_") or family.name.endswith("_created"):
            continue  # _created: when a series began, prometheus_client's own
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = {label for sample in family.samples for label in sample.labels if label != "le"}
        found[name] = (family.type, labels)
    return found


def test_the_table_lists_every_metric_served_with_its_type() -> None:
    docs, live = documented(), served()
    assert set(docs) == set(live)
    assert {name: kind for name, (kind, _) in docs.items()} == {name: kind for name, (kind, _) in live.items()}


def test_the_labels_of_the_series_served_are_those_documented() -> None:
    docs, live = documented(), served()
    for name, (_, labels) in live.items():
        if labels:  # a family without samples here (no jobs, no nodes) shows no labels to compare
            assert labels == docs[name][1], name
