"""docs/server.md's REST examples do what the page says: its curl bodies posted, its refusal printed as shown."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fastapi.testclient import TestClient

from phalanx.entrypoints.server.app import create_app
from support.memory_backend import MemoryBackend

DOC = Path(__file__).resolve().parents[3] / "docs" / "server.md"
API = "/apis/phalanx.dev/v1alpha1"


def test_the_curl_examples_create_a_job_and_show_the_refusal_as_printed() -> None:
    text = DOC.read_text()
    bodies = [json.loads(body) for body in re.findall(r"-d '(\{.*?\})'", text, re.DOTALL)]
    assert [body["metadata"]["name"] for body in bodies] == ["hello", "broken"]
    client = TestClient(create_app(MemoryBackend()))
    created = client.post(f"{API}/namespaces/default/trainingjobs", json=bodies[0])
    assert created.status_code == 201, created.json()
    listed = client.get(f"{API}/namespaces/default/trainingjobs", params={"labelSelector": "team=ml", "limit": 2})
    assert [item["metadata"]["name"] for item in listed.json()["items"]] == ["hello"]

    refused = client.post(f"{API}/namespaces/default/trainingjobs", json=bodies[1])
    shown = json.loads(re.findall(r"```json\n(.*?)```", text, re.DOTALL)[0])
    assert refused.status_code == shown["code"] == 422
    assert refused.json() == shown
