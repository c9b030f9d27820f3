"""Kubeflow jobs (v1 kinds, MPIJob, a Trainer v2 TrainJob) through the real CLI on the embedded runtime: accepted
as written, run to Succeeded.

The images of Kubeflow's examples cannot run here (the embedded runtime runs local processes), so each job's
command is a stand-in that uses what the job's JobType gives it: the PyTorchJob's replicas rendezvous over TCP
at MASTER_ADDR:MASTER_PORT as torch.distributed's env:// does (ddp_standin.py); the MPIJob's launcher checks the
hostfile mpirun would read instead of running mpirun (Open MPI is not in the project's environment), while its
workers run ``sleep infinity`` and are stopped when the launcher succeeds, as mpi-operator's workers are.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from conftest import PROGRAM, Runtime, wait_until
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.replicas import Replica

HERE = Path(__file__).parent
STANDIN = str(HERE / "ddp_standin.py")
SMALL = {"limits": {"cpu": "100m", "memory": "64Mi"}}


def pytorchjob(name: str, env_dir: Path) -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "example.org/ddp:1.0",  # not used by the embedded runtime (an event says so)
            "command": [sys.executable, STANDIN],
            "args": [str(env_dir)],
            "env": [{"name": "LEARNING_RATE", "value": "0.5"}],
            "resources": SMALL,
        }
        return {"replicas": count, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"backoffLimit": 1, "cleanPodPolicy": "Running"},
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(2)},
        },
    }


def replicas_left(runtime: Runtime, job: str) -> list[Replica]:
    with runtime.client() as client:
        return [r for r in client.store.list(Replica) if r.spec.job_name == job]


def test_a_pytorchjob_runs_to_succeeded_through_phalanx_run(runtime: Runtime, tmp_path: Path) -> None:
    envs = tmp_path / "env"
    path = runtime.write_job("ddp", pytorchjob("ddp", envs))

    ran = runtime.cli("run", str(path), timeout=180)

    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "trainingjob/ddp created" in ran.stdout
    seen = {int(p.stem): json.loads(p.read_text()) for p in envs.glob("*.json")}
    assert sorted(seen) == [0, 1, 2]
    assert {env["WORLD_SIZE"] for env in seen.values()} == {"3"}
    assert {env["LEARNING_RATE"] for env in seen.values()} == {"0.5"}
    assert {env["PYTHONUNBUFFERED"] for env in seen.values()} == {"1"}
    assert len({(env["MASTER_ADDR"], env["MASTER_PORT"]) for env in seen.values()}) == 1
    logs = runtime.cli("logs", "ddp", "--replica", "master-0", check=True).stdout
    assert "rank 0 heard ranks [1, 2] of world size 3" in logs
    shown = yaml.safe_load(runtime.cli("get", "job", "ddp", "-o", "yaml", check=True).stdout)
    assert shown["metadata"]["annotations"]["phalanx.dev/converted-from"] == "PyTorchJob.kubeflow.org/v1"
    assert shown["spec"]["runPolicy"]["restartPolicy"] == "OnFailure"
    assert shown["spec"]["runPolicy"]["backoffLimit"] == 1


def test_an_mpijob_launcher_finds_every_workers_slots_and_its_exit_ends_the_job(
    runtime: Runtime, tmp_path: Path
) -> None:
    hostfile = tmp_path / "hostfile"
    launcher = {
        "name": "launcher",
        "image": "example.org/mpi:5.0",
        # In place of mpirun: check the hostfile it would read (2 workers x 2 slots, all on this machine).
        "command": [sys.executable, PROGRAM],
        "args": ["--hostfile-out", str(hostfile), "--expect-slots", "4"],
        "resources": SMALL,
    }
    worker = {"name": "worker", "image": "example.org/mpi:5.0", "command": ["sleep", "infinity"], "resources": SMALL}
    document = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "pi"},
        "spec": {
            "slotsPerWorker": 2,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [launcher]}}},
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [worker]}}},
            },
        },
    }
    path = runtime.write_job("pi", document)

    ran = runtime.cli("run", str(path), timeout=180)

    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "jobtype/mpi-slots-2 created" in ran.stdout
    assert hostfile.read_text() == "127.0.0.1 slots=4\n"
    with runtime.client() as client:
        job = client.get("pi")
    assert job.status.phase == Phase.SUCCEEDED
    assert job.spec.type == "mpi-slots-2"
    # The workers never end by themselves: Phalanx stops them once the launcher has succeeded.
    wait_until(lambda: replicas_left(runtime, "pi") == [], message="the MPI workers to be stopped")


def test_an_mpich_mpijob_launcher_finds_hydras_hostfile_and_the_ssh_keys_are_not_made_here(
    runtime: Runtime, tmp_path: Path
) -> None:
    """mpiImplementation MPICH: Hydra's host:slots hostfile at $HYDRA_HOST_FILE; sshAuthMountPath accepted, said."""
    hostfile, envs = tmp_path / "hostfile", tmp_path / "env"
    launcher = {
        "name": "launcher",
        "image": "example.org/mpich:4.2",
        # In place of mpiexec: check the hostfile Hydra would read, and keep the environment it would start with.
        "command": [sys.executable, PROGRAM],
        "args": ["--hostfile-var", "HYDRA_HOST_FILE", "--hostfile-out", str(hostfile), "--expect-slots", "6"],
        "resources": SMALL,
    }
    launcher["args"] += ["--env-dir", str(envs)]
    worker = {"name": "worker", "image": "example.org/mpich:4.2", "command": ["sleep", "infinity"], "resources": SMALL}
    document = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "pi-mpich"},
        "spec": {
            "slotsPerWorker": 3,
            "mpiImplementation": "MPICH",
            "sshAuthMountPath": "/home/mpiuser/.ssh",
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [launcher]}}},
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [worker]}}},
            },
        },
    }
    path = runtime.write_job("pi-mpich", document)

    ran = runtime.cli("run", str(path), timeout=180)

    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "jobtype/mpi-mpich-slots-3 created" in ran.stdout
    assert hostfile.read_text() == "127.0.0.1:6\n"  # both workers on this machine: one line, their slots summed
    env = json.loads((envs / "launcher-0.json").read_text())
    assert env["HYDRA_HOST_FILE"] == env["PHALANX_HOSTFILE"]
    assert env["HYDRA_LAUNCH_EXTRA_ARGS"] == "-o ConnectionAttempts=10"
    assert "OMPI_MCA_orte_default_hostfile" not in env
    with runtime.client() as client:
        job = client.get("pi-mpich")
    assert job.status.phase == Phase.SUCCEEDED
    assert job.spec.ssh_keys is not None and job.spec.ssh_keys.mount_path == "/home/mpiuser/.ssh"
    described = runtime.cli("describe", "job", "pi-mpich", check=True).stdout
    assert "SSHKeysNotMade" in described and "nothing is mounted at /home/mpiuser/.ssh" in described, described


