"""The per-replica supervisor, run as ``python -I -S shim.py <run_dir>``: standard library only, no phalanx.

One shim runs per replica, as the leader of a new session and process group that holds the replica's whole
process tree. It exists so that a replica outlives the control plane that launched it: everything the control
plane needs to learn later is left in files of ``<run_dir>``, not in the memory of a parent process.

Protocol (the executor in ``local.py`` is the other side):

- reads ``launch.json``: ``command``, ``env`` (the command's whole environment), ``working_dir``, ``cpus``,
  ``log``, ``cgroup_procs`` (files to write our pid to), ``grace_seconds``;
- joins the cgroups first (the executor has usually moved it in already), then pins CPUs: joining a v1 cpuset
  resets the affinity of the joining task, so the other order would lose the pinning;
- starts the command with stdout and stderr appended to the log, and writes ``started`` (the child's pid); then
  moves itself back to the launcher's cgroups: the command, and all it starts, stays in the replica's;
- on SIGTERM/SIGINT forwards the signal to the child, unless the executor already signalled the whole
  group (it leaves a ``terminate`` file first, so the child never gets the same signal twice), and SIGKILLs
  the child if it is still alive ``grace_seconds`` later, so termination completes with no control plane;
- when the child exits, SIGKILLs anything left in the group (as a container runtime does when PID 1 exits),
  notes an OOM kill (``oom_killed``), removes the cgroups, then writes ``exit_code``: the child's
  code, or 128+N when signal N killed it, as shells report it.

Files are written to a temporary name, flushed to disk and renamed, so a reader never sees half a number; a
write that fails removes its temporary file. The exit code must not be lost to a full disk: when ``exit_code``
cannot be written, the shim records it in the *name* of an empty file, ``exit_code=<N>``, which needs no data
block; when even that fails (no inodes left), it keeps the code and tries both again with backoff for as long as
it lives, so the replica reads as running rather than as ended with some code it did not have; unless the run
directory itself is gone (its state directory was removed), when there is no one left to read it. If the shim
itself is SIGKILLed there is no record at all, and the executor reports the exit status as unknown.

The shim records itself (``shim.pid``) before anything else, and starts the command only after that. If it
cannot (a full disk) or fails to read ``launch.json``, it removes ``shim.pid`` (a removal needs no space) and
exits without starting anything: a shim gone with neither ``shim.pid`` nor an exit code never ran the command,
and the executor reports that launch as not started, to be made again, rather than as ended.

``-I -S`` keep start-up fast and immune to the user's ``PYTHONPATH`` and site-packages; the child still gets
exactly the environment in ``launch.json``.

The shim's start-up is on the path of every replica's start, so it imports next to nothing: its interpreter
alone takes about 10 ms, and the usual modules would more than double that. ``os.posix_spawn`` starts the
command (``subprocess`` costs 15 ms of CPU to import); the C modules under ``signal`` and ``json`` do their work
(the Python wrappers import ``enum`` and ``re`` for conveniences the shim does not use, another 10 ms);
nothing imports ``typing``.
"""

from __future__ import annotations

import os
import sys
import time

try:
    # signal's own C module: the same functions and constants, as plain ints rather than enum members.
    import _signal as signal  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # not CPython
    import signal  # type: ignore[no-redef,unused-ignore]

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (mypy reads the name the same way)
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType
    from typing import Any

LAUNCH_FILE = "launch.json"
STARTED_FILE = "started"
EXIT_CODE_FILE = "exit_code"
# An empty file named ``exit_code=<N>``: the exit code when ``exit_code`` itself cannot be written (full disk).
EXIT_CODE_MARKER = "exit_code="
# How long the shim waits between attempts to record the exit code when neither record can be written.
RECORD_RETRY_FIRST_SECONDS = 0.1
RECORD_RETRY_MAX_SECONDS = 5.0
TERMINATE_FILE = "terminate"
OOM_KILLED_FILE = "oom_killed"
SHIM_PID_FILE = "shim.pid"
DEFAULT_GRACE_SECONDS = 10.0
# Exit codes a shell uses when a command cannot be run.
NOT_EXECUTABLE = 126
NOT_FOUND = 127
# The shim's own exit status when it could not prepare the launch (nobody reads it: see ``not_started``).
SHIM_NOT_STARTED = 1


