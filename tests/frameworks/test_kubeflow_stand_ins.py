"""An MPIJob in the shape of mpi-operator's pi example runs unchanged on the embedded runtime, its image played by
one stand-in (``phalanx run --stand-in``) that runs real Open MPI's mpirun for the launcher and holds the workers'
places for their sshd.

The file is mpi-operator's format as upstream writes the pi example, less ``securityContext`` (the embedded runtime
runs replicas as the control plane's user) and ``sshAuthMountPath`` (Phalanx makes no SSH keys).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from support.frameworks import FrameworksRuntime

IMAGE = "mpioperator/mpi-pi:openmpi"
STANDIN = Path(__file__).with_name("mpi_pi_standin.py")
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
