"""The local executor: each replica is a process group led by a small shim, pinned to CPUs, in cgroups.

Owns starting, observing, signalling and cleaning up replica processes on this machine. The invariant that
shapes it: **a replica must survive the death of the control plane, and a restarted control plane must find
it again.** Hence:

- the shim (``shim.py``) runs in a new session, so it is the leader of a process group holding the replica's
  whole tree, and nothing ties its life to ours;
- a :class:`ProcessHandle` is three plain values, ``(pid, start_ticks, run_dir)``, that the controller stores
  in ``Replica.status``; any later process rebuilds it and polls;
- ``start_ticks`` (field 22 of ``/proc/<pid>/stat``) guards against pid reuse: a pid whose start time differs
  is someone else's process and is never signalled;
- exit codes travel through ``<run_dir>/exit_code`` (or, on a full disk, the empty ``exit_code=<N>``),
  written by the shim, because only a parent can ``waitpid`` and the parent may be gone. A shim that vanished
  without recording one (SIGKILLed, or it crashed) leaves the exit status *unknown*: ``poll`` then reports no
  exit code at all, never a guessed one such as 137;
- a launch the machine cannot make for now (a full disk, an exceeded quota, a failing disk: errors that pass)
  raises ``LaunchDeferredError``, not ``LaunchError``, and starts nothing, so the caller can try it again later;
  so does a shim that ends before it could record itself (``shim.pid``): it never starts the command, and
  ``poll`` reports it as ``never_ran``.

CPU affinity is always applied (by the shim, inherited by the command). cgroup cpusets, memory and CPU limits
are applied where the machine lets us write cgroups; elsewhere the executor logs one warning and continues
with affinity only, so ``phalanx run`` works for an unprivileged user on a laptop.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Literal

from phalanx.adapters.devices.sysfs import parse_cpu_list
from phalanx.adapters.executor import cgroups
from phalanx.adapters.executor import shim as shim_program
from phalanx.adapters.executor.cgroups import CgroupError, CgroupLayout
from phalanx.adapters.private_files import PRIVATE_FILE_MODE, make_private_dirs

_log = logging.getLogger(__name__)

LOG_FILE = "replica.log"
LAUNCH_FILE = "launch.json"
STARTED_FILE = "started"
EXIT_CODE_FILE = "exit_code"
TERMINATE_FILE = "terminate"
OOM_KILLED_FILE = "oom_killed"
SHIM_FILE = "shim.py"
# What a shell reports for a process killed by SIGKILL.
KILLED_EXIT_CODE = 128 + signal.SIGKILL
DEFAULT_GRACE_SECONDS = 10.0


# Errors of the machine rather than of the replica: a full disk, an exceeded disk quota, a disk that fails to read
# or write. They pass (space is freed, the disk recovers), so a launch that meets one is deferred, not failed.
MACHINE_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


class LaunchError(RuntimeError):
    """A replica could not be started (bad spec, unwritable run directory, shim failed to spawn)."""


class LaunchDeferredError(Exception):
    """The machine cannot start a replica for now (see ``MACHINE_FAULTS``); nothing was started.

    Not a ``LaunchError``: the replica is not at fault, and the same launch may succeed once the fault passes.

    Attributes:
        problem: what is wrong, as a clause: "the disk holding /x/runs is full".

    """

    def __init__(self, name: str, directory: Path, err: OSError) -> None:
        self.problem = describe_machine_fault(directory, err)
        super().__init__(f"cannot start {name} for now: {self.problem}")


def describe_machine_fault(directory: Path, err: OSError) -> str:
    """One clause naming a machine fault (``MACHINE_FAULTS``) met while writing under ``directory``."""
    if err.errno == errno.ENOSPC:
        return f"the disk holding {directory} is full"
    if err.errno == errno.EDQUOT:
        return f"the disk quota for {directory} is used up"
    return f"the disk holding {directory} failed to read or write ({err.strerror})"


@dataclass
class LaunchSpec:
    """Everything needed to start one replica.

    Attributes:
        name: the replica name; also the name of its cgroups, so it must be unique among running replicas.
        command: argv of the replica's main process.
        env: the command's complete environment. Nothing is inherited implicitly, so the caller decides what
            of the control plane's own environment (PATH, HOME...) a replica sees and what it must not see
            (``CUDA_VISIBLE_DEVICES`` of the control plane, say).
        working_dir: the command's current directory.
        run_dir: where launch files, state files and the log go; relative paths are under the executor root.
        cpus: CPUs to pin to, exclusively when cgroups are writable; ``None`` or empty for no pinning.
        memory_limit: bytes, enforced through the memory cgroup when available.
        cpu_limit_milli: CPU time quota in thousandths of a CPU, through the cpu cgroup when available.
        files: relative path under ``run_dir`` → content, written before start (hostfiles, TF_CONFIG files).
        directories: directories the replica expects to exist (its outputs directory), made before start.

    """

    name: str
    command: list[str]
    env: dict[str, str]
    working_dir: Path
    run_dir: Path
    cpus: list[int] | None = None
    memory_limit: int | None = None
    cpu_limit_milli: int | None = None
    files: dict[str, str] = field(default_factory=dict)
    directories: tuple[Path, ...] = ()


@dataclass(frozen=True)
class ProcessHandle:
    """What identifies a launched replica across control-plane restarts; store these three values."""

    pid: int
    start_ticks: int
    run_dir: Path

    @property
    def log_path(self) -> Path:
        """The replica's combined stdout/stderr."""
        return self.run_dir / LOG_FILE


