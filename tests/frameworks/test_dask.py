"""Dask under a JobType of the user's own (examples/frameworks/dask), as docs/frameworks.md tells a user to run it:
``phalanx submit`` the YAML-only ``dask`` type, then ``phalanx run`` a job of it. The type starts a scheduler and
three workers as service roles and a client as the success role; the client's gradient descent over partitions
held on every worker must equal the same descent run in one process, and once the client succeeds Phalanx must
stop the scheduler and the workers, which never exit by themselves. On Kubernetes (where kwok runs no
containers) the same type renders Pods whose command lines, once the kubelet expands ``$(NAME)``, are the
embedded runtime's with each Pod's DNS name and the type's port.
"""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.adapters.kubernetes.rendering import render_pod, replica_host
from phalanx.core.rendezvous import expand_references
from phalanx.model.loading import builtin_jobtypes, parse_jobtype
from phalanx.model.validation import validate_job
from support.frameworks import FrameworksRuntime, load_example, program_pids
from support.rendering_parity import assert_kubernetes_renders_the_same

JOB = "dask-regression"
WORKERS = 3
IMAGE = "example.org/dask:2026.8.0"  # the operator's --image; the example names none (embedded ignores it)


@pytest.mark.timeout(300)
def test_a_dask_jobtype_of_your_own_runs_a_cluster_that_phalanx_stops_when_the_client_succeeds(
    fw: FrameworksRuntime,
) -> None:
    fw.copy_example("dask")
    created = fw.cli("submit", "examples/frameworks/dask/jobtype.yaml")
    assert created.returncode == 0, created.stdout + created.stderr
    assert "jobtype/dask created" in created.stdout

    run = fw.run_example("dask")
    assert run.returncode == 0, run.stdout + run.stderr
    job = fw.job(JOB)
    assert job["status"]["phase"] == "Succeeded", job["status"]

    result = fw.results(JOB)["result-client"]
    # The scheduler and one Dask worker per worker replica, each listening on the address Phalanx gave that
    # replica: the addresses came from the JobType's templates (DASK_SCHEDULER_ADDRESS, LISTEN_PORT).
    endpoints = job["status"]["endpoints"]
    assert result["scheduler"] == f"tcp://{endpoints[f'{JOB}-scheduler-0']}"
    assert result["replicas"] == {f"tcp://{endpoints[f'{JOB}-worker-{i}']}": str(i) for i in range(WORKERS)}
    # Every worker held data and computed on it: the scheduler's who_has and the tasks' own worker address.
    assert {holder for holders in result["partition_holders"].values() for holder in holders} == set(result["workers"])
    assert result["ran_on"] == result["workers"]
    # The distributed gradient descent is the one-process descent, and it converged.
    assert result["max_difference_from_local"] <= 1e-9
    assert result["max_error_from_true_weights"] < 0.05

    # The client alone succeeded; the scheduler and the workers neither succeeded nor failed: they were still
    # running when the client succeeded and Phalanx stopped them, and none of their processes is left.
    statuses = job["status"]["replicaStatuses"]
    assert statuses["client"] == {"active": 0, "succeeded": 1, "failed": 0}
    assert statuses["scheduler"] == {"active": 0, "succeeded": 0, "failed": 0}
    assert statuses["worker"] == {"active": 0, "succeeded": 0, "failed": 0}
    assert program_pids(fw.state_dir, JOB, "scheduler", 0) == []
    for index in range(WORKERS):
        assert program_pids(fw.state_dir, JOB, "worker", index) == []

    # Kubernetes would tell each replica what these working replicas were told (env, command line, Service).
    assert_kubernetes_renders_the_same(fw, JOB, load_example("dask", "jobtype.yaml") + load_example("dask"))


def command_line_on_kubernetes(pod: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """A Pod's command and args as the kubelet runs them ($(NAME) expanded from the Pod's env), and that env."""
    [container] = pod["spec"]["containers"]
    env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    return [expand_references(part, env) for part in [*container.get("command", []), *container.get("args", [])]], env


def test_on_kubernetes_the_dask_jobtype_renders_pods_that_listen_on_the_types_port_by_dns() -> None:
    [jobtype_document] = load_example("dask", "jobtype.yaml")
    [job_document] = load_example("dask", "job.yaml")
    jobtype = parse_jobtype(jobtype_document)
    job = validate_job(
        {**job_document, "metadata": {**job_document["metadata"], "namespace": "team-a"}},
        {**builtin_jobtypes(), "dask": jobtype},
    )
    job = job.model_copy(update={"metadata": job.metadata.model_copy(update={"uid": "0b5e6f3c-0000-0000-0000-1"})})
    scheduler_host = replica_host(job, f"{JOB}-scheduler-0")
    assert scheduler_host == f"{JOB}-scheduler-0.{JOB}.team-a.svc"

    command, env = command_line_on_kubernetes(render_pod(job, jobtype, "scheduler", 0, 0, image=IMAGE))
    assert command == [
        "dask", "scheduler", "--host", scheduler_host, "--port", "8786",
        "--no-dashboard", "--dashboard-address", f"{scheduler_host}:0",
    ]  # fmt: skip
    for index in range(WORKERS):
        command, env = command_line_on_kubernetes(render_pod(job, jobtype, "worker", index, 0, image=IMAGE))
        host = replica_host(job, f"{JOB}-worker-{index}")
        assert env["DASK_SCHEDULER_ADDRESS"] == f"tcp://{scheduler_host}:8786"
        assert command == [
            "dask", "worker", "--host", host, "--worker-port", "8786", "--name", f"worker-{index}",
            "--nthreads", "1", "--no-nanny", "--no-dashboard", "--dashboard-address", f"{host}:0",
        ]  # fmt: skip
    command, env = command_line_on_kubernetes(render_pod(job, jobtype, "client", 0, 0, image=IMAGE))
    assert command == ["python", "examples/frameworks/dask/client.py"]
    assert (env["DASK_SCHEDULER_ADDRESS"], env["EXPECTED_WORKERS"]) == (f"tcp://{scheduler_host}:8786", "3")
