"""Submitting over a taken job name through the SDK on a real SQLite store: nothing changes before every name is
checked, and the message says the command that works in the job's namespace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phalanx import Client, JobExistsError
from phalanx.model.base import validated_copy
from phalanx.model.jobs import Phase, TrainingJob


def job(name: str) -> dict[str, Any]:
    template = {"command": ["python", "-c", "pass"], "resources": {"cpu": 1, "memory": "64Mi"}}
    return {"kind": "TrainingJob", "metadata": {"name": name}, "spec": {"replicas": {"worker": {"template": template}}}}


def finish(client: Client, name: str, phase: Phase) -> None:
    stored = client.store.get(TrainingJob, client.namespace, name)
    client.store.update_status(validated_copy(stored, status=validated_copy(stored.status, phase=phase)))


def test_a_refused_replacement_removes_no_finished_job(tmp_path: Path) -> None:
    client = Client(state_dir=tmp_path / "state")
    client.submit([job("done"), job("busy")])
    finish(client, "done", Phase.SUCCEEDED)
    finish(client, "busy", Phase.RUNNING)
    with pytest.raises(JobExistsError, match=r"job default/busy already exists \(it is Running\)"):
        client.submit([job("done"), job("busy")], replace_finished=True)
    # The finished job was not removed for a submission that created nothing.
    assert client.get("done").status.phase == Phase.SUCCEEDED


def test_a_job_in_the_way_outside_default_names_its_namespace(tmp_path: Path) -> None:
    client = Client(state_dir=tmp_path / "state", namespace="team-a")
    client.submit([job("train")])
    with pytest.raises(JobExistsError) as refused:
        client.submit([job("train")])
    # `phalanx delete job train` alone looks in default and finds nothing there.
    assert "(`phalanx delete job train -n team-a`; client.delete('train') in Python)" in str(refused.value)