def test_convert_prints_what_submit_accepts_and_refuses_with_the_upstream_path(
    runtime: Runtime, tmp_path: Path
) -> None:
    path = runtime.write_job("ddp", pytorchjob("ddp", tmp_path / "env"))
    converted = runtime.cli("convert", str(path), check=True).stdout
    (job,) = list(yaml.safe_load_all(converted))
    assert (job["kind"], job["spec"]["type"]) == ("TrainingJob", "pytorch")
    again = runtime.write_job("converted", job)
    dry = runtime.cli("submit", "--dry-run", str(again), check=True).stdout
    direct = runtime.cli("submit", "--dry-run", str(path), check=True).stdout
    assert yaml.safe_load(dry)["spec"] == yaml.safe_load(direct)["spec"]

    bad = pytorchjob("ddp", tmp_path / "env")
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "data", "mountPath": "/data"}
    ]
    bad_path = runtime.write_job("bad", bad)
    for verb in (["convert"], ["submit", "--dry-run"], ["run"]):
        refused = runtime.cli(*verb, str(bad_path))
        assert refused.returncode == 2, (verb, refused.stdout, refused.stderr)
        assert "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].volumeMounts" in refused.stderr
        assert "Traceback" not in refused.stderr
    with runtime.client() as client:  # nothing was created
        assert client.store.list(TrainingJob) == []
        assert client.store.list(Replica) == []