@dataclass(frozen=True)
class ProcessState:
    """What :meth:`LocalExecutor.poll` observed.

    Attributes:
        running: the shim (and so the replica) is alive.
        exit_code: the command's exit code (128+N for signal N) once it has finished; ``None`` while it runs,
            and also once it has ended if its shim recorded no code (its exit status is unknown).
        started: the command was started (the shim wrote ``started``).
        oom_killed: the kernel's OOM killer killed a process of the replica for exceeding its memory limit
            (known only where a memory cgroup was applied).
        never_ran: the shim ended before it recorded itself (``shim.pid``), so it never started the command:
            launching the replica again cannot run it twice.

    """

    running: bool
    exit_code: int | None
    started: bool
    oom_killed: bool = False
    never_ran: bool = False


def _read_stat(pid: int) -> list[str] | None:
    """Read the fields of ``/proc/<pid>/stat`` after the command name, or None if no such process.

    The command name is in parentheses and may itself contain spaces and parentheses, so split after the
    *last* ``)``. Index 0 is the state (field 3), index 2 the pgrp (field 5), index 19 the start time
    (field 22).
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def read_start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot; ``None`` if there is no such process."""
    fields = _read_stat(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def read_affinity(pid: int) -> set[int]:
    """Read the CPUs a process may run on, from ``Cpus_allowed_list`` in ``/proc/<pid>/status``.

    Raises:
        ProcessLookupError: there is no such process.

    """
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("Cpus_allowed_list:"):
                    return parse_cpu_list(line.split(":", 1)[1])
    except FileNotFoundError:
        raise ProcessLookupError(errno.ESRCH, f"no process {pid}") from None
    return set()


def group_members(pgid: int) -> list[int]:
    """Pids of live (non-zombie) processes in process group ``pgid``, found by walking /proc."""
    members: list[int] = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _read_stat(int(entry))
            if fields is not None and len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
                members.append(int(entry))
    return members


def _write_atomically(path: Path, text: str, *, mode: int = PRIVATE_FILE_MODE) -> None:
    temporary = path.with_name(f"{path.name}.tmp.{os.getpid()}")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)  # a full disk must not leave half a file behind
        raise


