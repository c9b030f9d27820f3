"""An MPIJob in the shape of mpi-operator's pi example runs unchanged on the embedded runtime, its image played by
one stand-in (``phalanx run --stand-in``) that runs real Open MPI's mpirun for the launcher and holds the workers'
places for their sshd.

A TrainJob on an MPI TrainingRuntime of upstream's deepspeed-distributed shape runs the same way: the launcher is a
node too, and mpirun starts a rank on every slot of the launcher and the nodes.

The MPIJob file is mpi-operator's format as upstream writes the pi example, less ``securityContext`` (the embedded
runtime runs replicas as the control plane's user) and ``sshAuthMountPath`` (Phalanx makes no SSH keys).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from support.frameworks import FrameworksRuntime

IMAGE = "mpioperator/mpi-pi:openmpi"
STANDIN = Path(__file__).with_name("mpi_pi_standin.py")
PI_PROGRAM = "/home/mpiuser/pi"  # the image's program, which the stand-in plays
PI = {
    "apiVersion": "kubeflow.org/v2beta1",
    "kind": "MPIJob",
    "metadata": {"name": "pi"},
    "spec": {
        "slotsPerWorker": 1,
        "runPolicy": {"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 60},
        "mpiReplicaSpecs": {
            "Launcher": {
                "replicas": 1,
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "image": IMAGE,
                                "name": "mpi-launcher",
                                "command": ["mpirun"],
                                "args": ["-n", "2", "/home/mpiuser/pi"],
                                "resources": {"limits": {"cpu": 1, "memory": "1Gi"}},
                            }
                        ]
                    }
                },
            },
            "Worker": {
                "replicas": 2,
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "image": IMAGE,
                                "name": "mpi-worker",
                                "command": ["/usr/sbin/sshd"],
                                "args": ["-De", "-f", "/home/mpiuser/.sshd_config"],
                                "resources": {"limits": {"cpu": "100m", "memory": "256Mi"}},
                            }
                        ]
                    }
                },
            },
        },
    },
}


def test_the_pi_mpijob_runs_to_succeeded_with_one_stand_in_playing_launcher_and_workers(fw: FrameworksRuntime) -> None:
    path = fw.work_dir / "pi.yaml"
    path.write_text(yaml.safe_dump(PI, sort_keys=False))

    ran = fw.cli("run", str(path), "--stand-in", f"{IMAGE}=python {STANDIN}", timeout=400)

    assert ran.returncode == 0, ran.stdout + ran.stderr
    job = fw.job("pi")
    assert job["status"]["phase"] == "Succeeded"
    assert job["metadata"]["annotations"]["phalanx.dev/stand-ins"] == f"{IMAGE}=python {STANDIN}"
    launcher = fw.cli("logs", "pi", "--replica", "launcher-0")
    found = re.search(r"pi is approximately (\d\.\d+) over (\d+) ranks", launcher.stdout)
    assert found, launcher.stdout + launcher.stderr
    assert abs(float(found.group(1)) - 3.14159265) < 1e-6
    assert found.group(2) == "2"  # mpirun -n 2, on the slots of Phalanx's hostfile
    worker = fw.cli("logs", "pi", "--replica", "worker-1")
    assert "worker: playing /usr/sbin/sshd -De -f /home/mpiuser/.sshd_config" in worker.stdout


def mpi_runtime(name: str) -> dict[str, Any]:
    """A TrainingRuntime of upstream's deepspeed-distributed shape on the pi image, less what the embedded runtime
    refuses (securityContext: replicas run as the control plane's user; the nodes' readinessProbe: no kubelet)."""

    def replicated(job: str, container: dict[str, Any], **fields: Any) -> dict[str, Any]:
        return {"name": job, **fields, "template": {"spec": {"template": {"spec": {"containers": [container]}}}}}

    node = {
        "name": "node",
        "image": IMAGE,
        "command": ["/usr/sbin/sshd"],
        "args": ["-De", "-f", "/home/mpiuser/.sshd_config"],
    }
    launcher = replicated("launcher", {"name": "node", "image": IMAGE}, dependsOn=[{"name": "node", "status": "Ready"}])
    launcher["template"]["metadata"] = {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {
                "numNodes": 1,
                "mpi": {
                    "numProcPerNode": 2,
                    "mpiImplementation": "OpenMPI",
                    "sshAuthMountPath": "/home/mpiuser/.ssh",
                    "runLauncherAsNode": True,
                },
            },
            "template": {
                "spec": {
                    "network": {"publishNotReadyAddresses": True},
                    "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
                    "replicatedJobs": [replicated("node", node), launcher],
                }
            },
        },
    }


def test_a_trainjob_on_an_mpi_runtime_runs_real_mpirun_over_the_launcher_and_nodes_slots(
    fw: FrameworksRuntime,
) -> None:
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "pi-trainjob"},
        "spec": {
            "runtimeRef": {"name": "pi-mpi", "kind": "TrainingRuntime"},
            # No -n: mpirun starts one rank per slot of Phalanx's hostfile.
            "trainer": {
                "numNodes": 2,
                "command": ["mpirun", PI_PROGRAM],
                "resourcesPerNode": {"limits": {"cpu": "500m", "memory": "512Mi"}},
            },
        },
    }
    path = fw.work_dir / "pi-trainjob.yaml"
    path.write_text(yaml.safe_dump_all([mpi_runtime("pi-mpi"), trainjob], sort_keys=False))

    ran = fw.cli("run", str(path), "--stand-in", f"{IMAGE}=python {STANDIN}", timeout=400)

    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "jobtype/mpi-slots-2-launcher-as-worker created" in ran.stdout
    job = fw.job("pi-trainjob")
    assert job["status"]["phase"] == "Succeeded"
    launcher = fw.cli("logs", "pi-trainjob", "--replica", "launcher-0")
    found = re.search(r"pi is approximately (\d\.\d+) over (\d+) ranks", launcher.stdout)
    assert found, launcher.stdout + launcher.stderr
    assert abs(float(found.group(1)) - 3.14159265) < 1e-6
    # numNodes 2, the launcher one of them: the launcher and one worker, 2 slots each.
    assert found.group(2) == "4"
    worker = fw.cli("logs", "pi-trainjob", "--replica", "worker-0")
    assert "worker: playing /usr/sbin/sshd -De -f /home/mpiuser/.sshd_config" in worker.stdout