def test_a_trainjob_on_the_shipped_torch_distributed_runtime_runs_to_succeeded(
    runtime: Runtime, tmp_path: Path
) -> None:
    envs = tmp_path / "env"
    document = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},  # not in the file: the one Phalanx ships
            "trainer": {
                "command": [sys.executable, STANDIN],
                "args": [str(envs)],
                "numNodes": 2,
                "resourcesPerNode": SMALL,
            },
        },
    }
    path = runtime.write_job("tj", document)

    ran = runtime.cli("run", str(path), timeout=180)

    assert ran.returncode == 0, ran.stdout + ran.stderr
    seen = {int(p.stem): json.loads(p.read_text()) for p in envs.glob("*.json")}
    assert sorted(seen) == [0, 1]
    assert {env["WORLD_SIZE"] for env in seen.values()} == {"2"}
    assert {env["PET_NPROC_PER_NODE"] for env in seen.values()} == {"auto"}  # the runtime's numProcPerNode
    logs = runtime.cli("logs", "tj", "--replica", "worker-0", check=True).stdout
    assert "rank 0 heard ranks [1] of world size 2" in logs


def mpi_runtime(name: str) -> dict[str, Any]:
    """A TrainingRuntime in the shape of upstream's deepspeed-distributed, whose nodes run a local stand-in for
    their SSH server (``sleep infinity``: the launcher's stand-in for mpirun logs in to none of them)."""

    def replicated(job: str, command: list[str] | None = None, **fields: Any) -> dict[str, Any]:
        container: dict[str, Any] = {"name": "node", "image": "example.org/deepspeed:0.16"}
        if command is not None:
            container["command"] = command
        return {"name": job, **fields, "template": {"spec": {"template": {"spec": {"containers": [container]}}}}}

    launcher = replicated("launcher", dependsOn=[{"name": "node", "status": "Ready"}])
    launcher["template"]["metadata"] = {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1, "mpi": {"numProcPerNode": 2, "runLauncherAsNode": True}},
            "template": {
                "spec": {
                    "network": {"publishNotReadyAddresses": True},
                    "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
                    "replicatedJobs": [replicated("node", ["sleep", "infinity"]), launcher],
                }
            },
        },
    }


def test_a_trainjob_on_an_mpi_runtime_runs_its_launcher_as_a_node_and_ends_with_it(
    runtime: Runtime, tmp_path: Path
) -> None:
    hostfile, envs = tmp_path / "hostfile", tmp_path / "env"
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "ds"},
        "spec": {
            "runtimeRef": {"name": "local-mpi", "kind": "TrainingRuntime"},
            "trainer": {
                # In place of mpirun: check the hostfile it would read (the launcher and 2 nodes x 2 slots).
                "command": [sys.executable, PROGRAM],
                "args": ["--hostfile-out", str(hostfile), "--expect-slots", "6", "--env-dir", str(envs)],
                "numNodes": 3,
                "env": [{"name": "EPOCHS", "value": "2"}],
                "resourcesPerNode": SMALL,
            },
        },
    }
    path = tmp_path / "ds.yaml"
    path.write_text(yaml.safe_dump_all([mpi_runtime("local-mpi"), trainjob]))

    ran = runtime.cli("run", str(path), timeout=180)

    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "jobtype/mpi-slots-2-launcher-as-worker created" in ran.stdout
    assert hostfile.read_text() == "127.0.0.1 slots=6\n"  # all three hosts on this machine: their slots summed
    env = json.loads((envs / "launcher-0.json").read_text())
    assert env["EPOCHS"] == "2"
    assert env["OMPI_MCA_orte_default_hostfile"] == env["PHALANX_HOSTFILE"]
    with runtime.client() as client:
        job = client.get("ds")
    assert job.status.phase == Phase.SUCCEEDED
    assert (job.spec.replicas["launcher"].count, job.spec.replicas["worker"].count) == (1, 2)
    # The nodes serve the launcher until it ends: Phalanx stops them then, as upstream's successPolicy does.
    wait_until(lambda: replicas_left(runtime, "ds") == [], message="the MPI nodes to be stopped")


MNIST_IMAGE = "kubeflow/pytorch-dist-mnist:latest"
MNIST_STANDIN = str(HERE / "mnist_standin.py")


def mnist_gloo() -> dict[str, Any]:
    """A PyTorchJob in the shape of upstream's mnist gloo example: image and args only (the image's entrypoint
    trains), Master and Worker; resources are CPU here (upstream's asks for a GPU each)."""

    def replica() -> dict[str, Any]:
        container = {"name": "pytorch", "image": MNIST_IMAGE, "args": ["--backend", "gloo"], "resources": SMALL}
        return {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pytorch-dist-mnist-gloo"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}},
    }