def read_exit_code(run_dir: Path) -> int | None:
    """The exit code the shim recorded for ``run_dir``, or None while (or if) it has recorded none.

    The ``exit_code`` file first; failing that, an ``exit_code=<N>`` marker, the shim's record on a full disk.
    """
    try:
        return int((run_dir / EXIT_CODE_FILE).read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        pass
    try:
        names = os.listdir(run_dir)
    except OSError:
        return None
    for name in names:
        if name.startswith(shim_program.EXIT_CODE_MARKER):
            with contextlib.suppress(ValueError):
                return int(name[len(shim_program.EXIT_CODE_MARKER) :])
    return None


def _safe_relative(path: str) -> PurePosixPath:
    relative = PurePosixPath(path)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise LaunchError(f"files: {path!r} must be a relative path inside the run directory, without '..'")
    return relative


class LocalExecutor:
    """Runs replicas as local process groups; see the module docstring for the guarantees.

    Args:
        root: the executor's directory: the shim is kept here and relative run directories live under it.
        python: the interpreter that runs the shim.
        cgroups: ``"auto"`` to detect cgroups, ``"off"`` for affinity only, or an explicit layout (tests).

    """

    def __init__(
        self,
        root: Path,
        *,
        python: str = sys.executable,
        cgroups: CgroupLayout | Literal["auto", "off"] = "auto",
    ) -> None:
        # Absolute, so handles and the shim argv mean the same to a control plane started elsewhere.
        self.root = Path(root).absolute()
        self.python = python
        if cgroups == "auto":
            self.cgroups: CgroupLayout | None = _detect_cgroups()
        elif cgroups == "off":
            self.cgroups = None
        else:
            self.cgroups = cgroups
        self._lock = threading.Lock()
        self._children: set[int] = set()
        self._warned = False
        self._shim: Path | None = None
        try:
            self._shim = self._install_shim()
        except OSError as err:
            if err.errno not in MACHINE_FAULTS:
                raise
            # A full disk must not stop the control plane from starting: the first launch installs it.
            _log.debug("cannot install the shim yet: %s", err)

    # -- starting ------------------------------------------------------------------------------------------

    def _install_shim(self) -> Path:
        """Copy the shim into the root, so running replicas never depend on the installed package's files."""
        source = resources.files("phalanx.adapters.executor").joinpath(SHIM_FILE).read_text(encoding="utf-8")
        make_private_dirs(self.root)
        target = self.root / SHIM_FILE
        try:
            current = target.read_text(encoding="utf-8")
        except OSError:
            current = None
        if current != source:
            _write_atomically(target, source)
        return target

    def _warn_once(self, message: str) -> None:
        with self._lock:
            first = not self._warned
            self._warned = True
        if first:
            _log.warning("%s; replicas get CPU affinity only, without cgroup limits", message)
        else:
            _log.debug("%s", message)

    def _prepare_cgroups(self, spec: LaunchSpec) -> list[Path]:
        wants = bool(spec.cpus) or spec.memory_limit is not None or spec.cpu_limit_milli is not None
        if not wants:
            return []
        if self.cgroups is None:
            self._warn_once("no writable cgroup hierarchy found")
            return []
        try:
            setup = cgroups.create_cgroups(
                self.cgroups,
                spec.name,
                cpus=spec.cpus,
                memory_limit=spec.memory_limit,
                cpu_limit_milli=spec.cpu_limit_milli,
            )
        except CgroupError as err:
            self._warn_once(f"cgroups unavailable: {err}")
            return []
        if setup.missing:
            self._warn_once(f"no cgroup controller for {', '.join(setup.missing)}")
        return setup.directories

    def launch(self, spec: LaunchSpec) -> ProcessHandle:
        """Start a replica and return at once, without waiting for its command to start or finish.

        Raises:
            LaunchError: the spec is unusable (empty command, CPUs this process may not use, a file path
                leaving the run directory) or the shim could not be spawned.
            LaunchDeferredError: a fault of the machine (``MACHINE_FAULTS``) stopped the launch; nothing was
                started, and the same launch may succeed later.

        """
        if not spec.command:
            raise LaunchError(f"{spec.name}: command must not be empty")
        cpus = sorted(set(spec.cpus)) if spec.cpus else None
        if cpus is not None:
            usable = os.sched_getaffinity(0)
            if not set(cpus) <= usable:
                outside = sorted(set(cpus) - usable)
                raise LaunchError(
                    f"{spec.name}: CPUs {outside} are not available to Phalanx (usable: {sorted(usable)})"
                )
        run_dir = spec.run_dir if spec.run_dir.is_absolute() else self.root / spec.run_dir
        try:
            shim = self._shim = self._shim or self._install_shim()
            self._prepare_run_dir(run_dir, spec.files, spec.directories)
        except OSError as err:
            self._defer_machine_fault(spec.name, err)
            raise LaunchError(f"{spec.name}: cannot prepare {run_dir}: {err}") from None

        directories = self._prepare_cgroups(spec)
        log_path = run_dir / LOG_FILE
        launch = {
            "name": spec.name,
            "command": list(spec.command),
            "env": dict(spec.env),
            "working_dir": os.fspath(spec.working_dir.absolute()),
            "cpus": cpus,
            "log": os.fspath(log_path),
            "cgroups": [os.fspath(directory) for directory in directories],
            "cgroup_procs": cgroups.procs_files(directories),
            "grace_seconds": DEFAULT_GRACE_SECONDS,
        }
        try:
            # The environment may carry credentials: only the owner may read the launch file.
            _write_atomically(run_dir / LAUNCH_FILE, json.dumps(launch, indent=2), mode=0o600)
        except OSError as err:
            cgroups.remove_cgroups(directories)
            self._defer_machine_fault(spec.name, err)
            raise LaunchError(f"{spec.name}: cannot write {run_dir / LAUNCH_FILE}: {err}") from None
        try:
            pid = self._spawn(shim, run_dir, log_path)
        except OSError as err:
            cgroups.remove_cgroups(directories)
            self._defer_machine_fault(spec.name, err)
            raise LaunchError(f"{spec.name}: cannot start the shim with {self.python}: {err}") from None
        start_ticks = read_start_ticks(pid)
        # Our unreaped child cannot disappear from /proc, so this only fails if /proc is not mounted.
        if start_ticks is None:
            raise LaunchError(f"{spec.name}: cannot read /proc/{pid}/stat; is /proc mounted?")
        return ProcessHandle(pid=pid, start_ticks=start_ticks, run_dir=run_dir)

    def _defer_machine_fault(self, name: str, err: OSError) -> None:
        """Raise ``LaunchDeferredError`` for a fault of the machine; return for anything else."""
        if err.errno in MACHINE_FAULTS:
            raise LaunchDeferredError(name, self.root, err) from None

    @staticmethod
    def _prepare_run_dir(run_dir: Path, files: dict[str, str], directories: tuple[Path, ...] = ()) -> None:
        targets = [(run_dir / _safe_relative(relative), content) for relative, content in files.items()]
        for directory in directories:
            make_private_dirs(directory)
        # 0700, with every missing level above it: the run directory holds the environment and the log.
        make_private_dirs(run_dir)
        # A relaunch into the same directory must not be mistaken for the previous attempt's end.
        for stale in (STARTED_FILE, EXIT_CODE_FILE, TERMINATE_FILE, OOM_KILLED_FILE, shim_program.SHIM_PID_FILE):
            (run_dir / stale).unlink(missing_ok=True)
        for marker in run_dir.glob(f"{shim_program.EXIT_CODE_MARKER}*"):
            marker.unlink(missing_ok=True)
        for target, content in targets:
            make_private_dirs(target.parent)
            _write_atomically(target, content)  # 0600, and a full disk leaves no half-written file

    def _spawn(self, shim: Path, run_dir: Path, log_path: Path) -> int:
        # posix_spawn rather than subprocess.Popen: no Popen object that warns when garbage-collected while
        # the replica, by design, keeps running; setsid makes the shim a session and process-group leader.
        file_actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            # The log may echo the environment (tokens): the owner's alone, like the launch file.
            (os.POSIX_SPAWN_OPEN, 1, os.fspath(log_path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ]
        argv = [self.python, "-I", "-S", os.fspath(shim), os.fspath(run_dir)]
        pid = os.posix_spawn(
            self.python,
            argv,
            dict(os.environ),
            file_actions=file_actions,
            setsid=True,
            # A control-plane thread may block signals (event loops do); the shim must receive SIGTERM.
            setsigmask=(),
            setsigdef=(signal.SIGTERM, signal.SIGINT, signal.SIGHUP),
        )
        with self._lock:
            self._children.add(pid)
        return pid

    # -- observing -----------------------------------------------------------------------------------------

    def _reap(self) -> None:
        """Reap the shims we spawned, so none lingers as a zombie; exit codes come from files."""
        with self._lock:
            children = list(self._children)
        for pid in children:
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done == pid:
                with self._lock:
                    self._children.discard(pid)

    def _reap_handle(self, handle: ProcessHandle) -> None:
        """Reap the handle's shim if it is a zombie child of this process (launched by another instance)."""
        fields = _read_stat(handle.pid)
        if fields is None or fields[0] != "Z" or len(fields) <= 19 or int(fields[19]) != handle.start_ticks:
            return
        # ChildProcessError: someone else's child, which its parent (or init) reaps.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(handle.pid, os.WNOHANG)

    def _shim_alive(self, handle: ProcessHandle) -> bool:
        fields = _read_stat(handle.pid)
        if fields is None or len(fields) <= 19:
            return False
        return int(fields[19]) == handle.start_ticks and fields[0] not in ("Z", "X")

    def _pid_reused(self, handle: ProcessHandle) -> bool:
        """Tell whether ``handle.pid`` now names a different process, so our group is certainly gone.

        The kernel does not hand out a pid while it still names a process group, so a new process with this
        pid means every member of our group has exited.
        """
        ticks = read_start_ticks(handle.pid)
        return ticks is not None and ticks != handle.start_ticks

    def owns(self, handle: ProcessHandle) -> bool:
        """Whether ``handle.pid`` is still our shim (alive or not yet reaped), not a reused pid."""
        self._reap()
        return read_start_ticks(handle.pid) == handle.start_ticks

    def poll(self, handle: ProcessHandle) -> ProcessState:
        """Observe a replica; works for handles rebuilt by a process that did not launch it."""
        self._reap()
        self._reap_handle(handle)
        started = (handle.run_dir / STARTED_FILE).exists()
        exit_code = read_exit_code(handle.run_dir)
        if exit_code is not None:
            return self._finished(handle, exit_code, started)
        if self._shim_alive(handle):
            return ProcessState(running=True, exit_code=None, started=started)
        # The shim may have written its exit code and exited between our two looks: read it again. If there is
        # still none, the shim ended without recording one: the exit status is unknown (None), not guessed.
        exit_code = read_exit_code(handle.run_dir)
        started = started or (handle.run_dir / STARTED_FILE).exists()
        if exit_code is None and not started and self._ended_before_recording_itself(handle):
            return ProcessState(running=False, exit_code=None, started=False, never_ran=True)
        return self._finished(handle, exit_code, started)

    @staticmethod
    def _ended_before_recording_itself(handle: ProcessHandle) -> bool:
        """Whether an ended shim never got past recording itself, its first step (so it ran nothing).

        Its launch file is there (the launch was made) and its ``shim.pid`` is not: never written, or removed
        by the shim as it gave up (see ``shim.not_started``). A run directory that lost its launch file too was
        removed by someone else, and says nothing either way.
        """
        run_dir = handle.run_dir
        return (run_dir / LAUNCH_FILE).exists() and not (run_dir / shim_program.SHIM_PID_FILE).exists()

    def move_into_cgroups(self, handle: ProcessHandle) -> None:
        """Move a just-launched shim into its cgroups from here, while its interpreter is still starting.

        The shim joins them itself before it starts the command, and a cgroup move can take milliseconds (v1
        waits for an RCU grace period); done here, in parallel, that wait is off the replica's path and the
        shim finds itself a member already. Optional: without it the shim joins on its own. Call it right
        after :meth:`launch`, before anything reaps the shim; a failure is left to the shim, which reports it.
        """
        if read_start_ticks(handle.pid) != handle.start_ticks:
            return  # gone already (and possibly reused): nothing to move
        procs_files = self._launch_record(handle).get("cgroup_procs")
        for procs in procs_files if isinstance(procs_files, list) else []:
            try:
                with open(str(procs), "w", encoding="ascii") as target:
                    target.write(str(handle.pid))
            except OSError as err:
                _log.debug("cannot move %d into %s yet: %s", handle.pid, procs, err)

    def exit_fd(self, handle: ProcessHandle) -> int | None:
        """A file descriptor that becomes readable when the replica's shim exits; the caller closes it.

        A pidfd (Linux 5.3 and later): it works for a shim this process did not start, so an adopted replica
        is waited on like our own, and it names one process, never a later one with a reused pid. The shim
        writes ``exit_code`` before it exits, so once the descriptor is readable, :meth:`poll` reports the end.

        Returns:
            The descriptor, or None where there is none to give (no pidfd on this kernel, or the shim is
            gone already): then :meth:`poll` is the only way to notice the exit.

        """
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is None:
            return None
        try:
            descriptor: int = pidfd_open(handle.pid)
        except OSError:
            return None  # ESRCH: gone already; ENOSYS, EPERM: no pidfds here
        # Opened after a pid reuse, it would name someone else's process: keep it only if the pid still has
        # our shim's start time (a pidfd opened before the check cannot change process afterwards).
        if read_start_ticks(handle.pid) != handle.start_ticks:
            os.close(descriptor)
            return None
        return descriptor

    @staticmethod
    def _finished(handle: ProcessHandle, exit_code: int | None, started: bool) -> ProcessState:
        oom_killed = (handle.run_dir / OOM_KILLED_FILE).exists()
        return ProcessState(running=False, exit_code=exit_code, started=started, oom_killed=oom_killed)

    def is_gone(self, handle: ProcessHandle) -> bool:
        """Whether no process of the replica's group is left (zombies do not count)."""
        self._reap()
        self._reap_handle(handle)
        if self._pid_reused(handle):
            return True
        return not group_members(handle.pid)

    # -- signalling ----------------------------------------------------------------------------------------

    def _signal_group(self, handle: ProcessHandle, signum: int) -> None:
        if self._pid_reused(handle):
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(handle.pid, signum)

    def terminate(self, handle: ProcessHandle, grace_seconds: float = DEFAULT_GRACE_SECONDS) -> None:
        """Send SIGTERM to the whole group and return at once.

        The shim SIGKILLs the command if it is still running ``grace_seconds`` later, even if this process is
        gone by then. Grandchildren that outlive the command are killed when it exits.
        """
        self._reap()
        if self._pid_reused(handle):
            return
        # Tell the shim the group was signalled, so it does not forward a second SIGTERM to the command.
        try:
            _write_atomically(handle.run_dir / TERMINATE_FILE, json.dumps({"grace_seconds": grace_seconds}))
        except OSError as err:
            _log.debug("cannot write %s: %s", handle.run_dir / TERMINATE_FILE, err)
        self._signal_group(handle, signal.SIGTERM)

    def kill(self, handle: ProcessHandle) -> None:
        """SIGKILL every process of the replica's group, the shim included (so no exit code: unknown)."""
        self._reap()
        self._signal_group(handle, signal.SIGKILL)

    # -- changing and cleaning up --------------------------------------------------------------------------

    def _launch_record(self, handle: ProcessHandle) -> dict[str, object]:
        try:
            record = json.loads((handle.run_dir / LAUNCH_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}

    def _cgroup_dirs(self, handle: ProcessHandle) -> list[Path]:
        recorded = self._launch_record(handle).get("cgroups")
        return [Path(str(item)) for item in recorded] if isinstance(recorded, list) else []

    def set_affinity(self, handle: ProcessHandle, cpus: list[int]) -> None:
        """Re-pin every thread of every process in the replica's group to ``cpus``.

        The cgroup cpuset (if any) is widened or narrowed first, since the kernel refuses an affinity outside
        the cpuset. Threads created while we walk inherit the old mask, so the walk repeats until a pass finds
        nothing left to change.

        Raises:
            ValueError: ``cpus`` is empty.
            CgroupError: the kernel refused the new cpuset.

        """
        if not cpus:
            raise ValueError("set_affinity needs at least one CPU")
        if self._pid_reused(handle):
            return
        wanted = set(cpus)
        cgroups.set_cgroup_cpus(self._cgroup_dirs(handle), sorted(wanted))
        for _attempt in range(5):
            changed = False
            for pid in group_members(handle.pid):
                try:
                    threads = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                for tid in threads:
                    try:
                        if os.sched_getaffinity(int(tid)) != wanted:
                            os.sched_setaffinity(int(tid), wanted)
                            changed = True
                    except ProcessLookupError:
                        continue
            if not changed:
                return

    def cleanup(self, handle: ProcessHandle) -> None:
        """Remove the replica's cgroups once :meth:`is_gone` is true; logs and the run directory stay.

        The shim removes them itself when the command exits normally; this covers a shim that was SIGKILLed.

        """
        self._reap()
        for problem in cgroups.remove_cgroups(self._cgroup_dirs(handle)):
            _log.warning("%s", problem)


def find_shim(run_dir: Path) -> ProcessHandle | None:
    """The live shim of ``run_dir`` (from its ``shim.pid``), whoever started it; None if there is none."""
    try:
        pid_text, ticks_text = (run_dir / shim_program.SHIM_PID_FILE).read_text().split()
    except (OSError, ValueError):
        return None
    pid, ticks = int(pid_text), int(ticks_text)
    if read_start_ticks(pid) != ticks:
        return None
    return ProcessHandle(pid=pid, start_ticks=ticks, run_dir=run_dir)


def _detect_cgroups() -> CgroupLayout | None:
    try:
        return cgroups.detect_cgroups()
    except OSError as err:
        _log.debug("cgroup detection failed: %s", err)
        return None