class _ScanContext:
    """What the C JSON scanner reads from its decoder: json.loads' defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}.__getitem__


def load_json(text: str) -> Any:
    """``json.loads``, through the C scanner that ``json`` itself uses, without importing ``json``.

    Raises:
        ValueError: ``text`` is not one JSON value.

    """
    try:
        from _json import make_scanner
    except ImportError:  # not CPython
        import json

        return json.loads(text)
    text = text.strip()
    try:
        value, end = make_scanner(_ScanContext())(text, 0)  # type: ignore[arg-type]  # any object with the attributes
    except StopIteration:
        raise ValueError("not a JSON value") from None
    if end != len(text):
        raise ValueError(f"extra data after the JSON value at character {end}")
    return value


def write_atomically(path: str, text: str) -> None:
    """Write a file under a temporary name, flush it to disk, then rename it into place.

    Rename is atomic on one file system, so a reader sees the whole file or none. A failed write (a full disk)
    removes the temporary file, so nothing half-written is left behind. Created 0600, like everything in the run
    directory: only the owner of the state directory reads it.

    Raises:
        OSError: the file could not be written.

    """
    temporary = f"{path}.tmp.{os.getpid()}"
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            data = text.encode("utf-8")
            while data:
                data = data[os.write(descriptor, data) :]
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, path)
    except OSError:
        try:  # noqa: SIM105 - not contextlib.suppress: a module more to import (see the module docstring)
            os.unlink(temporary)
        except OSError:
            pass
        raise


def record_exit_code(run_dir: str, code: int, note: Callable[[str], None] | None = None) -> None:
    """Record the command's exit code so that a reader never mistakes it for another (see the module docstring).

    Tries ``exit_code`` (written atomically), then the empty ``exit_code=<N>`` marker, and repeats both with
    backoff until one is written: returning without a record would make the replica read as lost. Except when the
    run directory itself is gone (its state directory was removed): no reader will ever look, so it gives up.
    """
    delay = RECORD_RETRY_FIRST_SECONDS
    told = False
    while os.path.isdir(run_dir):
        try:
            write_atomically(os.path.join(run_dir, EXIT_CODE_FILE), f"{code}\n")
            return
        except OSError as err:
            problem = err
        try:
            # An empty file: a directory entry and an inode, no data block, so it fits on a full disk.
            os.close(os.open(os.path.join(run_dir, f"{EXIT_CODE_MARKER}{code}"), os.O_WRONLY | os.O_CREAT, 0o600))
            return
        except OSError:
            pass
        if not told and note is not None:
            told = True
            note(f"cannot record exit code {code} yet ({problem.strerror}); retrying until it can be written")
        time.sleep(delay)
        delay = min(delay * 2, RECORD_RETRY_MAX_SECONDS)


class Shim:
    """State shared between the main flow and the signal handlers."""

    def __init__(self, run_dir: str, launch: dict[str, Any]) -> None:
        self.run_dir = run_dir
        self.launch = launch
        self.child: int | None = None  # the command's pid
        self.pending_signal: int | None = None
        self.escalation_armed = False
        self.home = False  # back in the launcher's cgroups
        self.log = open(launch["log"], "ab", buffering=0)  # noqa: SIM115 - lives as long as the shim

    def note(self, message: str) -> None:
        """Append one line of our own to the replica log (unbuffered, so it is never interleaved mid-line)."""
        # Not contextlib.suppress: contextlib is a module more to import (see the module docstring).
        try:
            self.log.write(f"[phalanx-shim] {message}\n".encode("utf-8", errors="replace"))
        except OSError:
            return  # a full disk must not stop the shim from supervising

    def join_cgroups(self) -> None:
        """Make sure we are in each prepared cgroup (the child inherits membership), joining where we are not.

        The launcher moves us in while this interpreter starts, so usually there is nothing left to do: a
        cgroup move can take milliseconds (v1 waits for an RCU grace period) and is better spent in parallel.
        We check rather than trust it, since a launcher may die or fail between starting us and moving us.
        """
        me = str(os.getpid())
        for procs in self.launch.get("cgroup_procs") or []:
            try:
                with open(procs, encoding="ascii") as handle:
                    if me in handle.read().split():
                        continue
            except OSError:
                pass  # unreadable: write, which says what is wrong
            try:
                with open(procs, "w", encoding="ascii") as handle:
                    handle.write(me)
            except OSError as err:
                self.note(f"warning: cannot join cgroup {os.path.dirname(procs)}: {err.strerror}")

    def pin_cpus(self) -> None:
        """Restrict ourselves (and so the child, which inherits the mask) to the replica's CPUs."""
        cpus = self.launch.get("cpus")
        if not cpus:
            return
        try:
            os.sched_setaffinity(0, cpus)
        except OSError as err:
            self.note(f"warning: cannot pin to CPUs {cpus}: {err.strerror}")

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """Pass a termination request on, and arm the SIGKILL that follows the grace period."""
        grace = float(self.launch.get("grace_seconds") or DEFAULT_GRACE_SECONDS)
        group_signalled = False
        try:
            with open(os.path.join(self.run_dir, TERMINATE_FILE), encoding="utf-8") as handle:
                grace = float(load_json(handle.read()).get("grace_seconds", grace))
            group_signalled = True
        except (OSError, ValueError, AttributeError):
            pass
        if self.child is None:
            self.pending_signal = signum
        elif not group_signalled:
            _kill(self.child, signum)
        if not self.escalation_armed:
            self.escalation_armed = True
            signal.setitimer(signal.ITIMER_REAL, max(grace, 0.001))

    def on_alarm(self, _signum: int, _frame: FrameType | None) -> None:
        """End the grace period: SIGKILL the child; the group sweep after it exits gets the rest."""
        if self.child is not None:
            self.note("grace period over; sending SIGKILL")
            _kill(self.child, signal.SIGKILL)

    def start(self) -> int | None:
        """Start the command; return an exit code instead when it cannot be started."""
        if self.pending_signal is not None:
            # Terminated before the command even started: do not start it at all.
            return 128 + self.pending_signal
        # The launcher decided the complete environment; our own (the control plane's) is not passed on.
        env = dict(self.launch.get("env") or {})
        command = [str(arg) for arg in self.launch["command"]]
        try:
            if self.launch.get("working_dir"):
                # posix_spawn has no working directory of its own: the child inherits ours. Every path the
                # shim itself uses is absolute.
                os.chdir(self.launch["working_dir"])
            self.child = os.posix_spawn(
                _find_program(command[0], env),
                command,
                env,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, self.log.fileno(), 1),
                    (os.POSIX_SPAWN_DUP2, self.log.fileno(), 2),
                ],
                # Python ignores these two at start-up; a command must get them with their default action,
                # as subprocess.Popen's restore_signals gives it.
                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
            )
        except PermissionError as err:
            self.note(f"cannot start {command[0]!r}: {err}")
            return NOT_EXECUTABLE
        except OSError as err:
            self.note(f"cannot start {command[0]!r}: {err}")
            return NOT_FOUND
        try:
            write_atomically(os.path.join(self.run_dir, STARTED_FILE), f"{self.child}\n")
        except OSError as err:
            # The command runs: supervising it matters more than this record, which only says it started.
            self.note(f"warning: cannot record that the command started: {err.strerror}")
        if self.pending_signal is not None:
            # A termination request arrived while the child was being created: deliver it now.
            os.kill(self.child, self.pending_signal)
        self.go_home()  # the child was created in the replica's cgroups and stays there
        return None

    def wait(self) -> int:
        """Wait for the child and return its exit code in shell convention."""
        assert self.child is not None
        _pid, status = os.waitpid(self.child, 0)  # retried by Python when a signal handler interrupts it
        # The child is reaped: its pid may be reused, so no signal handler may send to it any more.
        self.child = None
        code = os.waitstatus_to_exitcode(status)
        return 128 - code if code < 0 else code

    def go_home(self) -> None:
        """Move back to the launcher's cgroups, leaving the command (and what it starts) in the replica's.

        Done as soon as the command runs: a cgroup move can wait milliseconds (v1 waits for an RCU grace
        period), better spent while the command works than between its exit and our exit code. It also keeps
        the supervisor's own memory out of the replica's limit. Whatever fails here is tried again at the end.
        """
        moved = True
        for directory in self.launch.get("cgroups") or []:
            # Replica cgroups are <launcher's cgroup>/phalanx/<name>: go home two levels up.
            home = os.path.dirname(os.path.dirname(str(directory)))
            try:
                with open(os.path.join(home, "cgroup.procs"), "w", encoding="ascii") as handle:
                    handle.write(str(os.getpid()))
            except OSError:
                moved = False
        self.home = moved

    def leave_cgroups(self) -> None:
        """Record an OOM kill, then remove our cgroups (moving back to the launcher's first, if not done yet).

        Removing them here means no cgroup leaks even if no control plane ever calls ``cleanup``; a directory
        that cannot be removed yet (a process still exiting) is left for ``cleanup``.
        """
        directories = [str(item) for item in self.launch.get("cgroups") or []]
        kills = sum(_oom_kills(directory) for directory in directories)
        if kills:
            self.note("the command was killed by the OOM killer: it exceeded its memory limit")
            try:
                write_atomically(os.path.join(self.run_dir, OOM_KILLED_FILE), f"{kills}\n")
            except OSError as err:
                self.note(f"warning: cannot record the OOM kill: {err.strerror}")
        if not self.home:
            self.go_home()
        for directory in directories:
            for path in (directory, os.path.dirname(directory)):
                try:
                    os.rmdir(path)
                except OSError:
                    # Busy (a sibling replica, a process still exiting) or already gone: cleanup() retries.
                    break

    def sweep_group(self, deadline_seconds: float = 5.0) -> None:
        """SIGKILL every other live process of our group until none is left (or the deadline passes)."""
        me = os.getpid()
        deadline = time.monotonic() + deadline_seconds
        while time.monotonic() < deadline:
            members = [pid for pid in _group_members(me) if pid != me]
            if not members:
                return
            for pid in members:
                _kill(pid, signal.SIGKILL)
            # Killed processes take a moment to become zombies; look again shortly.
            time.sleep(0.01)


