"""Dask under a JobType of the user's own (examples/frameworks/dask), as docs/frameworks.md tells a user to run it:
``phalanx submit`` the YAML-only ``dask`` type, then ``phalanx run`` a job of it. The type starts a scheduler and
three workers as service roles and a client as the success role; the client's gradient descent over partitions
held on every worker must equal the same descent run in one process, and once the client succeeds Phalanx must
stop the scheduler and the workers, which never exit by themselves.
"""

from __future__ import annotations

import pytest

from support.frameworks import FrameworksRuntime, program_pids

JOB = "dask-regression"
WORKERS = 3


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
