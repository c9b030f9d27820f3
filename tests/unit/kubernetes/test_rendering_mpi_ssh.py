"""An MPI job's Pods on Kubernetes (docs/kubeflow.md, MPIJob): the SSH key pair the launcher's mpirun logs in
to the workers with, and the Hydra hostfile of Intel MPI and MPICH with the DNS search its proxies need."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from phalanx.adapters.kubernetes.rendering import (
    render_hostfile_configmap,
    render_pod,
    render_ssh_secret,
    ssh_secret_name,
)
from phalanx.adapters.kubernetes.sshkeys import generate_ssh_key_pair
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.validation import validate_job

UID = "0b5e6f3c-1111-2222-3333-444455556666"
IMAGE = {"image": "example.org/mpi:1", "command": ["mpirun", "hostname"]}


def mpi_job(jobtype: JobType | None = None, **spec: Any) -> tuple[TrainingJob, JobType]:
    jobtypes = builtin_jobtypes()
    if jobtype is not None:
        jobtypes[jobtype.metadata.name] = jobtype
    kind = jobtype.metadata.name if jobtype is not None else "mpi"
    raw = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "pi", "namespace": "team-a"},
        "spec": {
            "type": kind,
            "replicas": {"launcher": {"template": IMAGE}, "worker": {"count": 2, "template": IMAGE}},
            **spec,
        },
    }
    job = validate_job(raw, jobtypes)
    job = job.model_copy(update={"metadata": job.metadata.model_copy(update={"uid": UID})})
    return job, jobtypes[kind]


def hydra() -> JobType:
    document = builtin_jobtypes()["mpi"].model_dump(mode="json", by_alias=True)
    document["metadata"] = {"name": "mpi-mpich"}
    document["spec"]["hostfileFormat"] = "Hydra"
    document["spec"]["slotsPerHost"] = 2
    return JobType.model_validate(document)


@pytest.mark.parametrize(("path", "mode"), [("/root/.ssh", 0o600), ("/home/mpiuser/.ssh", None)])
def test_every_pod_mounts_the_jobs_ssh_secret_at_its_path(path: str, mode: int | None) -> None:
    job, jobtype = mpi_job(sshKeys={"mountPath": path})
    for role, index in (("launcher", 0), ("worker", 0), ("worker", 1)):
        pod = render_pod(job, jobtype, role, index, 0)
        [container] = pod["spec"]["containers"]
        assert {"name": "ssh-auth", "mountPath": path, "readOnly": True} in container["volumeMounts"]
        [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "ssh-auth"]
        assert volume["secret"]["secretName"] == "pi-ssh-0b5e6f3c"
        assert volume["secret"].get("defaultMode") == mode
        files = {item["path"]: item["key"] for item in volume["secret"]["items"]}
        assert files == {"id_rsa": "ssh-privatekey", "id_rsa.pub": "ssh-publickey", "authorized_keys": "ssh-publickey"}


def test_an_mpi_job_that_names_no_keys_gets_the_jobtypes() -> None:
    # Once, a native mpi job's mpirun had no key to log in to the workers with: only Kubeflow MPIJobs had one.
    job, jobtype = mpi_job()
    assert job.spec.ssh_keys is None and jobtype.spec.ssh_keys is not None
    for role, index in (("launcher", 0), ("worker", 1)):
        pod = render_pod(job, jobtype, role, index, 0)
        [container] = pod["spec"]["containers"]
        assert {"name": "ssh-auth", "mountPath": "/root/.ssh", "readOnly": True} in container["volumeMounts"]
        [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "ssh-auth"]
        assert volume["secret"]["secretName"] == "pi-ssh-0b5e6f3c"


def test_a_job_of_a_type_without_ssh_keys_mounts_none() -> None:
    document = builtin_jobtypes()["mpi"].model_dump(mode="json", by_alias=True, exclude_none=True)
    document["metadata"] = {"name": "mpi-no-ssh"}
    del document["spec"]["sshKeys"]
    job, jobtype = mpi_job(JobType.model_validate(document))
    pod = render_pod(job, jobtype, "worker", 0, 0)
    assert "ssh-auth" not in [v["name"] for v in pod["spec"]["volumes"]]
    assert "dnsConfig" not in pod["spec"]


def test_the_ssh_secret_holds_a_key_pair_owned_by_the_job() -> None:
    job, _ = mpi_job(sshKeys={})
    keys = generate_ssh_key_pair()
    secret = render_ssh_secret(job, keys.private_pem, keys.public_line)
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert secret["metadata"]["name"] == ssh_secret_name(job) == "pi-ssh-0b5e6f3c"
    assert [(o["kind"], o["uid"]) for o in secret["metadata"]["ownerReferences"]] == [("TrainingJob", UID)]
    private = serialization.load_pem_private_key(secret["stringData"]["ssh-privatekey"].encode(), password=None)
    public = serialization.load_ssh_public_key(secret["stringData"]["ssh-publickey"].encode())
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert private.public_key().public_numbers() == public.public_numbers()  # type: ignore[union-attr]
    assert secret["stringData"]["ssh-publickey"].startswith("ecdsa-sha2-nistp521 ")
    assert generate_ssh_key_pair().private_pem != keys.private_pem, "a new pair each time"


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="OpenSSH's ssh-keygen is not installed")
def test_openssh_reads_the_private_key_as_mounted_and_derives_the_public_key(tmp_path: Path) -> None:
    """The id_rsa file as a Pod sees it is a key OpenSSH loads (an ECDSA key, whatever the file's name)."""
    keys = generate_ssh_key_pair()
    private = tmp_path / "id_rsa"
    private.write_text(keys.private_pem)
    private.chmod(0o600)
    derived = subprocess.run(["ssh-keygen", "-y", "-f", str(private)], capture_output=True, text=True, check=True)
    assert derived.stdout.split()[:2] == keys.public_line.split()[:2]


def test_a_hydra_jobs_hostfile_and_dns_search() -> None:
    job, jobtype = mpi_job(hydra())
    configmap = render_hostfile_configmap(job, jobtype)
    assert configmap is not None
    assert configmap["data"]["hostfile"] == "pi-worker-0.pi.team-a.svc:2\npi-worker-1.pi.team-a.svc:2\n"
    for role, index in (("launcher", 0), ("worker", 1)):
        pod = render_pod(job, jobtype, role, index, 0)
        # Hydra's proxies call the launcher back by its host name, pi-launcher-0: it must resolve on the workers.
        assert pod["spec"]["dnsConfig"] == {"searches": ["pi.team-a.svc.cluster.local"]}
        assert pod["spec"]["hostname"] == f"pi-{role}-{index}"
