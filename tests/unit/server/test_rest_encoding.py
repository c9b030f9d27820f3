"""The answers' JSON, written by pydantic in one step, is exactly ``to_dict()`` of each object, for every kind."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_rest_tenancy_lists import SAMPLES

from phalanx.entrypoints.server.encoding import list_response, object_json
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.queues import Queue
from support.memory_backend import MemoryBackend


def stored_objects() -> list[Any]:
    backend = MemoryBackend()
    for model, sample in SAMPLES.items():
        backend.create(model.model_validate(sample("one", "ml")))
    backend.create(Queue.model_validate({"metadata": {"name": "gpus"}, "spec": {"quota": {"gpu": 4}}}))
    objects: list[Any] = [obj for model in SAMPLES for obj in backend.list(model)]
    job = objects[0]
    assert isinstance(job, TrainingJob)
    job.status.phase = "Running"  # a status with values, a timestamp, a nested map
    job.status.placements = {"worker-0": {"node": "n1", "gpus": [0, 1], "cpus": [0, 1, 2, 3]}}  # type: ignore[dict-item]
    return [*objects, *backend.list(Queue), *builtin_jobtypes().values()]


OBJECTS = stored_objects()


@pytest.mark.parametrize("obj", OBJECTS, ids=[f"{type(o).__name__}-{o.metadata.name}" for o in OBJECTS])
def test_an_objects_json_is_its_wire_dict(obj: Any) -> None:
    assert json.loads(object_json(obj)) == obj.to_dict()


def test_a_list_answer_is_its_metadata_and_items() -> None:
    jobtypes = list(builtin_jobtypes().values())
    response = list_response("JobType", {"continue": "abc", "remainingItemCount": 3}, jobtypes)
    assert json.loads(response.body) == {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "JobTypeList",
        "metadata": {"continue": "abc", "remainingItemCount": 3},
        "items": [jobtype.to_dict() for jobtype in jobtypes],
    }
    assert json.loads(list_response("Queue", {}, []).body)["items"] == []
    assert all(isinstance(jobtype, JobType) for jobtype in jobtypes)
