"""A job submitted together with its JobType is never failed for a JobType that was being created.

The embedded controller reads the JobTypes, then the jobs, in two reads of the store. ``phalanx run`` of a file
holding a JobType and a job of it (``submit`` creates the JobType first, then the job) can land between them:
the pass then sees the job and not its type. Found running tests/frameworks/test_rendering_parity.py, whose
``phalanx run`` once ended in ``job probe Failed in 0.0s: job type 'parity-probe' does not exist``. The
interleaving is made here on the real SQLite store, by submitting right after the controller's JobType read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phalanx.adapters.store.sqlite import SqliteStore
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import builtin_jobtypes, parse_jobtype
from phalanx.model.validation import validate_job
from phalanx.services.embedded.controller import JobController
from phalanx.services.embedded.layout import StateLayout

JOBTYPE = {
    "apiVersion": "phalanx.dev/v1alpha1",
    "kind": "JobType",
    "metadata": {"name": "own"},
    "spec": {"roles": {"worker": {"minCount": 1, "defaultCount": 1}}, "port": 4000},
}
JOB = {
    "apiVersion": "phalanx.dev/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "racer"},
    "spec": {"type": "own", "replicas": {"worker": {"template": {"command": ["true"]}}}},
}


def test_a_job_created_with_its_jobtype_during_a_pass_waits_for_the_next_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = StateLayout(tmp_path / "state")
    layout.ensure()
    jobtype = parse_jobtype(JOBTYPE)
    job = validate_job(JOB, {**builtin_jobtypes(), "own": jobtype})
    with SqliteStore(layout.database) as store:
        read = store.list
        submitted: list[bool] = []

        def list_then_submit(cls: type[Any], *args: Any, **kwargs: Any) -> list[Any]:
            found = read(cls, *args, **kwargs)
            if cls is JobType and not submitted:  # the submit lands right after the pass read the JobTypes
                submitted.append(True)
                store.create(jobtype)
                store.create(job)
            return found

        monkeypatch.setattr(store, "list", list_then_submit)
        JobController(store, layout).sync()
        assert submitted, "the controller did not read the JobTypes"
        after_first = store.get(TrainingJob, "default", "racer")
        assert after_first.status.phase != Phase.FAILED, after_first.status.message

        JobController(store, layout).sync()
        assert store.get(TrainingJob, "default", "racer").status.phase == Phase.QUEUED