def test_an_upstream_pytorchjob_without_a_command_runs_unchanged_with_a_stand_in_for_its_image(
    runtime: Runtime, tmp_path: Path
) -> None:
    envs = tmp_path / "env"
    path = runtime.write_job("mnist", mnist_gloo())
    written = path.read_text()
    master = "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].command"

    # Without a stand-in the embedded runtime refuses it, where the command would be, naming the fix.
    for verb in (["submit", "--dry-run"], ["run"]):
        refused = runtime.cli(*verb, str(path))
        assert refused.returncode == 2, (verb, refused.stdout, refused.stderr)
        assert master in refused.stderr
        assert f"--stand-in {MNIST_IMAGE}=PROGRAM" in refused.stderr
        assert "Traceback" not in refused.stderr
    with runtime.client() as client:
        assert client.store.list(TrainingJob) == []

    stand_in = f"{MNIST_IMAGE}=python {MNIST_STANDIN} {envs}"
    ran = runtime.cli("run", str(path), "--stand-in", stand_in, timeout=180)

    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert path.read_text() == written  # the file is not edited
    # Each replica's stand-in was handed the argv its container would run: the args, for the entrypoint.
    argv = {int(p.name.split(".")[0]): json.loads(p.read_text()) for p in envs.glob("*.argv.json")}
    assert argv == {0: ["--backend", "gloo"], 1: ["--backend", "gloo"]}
    logs = runtime.cli("logs", "pytorch-dist-mnist-gloo", "--replica", "master-0", check=True).stdout
    assert "rank 0 heard ranks [1] of world size 2" in logs
    # Visible afterwards: the annotation and the stored command in get -o yaml, an event in describe.
    shown = yaml.safe_load(runtime.cli("get", "job", "pytorch-dist-mnist-gloo", "-o", "yaml", check=True).stdout)
    recorded = shown["metadata"]["annotations"]["phalanx.dev/stand-ins"]
    assert recorded == f"{MNIST_IMAGE}=python {MNIST_STANDIN} {envs}"
    assert shown["spec"]["replicas"]["worker"]["template"]["command"] == ["python", MNIST_STANDIN, str(envs)]
    described = runtime.cli("describe", "job", "pytorch-dist-mnist-gloo", check=True).stdout
    assert "StandIn" in described
    assert f"image {MNIST_IMAGE} is played by the stand-in" in " ".join(described.split())


def test_a_stand_in_for_an_image_no_replica_runs_is_refused(runtime: Runtime, tmp_path: Path) -> None:
    path = runtime.write_job("mnist", mnist_gloo())
    refused = runtime.cli("run", str(path), "--stand-in", f"kubeflow/mnist=python {MNIST_STANDIN}")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "--stand-in kubeflow/mnist: no replica runs this image" in " ".join(refused.stderr.split())
    missing = runtime.cli("run", str(path), "--stand-in", f"{MNIST_IMAGE}=./no-such-program")
    assert missing.returncode == 2
    assert "./no-such-program is not a file" in missing.stderr


def test_convert_applies_the_refusals_of_the_backend_it_converts_for(runtime: Runtime, tmp_path: Path) -> None:
    # Before, convert printed a TrainingJob the embedded runtime then refused at submit (affinity has no
    # meaning on one machine): convert and submit --dry-run now answer alike for each backend.
    document = pytorchjob("ddp", tmp_path / "env")
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    required = {"nodeSelectorTerms": [{"matchExpressions": [zone]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    document["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"] = affinity
    path = runtime.write_job("affine", document)
    where = "spec.pytorchReplicaSpecs.Worker.template.spec.affinity"
    for verb in (["convert"], ["submit", "--dry-run"]):
        refused = runtime.cli(*verb, str(path))
        assert refused.returncode == 2, (verb, refused.stdout, refused.stderr)
        assert where in refused.stderr
    converted = runtime.cli("convert", "--backend", "kubernetes", str(path), check=True).stdout
    (job,) = list(yaml.safe_load_all(converted))
    assert job["spec"]["replicas"]["worker"]["template"]["affinity"] == affinity
