"""A 404 in a namespace of many objects names the first 20 from one page, without reading the namespace whole."""

from __future__ import annotations

import builtins
from typing import Any

from fastapi.testclient import TestClient
from test_rest_tenancy_lists import job_document

from phalanx.entrypoints.server.app import create_app
from phalanx.model.jobs import TrainingJob
from support.memory_backend import MemoryBackend


class PagesOnly(MemoryBackend):
    """A backend that fails a whole list of jobs asked by the app: only pages may be read (which memory serves
    from its own whole list, as a store serves a page from its table)."""

    paging = False

    def list(self, kind: Any, namespace: str | None = None, **kwargs: Any) -> builtins.list[Any]:
        assert self.paging or kind is not TrainingJob, "a 404 read every job of the namespace"
        return super().list(kind, namespace, **kwargs)

    def list_page(self, *args: Any, **kwargs: Any) -> Any:
        self.paging = True
        try:
            return super().list_page(*args, **kwargs)
        finally:
            self.paging = False


def test_a_missing_job_names_the_first_20_of_its_namespace_from_a_page() -> None:
    backend = PagesOnly()
    for index in range(50):
        backend.create(TrainingJob.model_validate(job_document(f"job-{index:02d}", "ml")))
    answer = TestClient(create_app(backend)).get("/apis/phalanx.dev/v1alpha1/namespaces/ml/trainingjobs/nope")
    assert answer.status_code == 404, answer.text
    first = ", ".join(f"job-{index:02d}" for index in range(20))
    assert answer.json()["message"] == f"trainingjob ml/nope not found; trainingjobs in ml: {first}"
