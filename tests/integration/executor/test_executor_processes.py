"""The local executor with real processes: exit codes, environment, logs, CPU pinning, signals, restarts."""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from phalanx.adapters.executor import (
    LaunchError,
    LocalExecutor,
    ProcessHandle,
    ProcessState,
    group_members,
    read_affinity,
    read_start_ticks,
)

pytestmark = pytest.mark.integration

# Blocks until the test creates the file named by $RELEASE, then exits with $CODE.
BLOCK = (
    "import os, sys, time\n"
    "while not os.path.exists(os.environ['RELEASE']):\n"
    "    time.sleep(0.01)\n"
    "sys.exit(int(os.environ.get('CODE', '0')))\n"
)

TWO_CPUS = pytest.mark.skipif(
    not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1 in this process's affinity"
)


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def child_pid(handle: ProcessHandle, wait_until: Any) -> int:
    """The command's pid, from the ``started`` file the shim writes."""
    started = handle.run_dir / "started"
    wait_until(started.exists, message="the started file")
    return int(started.read_text())


def read_when_present(path: Path, wait_until: Any) -> str:
    wait_until(path.exists, message=str(path.name))
    return path.read_text()


# -- exit codes ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("pass", 0),
        ("import sys; sys.exit(3)", 3),
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", 128 + signal.SIGTERM),
        ("import os, signal; os.kill(os.getpid(), signal.SIGUSR1)", 128 + signal.SIGUSR1),
    ],
    ids=["zero", "three", "sigterm", "sigusr1"],
)
def test_exit_code_is_propagated(replicas: Any, code: str, expected: int) -> None:
    handle = replicas.run(code)

    assert replicas.finish(handle) == expected
    assert replicas.executor.poll(handle) == ProcessState(running=False, exit_code=expected, started=True)
    assert (handle.run_dir / "exit_code").read_text().strip() == str(expected)


def test_launch_returns_before_the_command_finishes(replicas: Any) -> None:
    handle = replicas.run(BLOCK)

    state = replicas.executor.poll(handle)
    assert state.running and state.exit_code is None

    replicas.release(handle)
    assert replicas.finish(handle) == 0


def test_missing_command_exits_127_and_says_why(replicas: Any) -> None:
    spec = replicas.spec("")
    spec.command = ["/nonexistent/phalanx-test-program", "--flag"]
    handle = replicas.launch(spec)

    assert replicas.finish(handle) == 127
    assert not replicas.executor.poll(handle).started
    assert "cannot start '/nonexistent/phalanx-test-program'" in handle.log_path.read_text()


# -- environment, working directory, files, logs -------------------------------------------------------------


