"""MPI under the mpi JobType: mpirun (Open MPI 5) reads the hostfile Phalanx renders and mpi4py all-reduces.

The examples in examples/frameworks/mpi run as a user runs them (``phalanx run``). The launcher's ``mpirun`` has
neither ``--hostfile`` nor ``-n``: it finds the hostfile through the JobType's variables and starts one rank per
slot, so three ranks (and a universe of three slots) prove that Open MPI read Phalanx's hostfile; with no
hostfile it would start one rank per CPU of the launcher. Killing one rank mid-run must end the whole MPI run
(no rank left waiting in a collective on a dead peer) and the job must follow its restart policy.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from support.frameworks import FrameworksRuntime, load_example, program_pids
from support.rendering_parity import assert_kubernetes_renders_the_same
from support.waiting import wait_until

WORKERS = 3
STEPS = 30  # restart.yaml: --steps 30 --pause 0.25, about 8 s of all-reduces
TRIANGLE = WORKERS * (WORKERS + 1) // 2  # the sum of rank + 1 over the ranks
# How long after one rank is killed the job must have left Running (Restarting, or Failed under Never): mpirun
# notices a dead rank at once (measured: about 1 s on an idle 2-core machine); the rest is polling under load.
KILL_TO_OUTCOME_S = 30.0


def hostfile_slots(text: str) -> dict[str, int]:
    """``HOST slots=N`` lines -> {host: N}."""
    slots = {}
    for line in text.splitlines():
        host, field = line.split()
        slots[host] = int(field.removeprefix("slots="))
    return slots


def replicas_left(fw: FrameworksRuntime, job: str) -> dict[str, list[int]]:
    """The job's replicas that still have processes (the launcher's include mpirun and the ranks)."""
    found = {"launcher-0": program_pids(fw.state_dir, job, "launcher", 0)}
    found |= {f"worker-{i}": program_pids(fw.state_dir, job, "worker", i) for i in range(WORKERS)}
    return {name: pids for name, pids in found.items() if pids}


def rank_pid(fw: FrameworksRuntime, job: str, rank: int) -> int | None:
    """The process of one MPI rank: in the launcher's tree (mpirun starts it), with its rank in the env."""
    for pid in program_pids(fw.state_dir, job, "launcher", 0):
        try:
            variables = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in variables:
            return pid
    return None


@pytest.mark.timeout(300)
def test_mpirun_reads_the_hostfile_and_every_rank_checks_the_allreduce(fw: FrameworksRuntime) -> None:
    run = fw.run_example("mpi")
    assert run.returncode == 0, run.stdout + run.stderr
    job = fw.job("mpi-allreduce")
    assert job["status"]["phase"] == "Succeeded", job["status"]["message"]

    results = fw.results("mpi-allreduce")
    assert sorted(results) == [f"result-rank{r}" for r in range(WORKERS)], run.stdout
    for name, result in results.items():
        # The hostfile Phalanx rendered: every worker is on 127.0.0.1 here, one slot each.
        assert hostfile_slots(result["hostfile"]) == {"127.0.0.1": WORKERS}, name
        # mpirun took its ranks and its universe from that hostfile: one rank per slot.
        assert result["size"] == result["universe_size"] == sum(hostfile_slots(result["hostfile"]).values()), name
        assert result["sum"] == result["expected"] == TRIANGLE, name
        assert result["vector"] == [i * TRIANGLE for i in range(4)], name
        assert result["mpi"].startswith("Open MPI v5."), name
    # The workers were stopped when the launcher succeeded.
    wait_until(lambda: replicas_left(fw, "mpi-allreduce") == {}, timeout=30, message="every process to end")
    # Kubernetes would tell each replica what these working replicas were told (env, hostfile, Service).
    assert_kubernetes_renders_the_same(fw, "mpi-allreduce", load_example("mpi"))


