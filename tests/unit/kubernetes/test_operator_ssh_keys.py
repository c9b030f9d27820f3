"""The operator and a job's SSH keys (``spec.sshKeys``, every MPIJob), on the in-memory API: the key Secret is
created once, before the Pods that mount it, and a cluster that refuses it fails the job before any Pod exists."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.adapters.kubernetes.api import PODS, SECRETS, TRAININGJOBS, KubeApiError, Resource
from support.memory_kube_api import MemoryKubeApi
from unit.kubernetes.test_operator_loop import Harness

TEMPLATE = {"image": "example.org/mpi:1", "command": ["mpirun", "hostname"]}


def mpi_spec() -> dict[str, Any]:
    # Left to the cluster's scheduler, so that the operator admits the job and creates its Pods by itself.
    return {
        "type": "mpi",
        "replicas": {"launcher": {"template": TEMPLATE}, "worker": {"count": 2, "template": TEMPLATE}},
        "scheduling": {"schedulerName": "default-scheduler"},
        "sshKeys": {"mountPath": "/home/mpiuser/.ssh"},
    }


def test_the_key_secret_is_created_once_before_the_pods_that_mount_it() -> None:
    api = MemoryKubeApi()
    harness = Harness(api)
    created = harness.submit("pi", mpi_spec())
    harness.sync()
    harness.sync()

    writes = [call.plural for call in api.writes if call.verb == "create" and call.plural in ("secrets", "pods")]
    assert writes == ["secrets", "pods", "pods", "pods"]
    [secret] = api.of(SECRETS, "team-a")
    name = f"pi-ssh-{created['metadata']['uid'][:8]}"
    assert secret["metadata"]["name"] == name
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    for pod in api.of(PODS, "team-a"):
        [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "ssh-auth"]
        assert volume["secret"]["secretName"] == name
        assert {"name": "ssh-auth", "mountPath": "/home/mpiuser/.ssh", "readOnly": True} in pod["spec"]["containers"][
            0
        ]["volumeMounts"]


class NoSecrets(MemoryKubeApi):
    """An API server that refuses the operator Secrets, as with RBAC that lacks them."""

    def create(self, resource: Resource, body: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        if resource is SECRETS:
            raise KubeApiError(403, "Forbidden", 'secrets is forbidden: cannot create resource "secrets"')
        return super().create(resource, body, namespace)


def test_a_secret_the_operator_may_not_create_fails_the_job_before_any_pod() -> None:
    api = NoSecrets()
    harness = Harness(api)
    harness.submit("pi", mpi_spec())
    harness.sync()
    harness.sync()

    assert api.of(PODS, "team-a") == []
    status = api.get(TRAININGJOBS, "pi", "team-a")["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "SSHKeysUnavailable")
    assert status["message"].startswith("spec.sshKeys: cannot create the Secret pi-ssh-")
    assert "give phalanx-operator the right to create secrets" in status["message"]


def test_an_mpi_job_naming_no_keys_gets_the_secret_of_its_jobtype() -> None:
    api = MemoryKubeApi()
    harness = Harness(api)
    spec = mpi_spec()
    del spec["sshKeys"]  # the mpi JobType's sshKeys: {} stands in
    created = harness.submit("pi", spec)
    harness.sync()
    [secret] = api.of(SECRETS, "team-a")
    assert secret["metadata"]["name"] == f"pi-ssh-{created['metadata']['uid'][:8]}"
    for pod in api.of(PODS, "team-a"):
        assert {"name": "ssh-auth", "mountPath": "/root/.ssh", "readOnly": True} in pod["spec"]["containers"][0][
            "volumeMounts"
        ]


def test_a_job_of_a_type_without_ssh_keys_creates_no_secret() -> None:
    api = MemoryKubeApi()
    harness = Harness(api)
    spec = mpi_spec()
    del spec["sshKeys"]
    spec["type"] = "generic"  # no sshKeys in the generic JobType
    harness.submit("pi", spec)
    harness.sync()
    assert len(api.of(PODS, "team-a")) == 3
    assert api.of(SECRETS, "team-a") == []
    assert [call for call in api.calls if call.plural == "secrets"] == []
