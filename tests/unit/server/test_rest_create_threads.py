"""``create_app(create_threads=N)``: POSTs run in threads of their own, with the same answers as in the shared pool."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient
from test_rest_tenancy_lists import job_document

from phalanx.entrypoints.server.app import create_app
from phalanx.model.jobs import TrainingJob
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.validation import validate_job
from support.memory_backend import MemoryBackend

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/ml/trainingjobs"


class ThreadNoting(MemoryBackend):
    """Notes the thread each create ran in."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []

    def create(self, obj: Any) -> None:
        self.threads.append(threading.current_thread().name)
        return super().create(obj)


@pytest.mark.parametrize("create_threads", [None, 1], ids=["shared-pool", "own-thread"])
def test_a_post_is_validated_defaulted_and_stored_either_way(create_threads: int | None) -> None:
    backend = ThreadNoting()
    client = TestClient(create_app(backend, create_threads=create_threads))

    answer = client.post(JOBS, json=job_document("a", "ml"))

    assert answer.status_code == 201, answer.text
    stored = backend.get(TrainingJob, "ml", "a")
    assert stored is not None
    # Defaulted as the door defaults it: the same spec validate_job makes of the document.
    assert stored.spec == validate_job(job_document("a", "ml"), builtin_jobtypes()).spec
    assert answer.json()["metadata"]["name"] == "a"
    assert backend.threads[0].startswith("rest-create") == (create_threads is not None)


def test_a_refusal_from_a_create_thread_names_the_field_and_stores_nothing() -> None:
    backend = ThreadNoting()
    client = TestClient(create_app(backend, create_threads=1))
    document = job_document("b", "ml")
    document["spec"]["type"] = "no-such-type"

    answer = client.post(JOBS, json=document)

    assert answer.status_code == 422, answer.text
    assert answer.json()["details"]["causes"][0]["field"] == "spec.type"
    assert backend.get(TrainingJob, "ml", "b") is None
    assert backend.threads == []