def start_and_kill_rank(
    fw: FrameworksRuntime, file: str, job: str, log: Path
) -> tuple[subprocess.Popen[str], float, set[int]]:
    """``phalanx run FILE`` in the background; once every rank is under way, SIGKILL rank 1. Returns the run,
    when the rank was killed, and the processes of the launcher then (mpirun, the ranks)."""
    run = fw.cli_background("run", file, output=log)
    # Under way: every rank has printed its third step (the phalanx run output shows the launcher's log).
    wait_until(
        lambda: all(f"rank {r}/{WORKERS} step 3/{STEPS} " in log.read_text() for r in range(WORKERS)),
        timeout=120,
        message=f"all ranks of {job} to pass step 3",
    )
    victim = wait_until(lambda: rank_pid(fw, job, 1), timeout=10, message="rank 1's process")
    tree = set(program_pids(fw.state_dir, job, "launcher", 0))
    os.kill(victim, signal.SIGKILL)
    return run, time.monotonic(), tree


def wait_for_the_ranks_to_end(fw: FrameworksRuntime, job: str, tree: set[int]) -> None:
    """No process of the killed run lives on: mpirun ended the ranks that were waiting for the dead one."""
    wait_until(
        lambda: not tree & set(program_pids(fw.state_dir, job, "launcher", 0)),
        timeout=KILL_TO_OUTCOME_S,
        message="mpirun and the surviving ranks of the killed run to end",
    )


def phase_line(log: Path, phase: str) -> str | None:
    """The ``phalanx run`` line announcing PHASE, if it was printed."""
    match = re.search(rf"^\s*[\d.]+s\s+{phase}\s.*$", log.read_text(), re.MULTILINE)
    return match.group(0) if match else None


@pytest.mark.timeout(300)
def test_a_killed_rank_ends_the_mpi_run_and_onfailure_restarts_it(fw: FrameworksRuntime, tmp_path: Path) -> None:
    fw.copy_example("mpi")
    log = tmp_path / "run.log"
    run, killed, tree = start_and_kill_rank(fw, "examples/frameworks/mpi/restart.yaml", "mpi-restart", log)
    restarting = wait_until(
        lambda: phase_line(log, "Restarting"), timeout=KILL_TO_OUTCOME_S, message="the job to restart"
    )
    print(f"kill -> Restarting: {time.monotonic() - killed:.1f}s: {restarting.strip()}")
    assert "mpi-restart-launcher-0 failed" in restarting  # mpirun exited non-zero
    wait_for_the_ranks_to_end(fw, "mpi-restart", tree)

    assert run.wait(timeout=120) == 0, log.read_text()
    print(f"kill -> Succeeded: {time.monotonic() - killed:.1f}s")
    status = fw.job("mpi-restart")["status"]
    assert (status["phase"], status["restarts"], status["attempt"]) == ("Succeeded", 1, 1), status["message"]
    results = fw.results("mpi-restart")
    assert sorted(results) == [f"result-rank{r}" for r in range(WORKERS)], log.read_text()
    for name, result in results.items():
        assert result["attempt"] == 1, name  # written by the restarted run, which ran all its steps
        assert (result["size"], result["steps"]) == (WORKERS, STEPS), name
        assert result["sum"] == result["expected"] == TRIANGLE * STEPS, name
    wait_until(lambda: replicas_left(fw, "mpi-restart") == {}, timeout=30, message="every process to end")


@pytest.mark.timeout(300)
def test_a_killed_rank_fails_the_job_under_never(fw: FrameworksRuntime, tmp_path: Path) -> None:
    # The same job, with the one field a user would change.
    [job] = load_example("mpi", "restart.yaml")
    job["spec"]["runPolicy"]["restartPolicy"] = "Never"
    fw.copy_example("mpi")
    (fw.work_dir / "never.yaml").write_text(yaml.safe_dump(job))

    log = tmp_path / "run.log"
    run, killed, tree = start_and_kill_rank(fw, "never.yaml", "mpi-restart", log)
    failed = wait_until(lambda: phase_line(log, "Failed"), timeout=KILL_TO_OUTCOME_S, message="the job to fail")
    print(f"kill -> Failed: {time.monotonic() - killed:.1f}s: {failed.strip()}")
    assert "mpi-restart-launcher-0 failed" in failed and "restartPolicy is Never" in failed
    wait_for_the_ranks_to_end(fw, "mpi-restart", tree)

    assert run.wait(timeout=60) != 0
    status = fw.job("mpi-restart")["status"]
    assert (status["phase"], status["restarts"]) == ("Failed", 0), status["message"]
    # Nothing runs on: not mpirun, not a rank stuck in a collective with the dead one, not a worker.
    wait_until(lambda: replicas_left(fw, "mpi-restart") == {}, timeout=30, message="every process to end")