def _kill(pid: int, signum: int) -> None:
    """Send a signal to a process that may have exited meanwhile."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return


def _find_program(name: str, env: dict[str, str]) -> str:
    """The file ``name`` runs, looked up in the command's own ``PATH`` (as execvpe and Popen do, not ours).

    The first executable match wins; failing that, the first file of that name, so that starting it fails with
    "permission denied" (126) rather than "not found" (127); failing that, ``name`` itself (127).
    """
    if os.sep in name:
        return name
    found = None
    for directory in os.get_exec_path(env):
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate):
            if os.access(candidate, os.X_OK):
                return candidate
            found = found or candidate
    return found or name


def _oom_kills(directory: str) -> int:
    """Count OOM kills in a memory cgroup (v1 ``memory.oom_control``, v2 ``memory.events``)."""
    for name in ("memory.events", "memory.oom_control"):
        try:
            with open(os.path.join(directory, name), encoding="ascii") as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return 0


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``, from /proc."""
    members: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        # After the command name: state, ppid, pgrp, ...
        if len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def close_inherited_fds() -> None:
    """Close every descriptor above stderr that the launcher let us inherit: none is the command's business.

    posix_spawn passes on whatever is inheritable, where subprocess.Popen closed it (``close_fds``).
    """
    for entry in os.listdir("/proc/self/fd"):
        if int(entry) > 2:
            try:
                os.close(int(entry))
            except OSError:
                continue  # the descriptor listdir itself used, closed already


