"""Per-role restartPolicy and cleanPodPolicy None through the real CLI on the embedded runtime, written as Kubeflow
documents: an XGBoostJob whose workers retry and whose master does not, and a TFJob whose parameter server keeps
running after its workers succeeded, holding its CPUs, until the job is deleted."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from conftest import PROGRAM, Runtime, processes_mentioning, wait_until
from phalanx.model.jobs import Phase
from phalanx.model.replicas import Replica


def container(name: str, args: list[str], *, cpu: str = "100m") -> dict[str, Any]:
    return {
        "name": name,
        "image": "example.org/standin:1.0",  # not used by the embedded runtime
        "command": ["python", PROGRAM, *args],
        "resources": {"limits": {"cpu": cpu, "memory": "64Mi"}},
    }


def replica_spec(policy: str, args: list[str], *, count: int = 1, cpu: str = "100m") -> dict[str, Any]:
    return {
        "replicas": count,
        "restartPolicy": policy,
        "template": {"spec": {"containers": [container("main", args, cpu=cpu)]}},
    }


def xgboostjob(name: str, *, master: list[str], worker: list[str]) -> dict[str, Any]:
    """Master Never, Worker OnFailure: a failed worker starts again, a failed master fails the job."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "XGBoostJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"backoffLimit": 2},
            "xgbReplicaSpecs": {"Master": replica_spec("Never", master), "Worker": replica_spec("OnFailure", worker)},
        },
    }


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def replicas_of(runtime: Runtime, job: str) -> list[Replica]:
    with runtime.client() as client:
        return [r for r in client.store.list(Replica) if r.spec.job_name == job]


def test_a_failed_worker_starts_again_while_the_master_role_never_restarts(runtime: Runtime, tmp_path: Path) -> None:
    workers, masters = tmp_path / "worker-starts", tmp_path / "master-starts"
    # The worker fails once (exit 3) and is retried; the master waits for its second start, then succeeds.
    document = xgboostjob(
        "retrying",
        master=["--record", str(masters), "--await-lines", str(workers), "2"],
        worker=["--record", str(workers), "--crash-once", str(tmp_path / "crashed")],
    )
    path = runtime.write_job("retrying", document)

    ran = runtime.cli("run", str(path), timeout=120)

    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert [line.split()[:2] for line in lines_of(workers)] == [["worker-0", "0"], ["worker-0", "1"]]
    assert len(lines_of(masters)) == 1
    shown = yaml.safe_load(runtime.cli("get", "job", "retrying", "-o", "yaml", check=True).stdout)
    assert shown["status"]["phase"] == "Succeeded" and shown["status"]["restarts"] == 1
    assert shown["spec"]["replicas"]["master"]["restartPolicy"] == "Never"
    assert shown["spec"]["replicas"]["worker"]["restartPolicy"] == "OnFailure"
    described = runtime.cli("describe", "job", "retrying", check=True).stdout
    assert "(master: Never, worker: OnFailure)" in described


def test_a_failed_master_fails_the_job_at_once_naming_its_roles_policy(runtime: Runtime, tmp_path: Path) -> None:
    masters = tmp_path / "master-starts"
    document = xgboostjob(
        "master-fails",
        master=["--record", str(masters), "--crash-once", str(tmp_path / "crashed")],
        worker=["--hold", str(tmp_path / "never-created")],
    )
    path = runtime.write_job("master-fails", document)

    ran = runtime.cli("run", str(path), timeout=120)

    assert ran.returncode != 0
    assert "replica master-fails-master-0 failed with exit code 3; the master role's restartPolicy is Never" in (
        ran.stdout + ran.stderr
    )
    assert len(lines_of(masters)) == 1, "the master was not started again"
    wait_until(lambda: processes_mentioning(str(tmp_path / "never-created")) == [], message="the worker to stop")


def tfjob(name: str, hold: Path, ps_cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None"},
            "tfReplicaSpecs": {
                "PS": replica_spec("Never", ["--hold", str(hold)], cpu=ps_cpu),
                "Worker": replica_spec("Never", ["--sleep", "0.5"]),
            },
        },
    }


def test_a_parameter_server_left_running_holds_its_cpus_until_the_job_is_deleted(
    runtime: Runtime, tmp_path: Path
) -> None:
    hold = tmp_path / "never-created"
    cpus = len(os.sched_getaffinity(0))
    runtime.start_control_plane()
    # The PS holds all but half a CPU of the machine, so a job asking for one whole CPU cannot start beside it.
    runtime.submit(tfjob("serving", hold, f"{cpus * 1000 - 500}m"))

    done = runtime.wait_phase("serving", {Phase.SUCCEEDED, Phase.FAILED})

    assert done.status.phase == Phase.SUCCEEDED, done.status.message
    assert len(processes_mentioning(str(hold))) == 1, "the parameter server keeps running"
    wait_until(
        lambda: [r.metadata.name for r in replicas_of(runtime, "serving")] == ["serving-ps-0"],
        message="the finished worker collected, the parameter server kept",
    )
    assert len(processes_mentioning(str(hold))) == 1
    events = runtime.cli("describe", "job", "serving", check=True).stdout
    assert "serving-ps-0 keep running (cleanPodPolicy None)" in events
    assert "cleanPodPolicy=None" in events
    blocker = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "blocked"},
        "spec": {"replicas": {"worker": {"template": {"command": ["true"], "resources": {"cpu": 1}}}}},
    }
    runtime.submit(blocker)
    assert runtime.wait_waiting("blocked").status.phase == Phase.QUEUED

    runtime.cli("delete", "job", "serving", check=True)

    wait_until(lambda: processes_mentioning(str(hold)) == [], timeout=15, message="the parameter server to stop")
    wait_until(lambda: replicas_of(runtime, "serving") == [], message="its replica to be removed")
    assert runtime.wait_phase("blocked", {Phase.SUCCEEDED, Phase.FAILED}).status.phase == Phase.SUCCEEDED
