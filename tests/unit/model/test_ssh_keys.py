"""``spec.sshKeys`` (docs/jobs.md): where a job's SSH key pair is mounted, and what is refused with its path."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.model.errors import SpecError
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.validation import validate_job

JOBTYPES = builtin_jobtypes()


def job(ssh: Any, mounts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    worker: dict[str, Any] = {"image": "example.org/mpi:1", "command": ["sleep", "infinity"]}
    if mounts:
        worker["volumes"] = [{"name": "keys", "emptyDir": {}}]
        worker["volumeMounts"] = mounts
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "pi"},
        "spec": {
            "type": "mpi",
            "replicas": {"launcher": {"template": {"command": ["mpirun", "hostname"]}}, "worker": {"template": worker}},
            "sshKeys": ssh,
        },
    }


def refusal(document: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        validate_job(document, JOBTYPES)
    return {error.path: error.message for error in caught.value.errors}


def test_the_keys_go_to_roots_ssh_directory_unless_told() -> None:
    assert validate_job(job({}), JOBTYPES).spec.ssh_keys.mount_path == "/root/.ssh"  # type: ignore[union-attr]
    told = validate_job(job({"mountPath": "/home/mpiuser/.ssh"}), JOBTYPES)
    assert told.spec.ssh_keys is not None and told.spec.ssh_keys.mount_path == "/home/mpiuser/.ssh"


@pytest.mark.parametrize(
    ("ssh", "path", "words"),
    [
        ({"mountPath": ".ssh"}, "spec.sshKeys.mountPath", "must be an absolute path"),
        ({"mountPath": "/etc/phalanx/ssh"}, "spec.sshKeys.mountPath", "where Phalanx mounts its own volumes"),
        ({"mountPath": "/root/.ssh", "keyType": "rsa"}, "spec.sshKeys.keyType", ""),
    ],
)
def test_a_bad_ssh_keys_field_is_refused_at_its_path(ssh: dict[str, Any], path: str, words: str) -> None:
    found = refusal(job(ssh))
    assert path in found, found
    assert words in found[path]


def test_a_volume_mounted_where_the_keys_go_is_refused_at_its_mount() -> None:
    found = refusal(job({}, mounts=[{"name": "keys", "mountPath": "/root/.ssh/"}]))
    path = "spec.replicas.worker.template.volumeMounts[0].mountPath"
    assert path in found, found
    assert "where the job's SSH keys are mounted" in found[path]