def test_env_is_exactly_what_the_spec_says(replicas: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHALANX_CONTROL_PLANE_SECRET", "must-not-leak")
    code = "import json, os; print(json.dumps(dict(os.environ)), flush=True)"
    handle = replicas.run(code, env={"RANK": "3", "WORLD_SIZE": "8", "WITH SPACE": "a b=c"})

    assert replicas.finish(handle) == 0
    env = json.loads(handle.log_path.read_text())
    assert env["RANK"] == "3" and env["WORLD_SIZE"] == "8" and env["WITH SPACE"] == "a b=c"
    assert "PHALANX_CONTROL_PLANE_SECRET" not in env


def test_working_dir_and_files(replicas: Any, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    code = (
        "import os, sys\n"
        "print(os.getcwd())\n"
        "print(open(os.path.join(sys.argv[1], 'hostfile')).read(), end='')\n"
        "print(open(os.path.join(sys.argv[1], 'conf', 'tf.json')).read())\n"
    )
    spec = replicas.spec(code, working_dir=work, files={"hostfile": "w0 slots=1\n", "conf/tf.json": "{}"})
    spec.command.append(str(spec.run_dir))
    handle = replicas.launch(spec)

    assert replicas.finish(handle) == 0
    assert handle.log_path.read_text().splitlines() == [str(work), "w0 slots=1", "{}"]


@pytest.mark.parametrize("path", ["../escape", "/etc/passwd", ""])
def test_files_must_stay_inside_the_run_dir(replicas: Any, path: str) -> None:
    with pytest.raises(LaunchError, match="relative path inside the run directory"):
        replicas.executor.launch(replicas.spec("pass", files={path: "x"}))


def test_log_captures_stdout_and_stderr(replicas: Any) -> None:
    code = "import sys\nprint('to stdout', flush=True)\nprint('to stderr', file=sys.stderr, flush=True)\n"
    handle = replicas.run(code)

    assert replicas.finish(handle) == 0
    assert handle.log_path == handle.run_dir / "replica.log"
    assert handle.log_path.read_text().splitlines() == ["to stdout", "to stderr"]


def test_relaunch_into_the_same_run_dir_ignores_the_previous_exit(replicas: Any) -> None:
    spec = replicas.spec(BLOCK)
    spec.run_dir.mkdir(parents=True)
    (spec.run_dir / "exit_code").write_text("5\n")
    (spec.run_dir / "started").write_text("1\n")

    handle = replicas.launch(spec)

    assert replicas.executor.poll(handle).running
    replicas.release(handle)
    assert replicas.finish(handle) == 0


def test_the_command_inherits_no_descriptor_but_stdin_stdout_and_stderr(replicas: Any) -> None:
    # An inheritable descriptor of the launching process reaches the shim, but never the command.
    read_end, write_end = os.pipe()
    os.set_inheritable(read_end, True)
    try:
        handle = replicas.run("import os; print(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))")
    finally:
        os.close(read_end)
        os.close(write_end)

    assert replicas.finish(handle) == 0
    # The fourth is the descriptor listdir itself opened.
    assert json.loads(handle.log_path.read_text()) == [0, 1, 2, 3]


def test_a_bare_command_is_looked_up_in_the_commands_own_path(replicas: Any, tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    program = tools / "phalanx-test-tool"
    program.write_text("#!/bin/sh\necho tool ran with $1\n")
    program.chmod(0o755)
    spec = replicas.spec("", env={"PATH": f"{tools}:/usr/bin:/bin"})
    spec.command = ["phalanx-test-tool", "x"]

    handle = replicas.launch(spec)

    assert replicas.finish(handle) == 0
    assert handle.log_path.read_text() == "tool ran with x\n"


def test_a_found_program_that_is_not_executable_exits_126(replicas: Any, tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "phalanx-test-tool").write_text("#!/bin/sh\n")
    spec = replicas.spec("", env={"PATH": str(tools)})
    spec.command = ["phalanx-test-tool"]

    handle = replicas.launch(spec)

    assert replicas.finish(handle) == 126
    assert "cannot start 'phalanx-test-tool'" in handle.log_path.read_text()


def test_empty_command_is_refused(replicas: Any) -> None:
    spec = replicas.spec("pass")
    spec.command = []
    with pytest.raises(LaunchError, match="command must not be empty"):
        replicas.executor.launch(spec)


# -- CPU affinity --------------------------------------------------------------------------------------------


@TWO_CPUS
def test_child_is_pinned_to_the_requested_cpus(replicas: Any, wait_until: Any) -> None:
    handle = replicas.run(BLOCK, cpus=[1])

    assert read_affinity(child_pid(handle, wait_until)) == {1}
    assert read_affinity(handle.pid) == {1}
    replicas.release(handle)
    assert replicas.finish(handle) == 0


@TWO_CPUS
def test_two_replicas_pinned_apart_do_not_overlap(replicas: Any, wait_until: Any) -> None:
    first = replicas.run(BLOCK, cpus=[0])
    second = replicas.run(BLOCK, cpus=[1])

    first_cpus = read_affinity(child_pid(first, wait_until))
    second_cpus = read_affinity(child_pid(second, wait_until))

    assert first_cpus == {0}
    assert second_cpus == {1}
    assert not first_cpus & second_cpus
    for handle in (first, second):
        replicas.release(handle)
        assert replicas.finish(handle) == 0


def test_unpinned_replica_keeps_our_affinity(replicas: Any, wait_until: Any) -> None:
    handle = replicas.run(BLOCK)

    assert read_affinity(child_pid(handle, wait_until)) == os.sched_getaffinity(0)
    replicas.release(handle)
    replicas.finish(handle)


def test_cpus_we_cannot_use_are_refused(replicas: Any) -> None:
    with pytest.raises(LaunchError, match=r"CPUs \[4095\] are not available"):
        replicas.executor.launch(replicas.spec("pass", cpus=[0, 4095]))


@TWO_CPUS
def test_set_affinity_repins_every_thread_of_every_process(replicas: Any, wait_until: Any) -> None:
    code = (
        "import os, subprocess, sys, threading, time\n"
        "threading.Thread(target=time.sleep, args=(300,), daemon=True).start()\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "with open('grandchild.tmp', 'w') as f: f.write(str(child.pid))\n"
        "os.replace('grandchild.tmp', 'grandchild')\n"
        "while not os.path.exists(os.environ['RELEASE']): time.sleep(0.01)\n"
        "child.kill()\n"
    )
    spec = replicas.spec(code, cpus=[1])
    spec.working_dir = spec.run_dir
    handle = replicas.launch(spec)
    grandchild = int(read_when_present(handle.run_dir / "grandchild", wait_until))
    main = child_pid(handle, wait_until)
    assert read_affinity(grandchild) == {1}

    replicas.executor.set_affinity(handle, [0])

    members = group_members(handle.pid)
    assert {handle.pid, main, grandchild} <= set(members)
    threads = [int(tid) for pid in members for tid in os.listdir(f"/proc/{pid}/task")]
    assert len(threads) > len(members)  # the main command has a second thread
    assert all(os.sched_getaffinity(tid) == {0} for tid in threads)
    replicas.release(handle)
    assert replicas.finish(handle) == 0


# -- termination ---------------------------------------------------------------------------------------------

SPAWN_GRANDCHILD_AND_WAIT = (
    "import os, subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
    "with open('grandchild.tmp', 'w') as f: f.write(str(child.pid))\n"
    "os.replace('grandchild.tmp', 'grandchild')\n"
    "time.sleep(300)\n"
)


def test_terminate_stops_the_whole_group_including_grandchildren(replicas: Any, wait_until: Any) -> None:
    spec = replicas.spec(SPAWN_GRANDCHILD_AND_WAIT)
    spec.working_dir = spec.run_dir
    handle = replicas.launch(spec)
    grandchild = int(read_when_present(handle.run_dir / "grandchild", wait_until))
    assert alive(grandchild)
    assert grandchild in group_members(handle.pid)

    replicas.executor.terminate(handle)

    wait_until(lambda: replicas.executor.is_gone(handle), message="the group to be gone")
    assert not alive(grandchild)
    assert replicas.executor.poll(handle).exit_code == 128 + signal.SIGTERM


def test_leftover_processes_are_killed_when_the_command_exits(replicas: Any, wait_until: Any) -> None:
    code = (
        "import os, subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "with open('grandchild.tmp', 'w') as f: f.write(str(child.pid))\n"
        "os.replace('grandchild.tmp', 'grandchild')\n"
    )
    spec = replicas.spec(code)
    spec.working_dir = spec.run_dir
    handle = replicas.launch(spec)

    assert replicas.finish(handle) == 0
    grandchild = int((handle.run_dir / "grandchild").read_text())
    # The exit code is written only after the group was swept.
    assert not alive(grandchild)
    wait_until(lambda: replicas.executor.is_gone(handle), message="the shim to exit")


SIGNAL_COUNTER = (
    "import os, signal, sys, time\n"
    "received = []\n"
    "signal.signal(signal.SIGTERM, lambda n, f: received.append(n))\n"
    "open('ready', 'w').close()\n"
    "while not received: time.sleep(0.01)\n"
    "time.sleep(0.5)  # a duplicate signal would arrive within this window\n"
    "sys.exit(len(received))\n"
)


def test_group_terminate_delivers_sigterm_to_the_command_once(replicas: Any, wait_until: Any) -> None:
    spec = replicas.spec(SIGNAL_COUNTER)
    spec.working_dir = spec.run_dir
    handle = replicas.launch(spec)
    wait_until((handle.run_dir / "ready").exists, message="the signal handler")

    replicas.executor.terminate(handle)

    assert replicas.finish(handle) == 1


def test_shim_forwards_a_sigterm_sent_only_to_it(replicas: Any, wait_until: Any) -> None:
    spec = replicas.spec(SIGNAL_COUNTER)
    spec.working_dir = spec.run_dir
    handle = replicas.launch(spec)
    wait_until((handle.run_dir / "ready").exists, message="the signal handler")

    os.kill(handle.pid, signal.SIGTERM)

    assert replicas.finish(handle) == 1


def test_shim_forwards_sigint(replicas: Any, wait_until: Any) -> None:
    code = "import time\nopen('ready', 'w').close()\ntime.sleep(300)\n"
    spec = replicas.spec(code)
    spec.working_dir = spec.run_dir
    handle = replicas.launch(spec)
    wait_until((handle.run_dir / "ready").exists, message="the command to start")

    os.kill(handle.pid, signal.SIGINT)

    # Python dies of SIGINT after an unhandled KeyboardInterrupt: 128 + 2, as a shell reports it. A CI run once
    # read 137 (the grace period's SIGKILL) and showed nothing more: the log says what the shim and child did.
    code = replicas.finish(handle)
    assert code == 128 + signal.SIGINT, handle.log_path.read_text()


def test_a_command_ignoring_sigterm_is_killed_after_the_grace_period(replicas: Any, wait_until: Any) -> None:
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "open('ready', 'w').close()\n"
        "time.sleep(300)\n"
    )
    spec = replicas.spec(code)
    spec.working_dir = spec.run_dir
    handle = replicas.launch(spec)
    wait_until((handle.run_dir / "ready").exists, message="the command to ignore SIGTERM")

    replicas.executor.terminate(handle, grace_seconds=0.3)

    # The shim itself escalated (no control plane needed), so it lived to write the exit code.
    assert replicas.finish(handle) == 137
    assert (handle.run_dir / "exit_code").read_text().strip() == "137"
    assert "grace period over" in handle.log_path.read_text()


def test_kill_of_the_group_without_exit_file_reads_as_unknown(replicas: Any, wait_until: Any) -> None:
    handle = replicas.run(BLOCK)
    child = child_pid(handle, wait_until)

    os.killpg(handle.pid, signal.SIGKILL)  # as `kill -9 -<pgid>` would

    wait_until(lambda: replicas.executor.is_gone(handle), message="the group to be gone")
    assert not alive(child)
    assert not (handle.run_dir / "exit_code").exists()
    # No record: the exit status is unknown (None), never a guessed 137.
    assert replicas.executor.poll(handle) == ProcessState(running=False, exit_code=None, started=True)


def test_executor_kill(replicas: Any, wait_until: Any) -> None:
    handle = replicas.run(BLOCK)
    child_pid(handle, wait_until)

    replicas.executor.kill(handle)

    wait_until(lambda: replicas.executor.is_gone(handle), message="the group to be gone")
    assert replicas.executor.poll(handle) == ProcessState(running=False, exit_code=None, started=True)


def test_the_exit_descriptor_becomes_readable_once_the_exit_code_is_there(replicas: Any) -> None:
    handle = replicas.run(BLOCK, env={"CODE": "5"})
    fd = replicas.executor.exit_fd(handle)
    if fd is None:
        pytest.skip("no pidfd on this kernel")
    try:
        assert select.select([fd], [], [], 0)[0] == []
        replicas.release(handle)

        assert select.select([fd], [], [], 30)[0] == [fd]
        assert replicas.executor.poll(handle) == ProcessState(running=False, exit_code=5, started=True)
    finally:
        os.close(fd)


def test_no_exit_descriptor_for_a_process_that_is_not_the_shim(replicas: Any, tmp_path: Path) -> None:
    real = replicas.run(BLOCK)
    impostor = ProcessHandle(pid=real.pid, start_ticks=real.start_ticks + 1, run_dir=tmp_path)

    assert replicas.executor.exit_fd(impostor) is None
    replicas.release(real)
    replicas.finish(real)


def test_finished_shims_are_reaped(replicas: Any, wait_until: Any) -> None:
    handle = replicas.run("pass")
    replicas.finish(handle)

    def reaped() -> bool:
        replicas.executor.poll(handle)
        # Reaped: the pid is gone from /proc instead of lingering as our zombie.
        return bool(read_start_ticks(handle.pid) != handle.start_ticks)

    wait_until(reaped, message="polling to reap the exited shim")


# -- surviving the control plane -----------------------------------------------------------------------------


def test_new_executor_instance_adopts_a_running_replica(replicas: Any, tmp_path: Path, wait_until: Any) -> None:
    handle = replicas.run(BLOCK, env={"CODE": "4"})
    child_pid(handle, wait_until)
    stored = (handle.pid, handle.start_ticks, str(handle.run_dir))

    restarted = LocalExecutor(tmp_path / "executor")
    rebuilt = ProcessHandle(pid=stored[0], start_ticks=stored[1], run_dir=Path(stored[2]))

    assert restarted.poll(rebuilt) == ProcessState(running=True, exit_code=None, started=True)
    replicas.release(rebuilt)
    replicas.executor = restarted
    assert replicas.finish(rebuilt) == 4


LAUNCHER = """
import json, sys
from pathlib import Path
from phalanx.adapters.executor import LaunchSpec, LocalExecutor
root, spec = sys.argv[1], json.loads(sys.argv[2])
executor = LocalExecutor(Path(root))
handle = executor.launch(LaunchSpec(
    name=spec["name"], command=spec["command"], env=spec["env"], working_dir=Path(spec["working_dir"]),
    run_dir=Path(spec["run_dir"]), cpus=spec["cpus"],
))
print(json.dumps({"pid": handle.pid, "start_ticks": handle.start_ticks, "run_dir": str(handle.run_dir)}))
"""


def test_replica_outlives_the_control_plane_that_launched_it(replicas: Any, tmp_path: Path, wait_until: Any) -> None:
    spec = replicas.spec(BLOCK, env={"CODE": "6"})
    payload = {
        "name": spec.name,
        "command": spec.command,
        "env": spec.env,
        "working_dir": str(spec.working_dir),
        "run_dir": str(spec.run_dir),
        "cpus": sorted(os.sched_getaffinity(0))[:1],
    }
    # The "control plane" is a separate process that launches and exits; its pipes must not be held open.
    result = subprocess.run(
        [sys.executable, "-c", LAUNCHER, str(tmp_path / "executor"), json.dumps(payload)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    stored = json.loads(result.stdout)
    handle = ProcessHandle(pid=stored["pid"], start_ticks=stored["start_ticks"], run_dir=Path(stored["run_dir"]))
    replicas.adopt(handle)

    restarted = LocalExecutor(tmp_path / "executor")
    assert restarted.poll(handle).running
    assert restarted.owns(handle)
    assert read_affinity(child_pid(handle, wait_until)) == set(payload["cpus"])

    replicas.release(handle)
    replicas.executor = restarted
    assert replicas.finish(handle) == 6
    wait_until(lambda: restarted.is_gone(handle), message="the orphaned shim to exit")


def test_pid_reuse_guard(replicas: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = replicas.run(BLOCK)
    impostor = ProcessHandle(pid=real.pid, start_ticks=real.start_ticks + 1, run_dir=tmp_path / "other")
    impostor.run_dir.mkdir()
    executor = replicas.executor
    signals: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: signals.append((pgid, sig)))

    assert not executor.owns(impostor)
    assert executor.poll(impostor) == ProcessState(running=False, exit_code=None, started=False)
    assert executor.is_gone(impostor)
    executor.terminate(impostor)
    executor.kill(impostor)
    executor.set_affinity(impostor, sorted(os.sched_getaffinity(0))[:1])

    assert signals == []
    assert not (impostor.run_dir / "terminate").exists()
    monkeypatch.undo()
    assert executor.poll(real).running
    replicas.release(real)
    assert replicas.finish(real) == 0


def test_unknown_pid_is_gone(executor: LocalExecutor, tmp_path: Path) -> None:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    unused = next(pid for pid in range(pid_max - 1, 1, -1) if not Path(f"/proc/{pid}").exists())
    handle = ProcessHandle(pid=unused, start_ticks=1, run_dir=tmp_path)

    assert executor.is_gone(handle)
    assert executor.poll(handle) == ProcessState(running=False, exit_code=None, started=False)


def test_an_exit_code_that_cannot_be_written_is_kept_in_a_marker_and_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk: writing ``exit_code`` fails mid-way; no half file is left, and the code is still read."""
    from phalanx.adapters.executor import read_exit_code, shim

    real_write = os.write

    def full_disk(descriptor: int, data: bytes) -> int:
        if os.readlink(f"/proc/self/fd/{descriptor}").endswith(f"exit_code.tmp.{os.getpid()}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(descriptor, data)

    monkeypatch.setattr(shim.os, "write", full_disk)
    shim.record_exit_code(str(tmp_path), 0)
    monkeypatch.undo()

    assert sorted(p.name for p in tmp_path.iterdir()) == ["exit_code=0"]
    assert read_exit_code(tmp_path) == 0


def test_an_exit_code_whose_run_directory_is_gone_is_given_up_at_once(tmp_path: Path) -> None:
    """Its state directory was removed: no one will read the code, so the shim does not retry for ever."""
    from phalanx.adapters.executor import shim

    notes: list[str] = []
    shim.record_exit_code(str(tmp_path / "removed"), 0, notes.append)  # returns: an endless retry would hang here
    assert notes == [] and not (tmp_path / "removed").exists()
