"""The `phalanx` CLI end to end: every verb through the real command, against a real control plane, with the
exit codes and messages a user (or a script) relies on."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import yaml

from conftest import (
    Runtime,
    generic_job,
    parse_table,
    processes_mentioning,
    program_role,
    typed_job,
    wait_until,
)
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.nodes import Node
from phalanx.model.replicas import Replica

BUILTIN_TYPES = {"generic", "jax", "mpi", "paddle", "pytorch", "tensorflow", "xgboost"}
SECTIONS = ("Roles", "Placement", "Replicas", "Conditions", "Events")


def flat(text: str) -> str:
    """Text with every run of whitespace made one space (rich folds long lines)."""
    return " ".join(text.split())


def table(text: str, first_column: str = "NAME") -> list[dict[str, str]]:
    return parse_table(text, first_column, stop_at=SECTIONS)


def section(text: str, title: str) -> str:
    """One titled table of `describe`, up to the next title."""
    lines = text.splitlines()
    begin = next(i for i, line in enumerate(lines) if line.strip() == title)
    end = next((i for i in range(begin + 1, len(lines)) if lines[i].strip() in SECTIONS), len(lines))
    return "\n".join(line.removeprefix(" ") for line in lines[begin + 1 : end])


def the_node(runtime: Runtime) -> Node:
    """This machine's node, once the control plane has registered it (it leads first, then registers)."""
    with runtime.client() as client:
        nodes = wait_until(lambda: client.store.list(Node), message="the control plane to register this machine")
    assert len(nodes) == 1
    return nodes[0]


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def submitted(runtime: Runtime, name: str) -> None:
    """Wait until a job submitted by another process (`phalanx run` in the background) is in the store."""
    with runtime.client() as client:
        wait_until(lambda: client.store.try_get(TrainingJob, "default", name), message=f"job {name} to be submitted")


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_get_jobs_as_a_table_and_as_json_or_yaml_that_round_trips(runtime: Runtime, tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    runtime.start_control_plane()
    runtime.submit(generic_job("listed", replicas=2, args=["--hold", str(hold)]))
    runtime.wait_phase("listed", {Phase.RUNNING})

    rows = table(runtime.cli("get", "jobs", check=True).stdout)
    assert [(r["NAME"], r["TYPE"], r["PHASE"], r["REPLICAS"]) for r in rows] == [
        ("listed", "generic", "Running", "2/2")
    ]

    as_json = json.loads(runtime.cli("get", "jobs", "listed", "-o", "json", check=True).stdout)
    as_yaml = yaml.safe_load(runtime.cli("get", "job", "listed", "-o", "yaml", check=True).stdout)
    with runtime.client() as client:
        stored = client.get("listed")
    for data in (as_json, as_yaml):
        assert data["apiVersion"] == "phalanx.dev/v1alpha1"
        assert data["kind"] == "TrainingJob"
        assert data["metadata"]["name"] == "listed"
        assert data["spec"]["replicas"]["worker"]["count"] == 2
        assert data["status"]["phase"] == "Running"
        assert TrainingJob.model_validate(data) == stored  # nothing lost or changed on the way out and back
    hold.write_text("go")
    runtime.wait_phase("listed", {Phase.SUCCEEDED})


def test_get_nodes_shows_this_machine_and_get_jobtypes_the_builtins(runtime: Runtime, tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    cpus = len(os.sched_getaffinity(0))
    runtime.start_control_plane()
    runtime.submit(generic_job("one-core", cpu=1, args=["--hold", str(hold)]))
    runtime.wait_phase("one-core", {Phase.RUNNING})
    node = the_node(runtime)

    [row] = table(runtime.cli("get", "nodes", check=True).stdout)
    assert row["NAME"] == node.metadata.name
    assert row["CPUS"] == str(cpus)
    assert row["GPUS"] == str(len(node.status.gpus))
    assert row["CPU ALLOC"] == f"1/{cpus}"  # the running job's exclusive core
    assert row["SOURCE"] in ("sysfs", "nvml")

    rows = table(runtime.cli("get", "jobtypes", check=True).stdout)
    assert {r["NAME"] for r in rows} == BUILTIN_TYPES
    roles = {r["NAME"]: r["ROLES"] for r in rows}
    assert roles["mpi"] == "launcher, worker"
    assert roles["pytorch"] == "master, worker"
    hold.write_text("go")
    runtime.wait_phase("one-core", {Phase.SUCCEEDED})


def test_describe_shows_placement_conditions_and_events(runtime: Runtime, tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    runtime.start_control_plane()
    runtime.submit(generic_job("described", cpu=1, args=["--hold", str(hold)]))
    job = runtime.wait_phase("described", {Phase.RUNNING})
    [cpu] = job.status.placements["described-worker-0"].cpus

    text = runtime.cli("describe", "job", "described", check=True).stdout
    assert "Phase:       Running" in text
    [placed] = table(section(text, "Placement"), "REPLICA")
    assert placed == {
        "REPLICA": "described-worker-0",
        "NODE": the_node(runtime).metadata.name,
        "EXCLUSIVE CPUS": str(cpu),
        "GPUS": "-",
    }
    conditions = {r["TYPE"]: r for r in table(section(text, "Conditions"), "TYPE")}
    assert list(conditions) == ["Queued", "Admitted", "Downloading", "Running"]
    assert conditions["Running"]["STATUS"] == "True"
    assert f"CPUs {cpu}" in conditions["Admitted"]["MESSAGE"]
    events = [r["REASON"] for r in table(section(text, "Events"), "TYPE")]
    assert events == ["Accepted", "Scheduled", "Staging", "Started"]
    [replica] = table(section(text, "Replicas"), "NAME")
    assert (replica["NAME"], replica["PHASE"]) == ("described-worker-0", "Running")
    hold.write_text("go")
    runtime.wait_phase("described", {Phase.SUCCEEDED})


def test_explain_says_with_numbers_why_a_job_that_cannot_fit_stays_queued(runtime: Runtime, tmp_path: Path) -> None:
    record = tmp_path / "starts.txt"
    runtime.start_control_plane()
    node = the_node(runtime)
    cpus, gpus = len(node.status.cpus), len(node.status.gpus)
    runtime.submit(generic_job("too-wide", replicas=cpus + 1, cpu=1, args=["--record", str(record)]))
    gpu_job = generic_job("too-many-gpus", args=["--record", str(record)])
    gpu_job["spec"]["replicas"]["worker"]["template"]["resources"]["gpu"] = gpus + 1
    runtime.submit(gpu_job)
    for name in ("too-wide", "too-many-gpus"):
        runtime.wait_waiting(name)
    # A job that fits runs to the end meanwhile: the scheduler has had cycles enough to start the others.
    runtime.submit(generic_job("fits"))
    assert runtime.wait_phase("fits", {Phase.SUCCEEDED, Phase.FAILED}).status.phase == Phase.SUCCEEDED
    with runtime.client() as client:
        # While its replica still exists it holds room; once it is gone the reasons speak of the whole machine.
        wait_until(lambda: client.store.list(Replica) == [], message="the finished job's replica to go")
        wait_until(lambda: f"only {cpus} fit" in client.get("too-wide").status.message, message="the reason to settle")

    wide = flat(runtime.cli("explain", "too-wide", check=True).stdout)
    assert wide.startswith("Queued: ")
    assert f"needs {cpus + 1} replicas ({cpus + 1} CPUs exclusive" in wide, wide
    assert f"only {cpus} fit" in wide, wide
    assert f"has {cpus} CPU{'' if cpus == 1 else 's'} free where {cpus + 1} are needed" in wide, wide
    many = flat(runtime.cli("explain", "too-many-gpus", check=True).stdout)
    if gpus:
        assert f"a replica needs {gpus + 1} GPUs" in many and f"the largest has {gpus} GPU" in many, many
    else:
        assert many == "Queued: needs a GPU; no schedulable node has a healthy one", many

    with runtime.client() as client:
        for name in ("too-wide", "too-many-gpus"):
            assert client.get(name).status.phase == Phase.QUEUED
        assert [r.spec.job_name for r in client.store.list(Replica)] == []
    assert lines_of(record) == []  # fits did not record; neither did any replica of the two that wait


def test_logs_of_one_replica_and_of_all(runtime: Runtime) -> None:
    runtime.start_control_plane()
    runtime.submit(generic_job("chatty", replicas=2))
    runtime.wait_phase("chatty", {Phase.SUCCEEDED})

    one = runtime.cli("logs", "chatty", "--replica", "worker-0", check=True).stdout.splitlines()
    assert len(one) == 2 and one[0].startswith("worker-0 started, pid ") and one[1] == "worker-0 done", one
    everything = runtime.cli("logs", "chatty", check=True).stdout
    for me in ("worker-0", "worker-1"):
        assert f"{me} | {me} started" in everything and f"{me} | {me} done" in everything, everything
    missing = runtime.cli("logs", "chatty", "--replica", "worker-7")
    assert missing.returncode == 1
    # worker-7 never will have logs (the job has two workers): the sentence says so rather than "not yet".
    assert "job chatty has no replica 'worker-7'; its replicas: worker-0, worker-1" in flat(missing.stderr)


def test_logs_name_a_replica_that_printed_nothing_while_it_runs_and_after_it_ended(
    runtime: Runtime, tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    silent = [
        "python",
        "-c",
        "import pathlib, sys, time\nwhile not pathlib.Path(sys.argv[1]).exists(): time.sleep(0.05)",
    ]
    quiet = {"count": 1, "template": {"command": [*silent, str(hold)], "resources": {"cpu": "100m", "memory": "64Mi"}}}
    runtime.start_control_plane()
    runtime.submit(generic_job("hushed", args=["--hold", str(hold)], extra_roles={"quiet": quiet}))
    runtime.wait_phase("hushed", {Phase.RUNNING})
    running = wait_until(
        lambda: (
            (result := runtime.cli("logs", "hushed", check=True)) and "worker-0 started" in result.stdout and result
        ),
        message="worker-0's first line",
    )
    assert "quiet-0" not in running.stdout, "stdout stays the replicas' own output"
    assert "note: quiet-0 has printed nothing yet" in flat(running.stderr), running.stderr

    hold.write_text("go")
    assert runtime.wait_phase("hushed", {Phase.SUCCEEDED, Phase.FAILED}).status.phase == Phase.SUCCEEDED
    ended = runtime.cli("logs", "hushed", check=True)
    assert "worker-0 | worker-0 done" in ended.stdout and "quiet-0" not in ended.stdout, ended.stdout
    assert "note: quiet-0 printed nothing" in flat(ended.stderr) and "yet" not in ended.stderr, ended.stderr
    one = runtime.cli("logs", "hushed", "--replica", "quiet-0", check=True)
    assert (one.stdout, flat(one.stderr)) == ("", "note: quiet-0 printed nothing")


def test_logs_follow_prints_as_replicas_write_and_returns_when_the_job_ends(runtime: Runtime, tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    runtime.start_control_plane()
    runtime.submit(generic_job("followed", replicas=2, args=["--hold", str(hold)]))
    runtime.wait_phase("followed", {Phase.RUNNING})
    all_out, one_out = tmp_path / "all.txt", tmp_path / "one.txt"
    follow_all = runtime.cli_background("logs", "-f", "followed", output=all_out)
    follow_one = runtime.cli_background("logs", "-f", "followed", "--replica", "worker-1", output=one_out)
    wait_until(
        lambda: "worker-0 started" in all_out.read_text() and "worker-1 started" in all_out.read_text(),
        message="`logs -f` to print both replicas' first lines",
    )
    wait_until(lambda: "worker-1 started" in one_out.read_text(), message="`logs -f --replica` to print")
    assert follow_all.poll() is None and follow_one.poll() is None  # still following a running job

    hold.write_text("go")
    assert follow_all.wait(30) == 0, all_out.read_text()
    assert follow_one.wait(30) == 0, one_out.read_text()
    assert runtime.wait_phase("followed", {Phase.SUCCEEDED, Phase.FAILED}).status.phase == Phase.SUCCEEDED
    text = all_out.read_text()
    assert "worker-0 | worker-0 done" in text and "worker-1 | worker-1 done" in text, text
    one = one_out.read_text()
    assert "worker-1 done" in one and "worker-0" not in one, one


def test_logs_follow_names_a_replica_that_printed_nothing_once_the_job_ends(runtime: Runtime, tmp_path: Path) -> None:
    """`logs -f` must not leave out a silent replica either: when the job ends, a note on stderr names it."""
    hold = tmp_path / "hold"
    silent = [
        "python",
        "-c",
        "import pathlib, sys, time\nwhile not pathlib.Path(sys.argv[1]).exists(): time.sleep(0.05)",
    ]
    quiet = {"count": 1, "template": {"command": [*silent, str(hold)], "resources": {"cpu": "100m", "memory": "64Mi"}}}
    runtime.start_control_plane()
    runtime.submit(generic_job("hushed", args=["--hold", str(hold)], extra_roles={"quiet": quiet}))
    runtime.wait_phase("hushed", {Phase.RUNNING})
    all_out, one_out = tmp_path / "all.txt", tmp_path / "one.txt"
    follow_all = runtime.cli_background("logs", "-f", "hushed", output=all_out)
    follow_one = runtime.cli_background("logs", "-f", "hushed", "--replica", "quiet-0", output=one_out)
    wait_until(lambda: "worker-0 started" in all_out.read_text(), message="`logs -f` to print worker-0's first line")

    hold.write_text("go")
    assert follow_all.wait(30) == 0, all_out.read_text()
    assert follow_one.wait(30) == 0, one_out.read_text()
    text = all_out.read_text()
    assert "worker-0 | worker-0 done" in text and "note: quiet-0 printed nothing" in flat(text), text
    assert "note: worker-0" not in text, text
    assert flat(one_out.read_text()) == "note: quiet-0 printed nothing"


def test_logs_of_a_job_no_replica_of_which_started_says_so(runtime: Runtime) -> None:
    """A Queued job has no logs: `logs` must say why it prints nothing, and name a replica the job lacks as such."""
    runtime.start_control_plane()
    runtime.submit(generic_job("huge", extra_roles={"big": program_role(cpu=4096, memory="64Mi")}))
    runtime.wait_waiting("huge")
    empty = runtime.cli("logs", "huge")
    assert empty.returncode == 0 and empty.stdout == "", empty.stdout + empty.stderr
    assert flat(empty.stderr) == "note: no replica of job huge has started yet (it is Queued)", empty.stderr
    unknown = runtime.cli("logs", "huge", "--replica", "nope-0")
    assert unknown.returncode == 1
    assert "job huge has no replica 'nope-0'; its replicas: worker-0, big-0" in flat(unknown.stderr), unknown.stderr


def test_submit_dry_run_prints_the_defaulted_spec_and_creates_nothing(runtime: Runtime) -> None:
    document = generic_job("sized", extra_roles={"helper": program_role(cpu="250m", memory=None)})
    del document["spec"]["replicas"]["worker"]["template"]["resources"]
    document["spec"]["size"] = "medium"
    document["spec"]["replicas"]["helper"]["template"]["size"] = "small"
    result = runtime.cli("submit", "--dry-run", str(runtime.write_job("sized", document)), check=True)

    printed = yaml.safe_load(result.stdout)
    assert (printed["kind"], printed["metadata"]["name"]) == ("TrainingJob", "sized")
    replicas = printed["spec"]["replicas"]
    # The role without resources gets the job's size (medium); the other keeps its own cpu and takes the rest
    # from its template's size (small).
    assert replicas["worker"]["template"]["resources"] == {"cpu": "2", "memory": "8Gi", "gpu": 0}
    assert replicas["helper"]["template"]["resources"] == {"cpu": "250m", "memory": "2Gi", "gpu": 0}
    assert printed["spec"]["runPolicy"]["restartPolicy"] == "Never"
    assert "created" not in result.stdout
    with runtime.client() as client:
        assert client.list() == []
    assert "No jobs in default." in runtime.cli("get", "jobs", check=True).stdout


def test_delete_of_a_running_job_stops_its_processes_and_removes_it(runtime: Runtime, tmp_path: Path) -> None:
    hold, record = tmp_path / "hold", tmp_path / "starts.txt"
    runtime.start_control_plane()
    runtime.submit(generic_job("doomed", replicas=2, args=["--hold", str(hold), "--record", str(record)]))
    runtime.wait_phase("doomed", {Phase.RUNNING})
    wait_until(lambda: len(lines_of(record)) == 2, message="both replicas to start")
    assert len(processes_mentioning(str(hold))) == 2

    result = runtime.cli("delete", "job", "doomed", check=True)
    assert "trainingjob/doomed deleted" in result.stdout
    with runtime.client() as client:
        wait_until(lambda: client.store.try_get(TrainingJob, "default", "doomed") is None, message="the job to go")
        assert [r for r in client.store.list(Replica) if r.spec.job_name == "doomed"] == []
    assert processes_mentioning(str(hold)) == []  # the replicas were stopped before the job was removed
    gone = runtime.cli("get", "jobs", "doomed")
    assert gone.returncode == 1 and "job default/doomed not found" in flat(gone.stderr)


def test_up_status_down_and_the_next_up_adopts_running_replicas(runtime: Runtime, tmp_path: Path) -> None:
    hold, record = tmp_path / "hold", tmp_path / "starts.txt"
    before = runtime.cli("status", check=True).stdout
    assert "control plane: not running" in before
    try:
        started = runtime.cli("up", check=True).stdout
        first = int(re.search(r"control plane started \(pid (\d+)\)", started).group(1))  # type: ignore[union-attr]
        again = runtime.cli("up", check=True).stdout
        assert f"control plane already running (pid {first})" in again
        assert f"control plane: running (pid {first}" in runtime.cli("status", check=True).stdout

        runtime.submit(generic_job("kept", replicas=2, args=["--hold", str(hold), "--record", str(record)]))
        runtime.wait_phase("kept", {Phase.RUNNING})
        wait_until(lambda: len(lines_of(record)) == 2, message="both replicas to start")
        pids = sorted(int(line.split()[2]) for line in lines_of(record))

        assert "control plane stopped" in runtime.cli("down", check=True).stdout
        status = runtime.cli("status", check=True).stdout
        assert "control plane: not running" in status and "jobs: 1 Running" in status
        wait_until(lambda: not alive(first), message=f"control plane {first} to exit")
        assert sorted(processes_mentioning(str(hold))) == pids  # the replicas live on without it

        started = runtime.cli("up", check=True).stdout
        second = int(re.search(r"control plane started \(pid (\d+)\)", started).group(1))  # type: ignore[union-attr]
        assert second != first
        hold.write_text("go")
        final = runtime.wait_phase("kept", {Phase.SUCCEEDED, Phase.FAILED})
        assert final.status.phase == Phase.SUCCEEDED, final.status.message
        assert final.status.restarts == 0
        assert len(lines_of(record)) == 2  # adopted, not started again
    finally:
        runtime.cli("down")
    assert "no control plane was running" in runtime.cli("down", check=True).stdout


def test_run_of_a_failing_job_exits_1_with_the_reason(runtime: Runtime) -> None:
    runtime.start_control_plane()
    path = runtime.write_job("broken", generic_job("broken", args=["--crash-always", "--exit-code", "4"]))
    result = runtime.cli("run", str(path), "--no-logs")
    assert result.returncode == 1, result.stdout + result.stderr
    output = flat(result.stdout)
    assert "control plane running" in output  # the one already running was reused
    assert "job broken Failed" in output
    assert "replica broken-worker-0 failed with exit code 4; restartPolicy is Never" in output, output
    # What the program said last, read from its log: most often the cause, which was only in the log before.
    assert "; its last output: worker-0 failing with exit code 4" in output, output


def test_run_of_a_job_halted_from_another_shell_exits_3(runtime: Runtime, tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    runtime.start_control_plane()
    path = runtime.write_job("paused", generic_job("paused", args=["--hold", str(hold)]))
    out = tmp_path / "run.txt"
    running = runtime.cli_background("run", str(path), output=out)
    submitted(runtime, "paused")
    runtime.wait_phase("paused", {Phase.RUNNING})
    halted = runtime.cli("halt", "paused", check=True)
    assert "trainingjob/paused Halted" in halted.stdout
    assert running.wait(30) == 3, out.read_text()
    assert "job paused Halted" in flat(out.read_text())
    assert processes_mentioning(str(hold)) == []


def test_unknown_job_names_exit_1_and_name_the_jobs_that_exist(runtime: Runtime) -> None:
    for name in ("alpha", "beta"):
        runtime.submit(generic_job(name))  # no control plane: they stay Pending, which is enough here
    known = "job default/nosuch not found; jobs in default: alpha, beta"
    for args in (
        ("get", "jobs", "nosuch"),
        ("describe", "job", "nosuch"),
        ("logs", "nosuch"),
        ("explain", "nosuch"),
        ("halt", "nosuch"),
        ("resume", "nosuch"),
        ("delete", "job", "nosuch"),
    ):
        result = runtime.cli(*args)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert f"error: {known}" in flat(result.stderr), (args, result.stderr)
        assert result.stdout == "", (args, result.stdout)
    empty = runtime.cli("describe", "job", "alpha", "-n", "team-b")
    assert empty.returncode == 1 and "job team-b/alpha not found; team-b has no jobs" in flat(empty.stderr)
    jobtype = runtime.cli("get", "jobtypes", "nosuch")
    assert jobtype.returncode == 1
    assert f"job type 'nosuch' not found; known: {', '.join(sorted(BUILTIN_TYPES))}" in flat(jobtype.stderr)
    wrong_kind = runtime.cli("describe", "pod", "alpha")
    assert wrong_kind.returncode == 2 and "use `phalanx describe job NAME`" in flat(wrong_kind.stderr)
    with runtime.client() as client:
        assert [j.metadata.name for j in client.list()] == ["alpha", "beta"]  # nothing was touched


def test_get_jobs_as_json_of_several_jobs_is_a_list_of_jobs(runtime: Runtime) -> None:
    runtime.submit(typed_job("ddp", "pytorch", {"master": program_role(), "worker": program_role(2)}))
    runtime.submit(generic_job("plain"))
    listed = json.loads(runtime.cli("get", "jobs", "-o", "json", check=True).stdout)
    assert listed["kind"] == "List"
    jobs = [TrainingJob.model_validate(item) for item in listed["items"]]
    assert [(j.metadata.name, j.spec.type, j.spec.total_replicas()) for j in jobs] == [
        ("ddp", "pytorch", 3),
        ("plain", "generic", 1),
    ]


def test_explain_of_a_pending_job_says_no_control_plane_runs_even_after_a_kill_9(runtime: Runtime) -> None:
    never_started = runtime.submit(generic_job("waiting-for-nobody"))
    hint = "Pending: no control plane is running; start one with `phalanx up`."
    assert flat(runtime.cli("explain", never_started, check=True).stdout) == hint
    # A control plane killed with -9 leaves its lease behind; a dead holder must not count as running.
    plane = runtime.start_control_plane()
    runtime.wait_phase(never_started, {Phase.SUCCEEDED})
    plane.kill9()
    assert "control plane: not running" in runtime.cli("status", check=True).stdout
    orphan = runtime.submit(generic_job("after-the-crash"))
    assert flat(runtime.cli("explain", orphan, check=True).stdout) == hint