def not_started(run_dir: str, err: Exception) -> int:
    """End a shim that failed before starting the command so that the launch reads as never made.

    Without ``shim.pid`` and without an exit code, the executor knows the command never ran (see the module
    docstring) and launches the replica again later, rather than recording an end it did not have.
    """
    try:  # noqa: SIM105 - not contextlib.suppress: a module more to import (see the module docstring)
        os.unlink(os.path.join(run_dir, SHIM_PID_FILE))
    except OSError:
        pass  # never written
    reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
    try:
        sys.stderr.write(f"[phalanx-shim] not started: cannot prepare the launch ({reason})\n")
        sys.stderr.flush()
    except OSError:
        pass  # the log's disk may be the full one
    return SHIM_NOT_STARTED


def main(argv: list[str]) -> int:
    """Run one replica to completion; returns the shim's own exit status (the child's code)."""
    if len(argv) != 2:
        sys.stderr.write("usage: shim.py <run_dir>\n")
        return 2
    run_dir = argv[1]
    try:
        # First of all, say who we are: a control plane that died before recording our pid finds us by this file.
        with open("/proc/self/stat", encoding="ascii") as stat:
            start_ticks = stat.read().rsplit(")", 1)[1].split()[19]
        write_atomically(os.path.join(run_dir, SHIM_PID_FILE), f"{os.getpid()} {start_ticks}\n")
        close_inherited_fds()
        with open(os.path.join(run_dir, LAUNCH_FILE), encoding="utf-8") as handle:
            launch = load_json(handle.read())
        shim = Shim(run_dir, launch)
    except (OSError, ValueError) as err:
        return not_started(run_dir, err)
    signal.signal(signal.SIGTERM, shim.on_signal)
    signal.signal(signal.SIGINT, shim.on_signal)
    signal.signal(signal.SIGALRM, shim.on_alarm)
    shim.join_cgroups()
    shim.pin_cpus()
    failed = shim.start()
    code = failed if failed is not None else shim.wait()
    signal.setitimer(signal.ITIMER_REAL, 0)
    shim.sweep_group()
    shim.leave_cgroups()
    record_exit_code(run_dir, code, shim.note)
    return code


if __name__ == "__main__":
    status = main(sys.argv)
    try:  # noqa: SIM105 - as above
        sys.stderr.flush()
    except OSError:
        pass  # a full disk: what could not be written is lost, the exit code is recorded
    # Every file is written and closed: skip the interpreter's clean-up, which would only delay the moment a
    # control plane waiting on our exit (pidfd) learns of it.
    os._exit(status)
