"""The SchedulerConfiguration file on the embedded runtime: strict FIFO, backfill and time slicing switched on by
``phalanx up --scheduler-config``, with real replica processes on the simulated 8-GPU server.

Each test starts the control plane through the CLI, as a user would, so the file's way into the scheduler is
part of what is tested. Replicas hold their GPUs until the test releases them (``--hold``), so what waits and
what runs is decided by the scheduler alone, never by timing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import REPO, Runtime, program_role, typed_job, wait_until
from phalanx.model.jobs import Phase

INVENTORY = REPO / "examples" / "inventories" / "dgx-2socket-8gpu.yaml"
HEAD = "apiVersion: phalanx.dev/v1alpha1\nkind: SchedulerConfiguration\n"


def up(runtime: Runtime, body: str) -> None:
    path = runtime.work_dir / "scheduler.yaml"
    path.write_text(HEAD + body)
    runtime.cli("up", "--scheduler-config", str(path), "--inventory", str(INVENTORY), check=True)


def gpu_job(tmp_path: Path, name: str, gpus: int, *, hold: bool = True, deadline: int | None = None) -> dict[str, Any]:
    args = ["--progress", str(tmp_path / f"{name}.progress")]
    args += ["--hold", str(tmp_path / f"{name}.hold")] if hold else ["--sleep", "0.2"]
    run_policy = {"activeDeadlineSeconds": deadline} if deadline is not None else {}
    role = program_role(1, args=args, cpu=1, memory="1Gi", gpu=gpus)
    return typed_job(name, "generic", {"worker": role}, runPolicy=run_policy)


def release(tmp_path: Path, name: str) -> None:
    (tmp_path / f"{name}.hold").write_text("go")


def progress(tmp_path: Path, name: str) -> list[float]:
    path = tmp_path / f"{name}.progress"
    return [float(line.split()[1]) for line in path.read_text().splitlines()] if path.exists() else []


def test_strict_fifo_holds_a_small_job_behind_a_big_waiting_one(runtime: Runtime, tmp_path: Path) -> None:
    up(runtime, "queueingStrategy: strict-fifo\n")
    runtime.submit(gpu_job(tmp_path, "running", 6))
    runtime.wait_phase("running", {Phase.RUNNING})
    runtime.submit(gpu_job(tmp_path, "big", 4))
    runtime.wait_waiting("big")
    runtime.submit(gpu_job(tmp_path, "small", 1))
    small = runtime.wait_waiting("small")
    # Two GPUs are free: under best-effort FIFO the small job would run at once.
    assert small.status.phase == Phase.QUEUED
    assert small.status.message == "waits behind default/big, first in line, which cannot start yet (strict FIFO)"

    release(tmp_path, "running")
    runtime.wait_phase("big", {Phase.RUNNING})
    runtime.wait_phase("small", {Phase.RUNNING})
    for name in ("big", "small"):
        release(tmp_path, name)
        assert runtime.wait_phase(name, {Phase.SUCCEEDED, Phase.FAILED}).status.phase == Phase.SUCCEEDED


def test_backfill_lets_a_short_job_pass_without_delaying_the_first(runtime: Runtime, tmp_path: Path) -> None:
    # activeDeadlineSeconds is the duration estimate: the running job ends within 60 s, so the whole-server job
    # has room reserved from then; a job bounded to 20 s ends before that and may pass, one without a bound not.
    up(runtime, "queueingStrategy: backfill\n")
    runtime.submit(gpu_job(tmp_path, "running", 6, deadline=60))
    runtime.wait_phase("running", {Phase.RUNNING})
    runtime.submit(gpu_job(tmp_path, "whole", 8))
    runtime.wait_waiting("whole")
    runtime.submit(gpu_job(tmp_path, "unbounded", 2))
    held = runtime.wait_waiting("unbounded")
    assert held.status.message.startswith("the room it fits in is reserved for default/whole, first in line"), (
        held.status.message
    )
    assert held.status.message.endswith("this job has no duration estimate")
    runtime.submit(gpu_job(tmp_path, "short", 2, hold=False, deadline=20))
    short = runtime.wait_phase("short", {Phase.SUCCEEDED, Phase.FAILED})
    assert short.status.phase == Phase.SUCCEEDED, short.status.message

    release(tmp_path, "running")
    whole = runtime.wait_phase("whole", {Phase.RUNNING})
    assert sorted(whole.status.placements["whole-worker-0"].gpus) == list(range(8))
    with runtime.client() as client:
        assert client.get("unbounded").status.phase == Phase.QUEUED  # it never ran before the first in line
    assert progress(tmp_path, "unbounded") == []
    release(tmp_path, "whole")
    release(tmp_path, "unbounded")
    runtime.wait_phase("unbounded", {Phase.RUNNING, Phase.SUCCEEDED})


def test_time_slicing_preempts_a_long_running_job_for_a_new_one(runtime: Runtime, tmp_path: Path) -> None:
    # One band limit of 2 GPU-seconds: an 8-GPU job drops below the top band after a quarter of a second.
    up(runtime, "queueOrder: least-attained-service\ntimeSlicing: {enabled: true, thresholds: [2]}\n")
    runtime.submit(gpu_job(tmp_path, "long", 8))
    runtime.wait_phase("long", {Phase.RUNNING})
    wait_until(lambda: len(progress(tmp_path, "long")) >= 10, message="long to run for half a second")

    runtime.submit(gpu_job(tmp_path, "new", 8))
    new = runtime.wait_phase("new", {Phase.RUNNING})
    assert sorted(new.status.placements["new-worker-0"].gpus) == list(range(8))
    with runtime.client() as client:
        events = client.store.list_events("TrainingJob", "default", "long")
    preempted = [event.message for event in events if event.reason == "Preempted"]
    assert len(preempted) == 1, preempted
    assert "band 1, below default/new's band 0" in preempted[0], preempted[0]

    # The preempted job now ranks below the new one by the service it attained: it waits, it does not preempt.
    long = runtime.wait_waiting("long")
    assert long.status.phase == Phase.QUEUED
    wait_until(lambda: len(progress(tmp_path, "new")) >= 10, message="new to run for half a second")
    with runtime.client() as client:
        assert client.get("new").status.phase == Phase.RUNNING
        assert client.get("long").status.phase == Phase.QUEUED

    release(tmp_path, "new")
    runtime.wait_phase("new", {Phase.SUCCEEDED})
    runtime.wait_phase("long", {Phase.RUNNING})
    release(tmp_path, "long")
    assert runtime.wait_phase("long", {Phase.SUCCEEDED, Phase.FAILED}).status.phase == Phase.SUCCEEDED


def test_up_with_another_file_says_which_configuration_runs(runtime: Runtime) -> None:
    up(runtime, "queueingStrategy: strict-fifo\n")
    recorded = runtime.state_dir / "scheduler-config.yaml"
    assert "queueingStrategy: strict-fifo" in recorded.read_text()

    same = runtime.cli("up", "--scheduler-config", str(runtime.work_dir / "scheduler.yaml"))
    assert same.returncode == 0 and "already running" in same.stdout, same.stdout + same.stderr
    other = runtime.work_dir / "other.yaml"
    other.write_text(HEAD + "queueingStrategy: backfill\n")
    refused = runtime.cli("up", "--scheduler-config", str(other))
    assert refused.returncode == 1
    assert "runs with another scheduler configuration, the one in" in refused.stderr, refused.stderr
    assert "run `phalanx down`, then `phalanx up --scheduler-config` again" in refused.stderr
    assert "Traceback" not in refused.stderr
    bad = runtime.work_dir / "bad.yaml"
    bad.write_text(HEAD + "queueingStrategy: fifo\n")
    wrong = runtime.cli("up", "--scheduler-config", str(bad))
    assert wrong.returncode == 2 and "queueingStrategy: must be one of" in wrong.stderr, wrong.stderr

    # Stopped and started again without the flag, the control plane keeps the recorded configuration.
    runtime.cli("down", check=True)
    runtime.cli("up", "--inventory", str(INVENTORY), check=True)
    assert runtime.cli("up", "--scheduler-config", str(other)).returncode == 1
    assert "strict-fifo" in recorded.read_text()
