"""The embedded node runtime: runs Replica objects as local process groups, like a kubelet runs Pods.

For each Replica it launches the process group once (adopting one that a previous control plane started
and left running), reports Running / Succeeded / Failed with exit codes, stops replicas that are being
deleted (SIGTERM, then SIGKILL after a grace period) and removes their objects once no process of theirs is
left. Replicas whose job is gone are garbage-collected. Because a replica's name is fixed and a new copy is
only created after the old object is removed, two copies of one replica never run at the same time, even
across a crash of the control plane.

A launch that a fault of the machine stops (a full disk, an exceeded quota, a failing disk; or a shim that ended
before it could record itself, so before it ran anything) is not the replica's failure: the replica stays (or
goes back to) Pending, its status message says why, and launches are tried again with backoff, one warning per
episode (``store_faults.FaultEpisodes``), until the machine lets them through.

A replica whose handling raises what nobody expected is quarantined (``services.embedded.quarantine``) and the others go
on. Replicas of a job whose row cannot be read are left as they are (not started, not garbage-collected): the
job is quarantined, not gone.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.executor import (
    LaunchDeferredError,
    LaunchError,
    LaunchSpec,
    LocalExecutor,
    ProcessHandle,
    find_shim,
    read_exit_code,
)
from phalanx.adapters.store import SqliteStore
from phalanx.model.jobs import TrainingJob
from phalanx.model.nodes import Node
from phalanx.model.replicas import Replica, ReplicaPhase, last_output_of
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SUBMIT_DIR_ANNOTATION
from phalanx.services.embedded.quarantine import NODE_RUNTIME_ERROR, Quarantine, guarded_step
from phalanx.services.embedded.store_faults import FaultEpisodes

log = logging.getLogger(__name__)

# Variables a replica must not inherit from the control plane's own environment.
_NOT_INHERITED_PREFIXES = ("PHALANX_", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "OMP_NUM_THREADS")
# What a shell reports when a command cannot be started; the replica fails and the restart policy decides.
CANNOT_START = 127
# Why a replica that ended without a recorded exit code failed (see docs/jobs.md, "exit status unknown").
EXIT_STATUS_UNKNOWN = (
    "its exit status is unknown: its supervisor ended without recording it (killed, or it crashed); "
    "the program may have succeeded or failed"
)
# What a launch fault episode is called (one episode for every replica: the machine is at fault, not one of them).
_LAUNCH_FAULT = "launch"
_PYTHON_NAMES = frozenset({"python", "python3", f"python3.{sys.version_info.minor}"})


def resolve_command(command: list[str]) -> list[str]:
    """``python`` in a command means the interpreter that runs Phalanx, so jobs see the same packages."""
    if command and command[0] in _PYTHON_NAMES:
        return [sys.executable, *command[1:]]
    return list(command)


@dataclass
class _Stopping:
    handle: ProcessHandle
    since: float
    killed: bool = False


@dataclass
class _ExitWatch:
    """How the exit of one running replica's shim is noticed."""

    fd: int | None  # readable once the shim exits (a pidfd); None: by polling only
    fired: bool = False  # it became readable; whatever happens next, it is not waited on again


@dataclass
class NodeRuntime:
    """Runs the replicas placed on this machine's nodes.

    Process exits are not store writes. The runtime keeps, for every running replica, a descriptor that becomes
    readable when its shim exits (``exit_fds``), so the control plane can sleep until one does instead of
    polling; ``polling`` says when some process can only be polled for (no descriptor for it, or one that
    fired without the replica being seen to finish, or a replica being stopped, whose grace period is timed
    by polling).
    """

    store: SqliteStore
    executor: LocalExecutor
    layout: StateLayout
    nodes: Mapping[str, Node]
    grace_seconds: float = 10.0
    clock: Clock = field(default_factory=SystemClock)
    _stopping: dict[str, _Stopping] = field(default_factory=dict)
    _pinned: dict[str, tuple[int, ...]] = field(default_factory=dict)
    _exit_watches: dict[ProcessHandle, _ExitWatch] = field(default_factory=dict)
    polling: bool = False
    launch_faults: FaultEpisodes = field(
        default_factory=lambda: FaultEpisodes("replicas can be launched again after %d failed attempt(s); resuming")
    )
    _launch_retry_at: float | None = None  # while launches back off: when to try the next one (monotonic)
    _launch_problem: str = ""  # why launches back off, for the replicas that wait
    _launches_waiting: bool = False  # the last pass left a replica Pending for the backoff
    quarantine: Quarantine = field(init=False)

    def __post_init__(self) -> None:
        self.quarantine = Quarantine(self.store, self.clock)

    def sync(self) -> bool:
        """Bring processes in line with Replica objects once; True when something changed.

        Afterwards ``exit_fds`` says which descriptors announce the end of a running replica, and ``polling``
        whether some process must be polled for instead.
        """
        changed = False
        self._launches_waiting = False
        replicas = self.store.list(Replica)
        self._watch_exits(replicas)
        jobs = {job.metadata.uid: job for job in self.store.list(TrainingJob)}
        unreadable_jobs = {(r.namespace, r.name) for r in self.store.quarantined("TrainingJob") if not r.readable}
        held = self.quarantine.held("Replica")
        shared_pools = self._shared_pools(replicas)
        for replica in replicas:
            job = jobs.get(replica.spec.job_uid)
            meta = replica.metadata
            if held.skips(replica) or (
                job is None
                and meta.deletion_timestamp is None
                and (meta.namespace, replica.spec.job_name) in unreadable_jobs
            ):
                continue
            step = functools.partial(self._sync_one, replica, job, shared_pools)
            doing = "handling replica"
            changed |= bool(guarded_step(self.quarantine, replica, held, step, reason=NODE_RUNTIME_ERROR, doing=doing))
        return changed

    def launch_retry_in(self) -> float | None:
        """Seconds until a launch that a machine fault deferred is due again; None when none waits."""
        if not self._launches_waiting or self._launch_retry_at is None:
            return None
        return max(0.0, self._launch_retry_at - self.clock.monotonic())

    def exit_fds(self) -> list[int]:
        """Descriptors that become readable when a running replica's shim exits (those not yet fired)."""
        return [watch.fd for watch in self._exit_watches.values() if watch.fd is not None and not watch.fired]

    def exits_noticed(self, fds: Collection[int]) -> None:
        """Record that these descriptors fired, so they are not waited on again (they stay readable)."""
        for watch in self._exit_watches.values():
            if watch.fd in fds:
                watch.fired = True
                self.polling = True  # until the next pass has seen the replica finish

    def abandon(self) -> int:
        """SIGTERM every replica process this node runs, without recording anything; how many were signalled.

        For a control plane whose state directory is gone: the replicas' jobs are gone with it, and their shims
        SIGKILL what is left after their grace period (``LocalExecutor.terminate``).
        """
        signalled = 0
        for replica in self.store.list(Replica):
            if replica.status.phase != ReplicaPhase.RUNNING:
                continue
            handle = self._handle(replica)
            if handle is not None and not self.executor.is_gone(handle):
                self.executor.terminate(handle, self.grace_seconds)
                signalled += 1
        return signalled

    def close(self) -> None:
        """Close every exit descriptor (the processes are not touched)."""
        for watch in self._exit_watches.values():
            if watch.fd is not None:
                os.close(watch.fd)
        self._exit_watches.clear()

    def _watch_exits(self, replicas: list[Replica]) -> None:
        """Open an exit descriptor for each running replica not watched yet; close those of the others."""
        running: set[ProcessHandle] = set()
        polling = False
        for replica in replicas:
            if replica.metadata.deletion_timestamp is not None:
                polling = True  # stopping: the grace period before SIGKILL is timed by polling
            elif replica.status.phase == ReplicaPhase.RUNNING:
                handle = self._handle(replica)
                if handle is None:
                    polling = True  # its shim is gone already; the pass about to run records that
                    continue
                running.add(handle)
                if handle not in self._exit_watches:
                    self._exit_watches[handle] = _ExitWatch(self.executor.exit_fd(handle))
        for handle in [h for h in self._exit_watches if h not in running]:
            watch = self._exit_watches.pop(handle)
            if watch.fd is not None:
                os.close(watch.fd)
        self.polling = polling or any(w.fd is None or w.fired for w in self._exit_watches.values())

    # -- one replica -------------------------------------------------------------------------------------

    def _sync_one(self, replica: Replica, job: TrainingJob | None, shared_pools: Mapping[str, tuple[int, ...]]) -> bool:
        meta = replica.metadata
        if meta.deletion_timestamp is None and job is None:
            log.info("garbage-collecting replica %s/%s: its job is gone", meta.namespace, meta.name)
            self.store.mark_deleting(Replica, meta.namespace, meta.name)
            return True
        if meta.deletion_timestamp is not None:
            return self._stop(replica)
        phase = ReplicaPhase(replica.status.phase)
        if phase == ReplicaPhase.PENDING:
            assert job is not None
            return self._launch(replica, job, shared_pools)
        if phase == ReplicaPhase.RUNNING:
            changed = self._observe(replica)
            if not changed:
                self._repin_shared(replica, shared_pools)
            return changed
        return False

    def _run_dir(self, replica: Replica) -> Path:
        return self.layout.replica_run_dir(
            replica.metadata.namespace,
            replica.spec.job_name,
            replica.spec.job_uid,
            replica.metadata.name,
            replica.spec.attempt,
        )

    def _handle(self, replica: Replica) -> ProcessHandle | None:
        status = replica.status
        if status.pid is None or status.process_start_ticks is None:
            return find_shim(self._run_dir(replica))
        return ProcessHandle(pid=status.pid, start_ticks=status.process_start_ticks, run_dir=self._run_dir(replica))

    def _is_real(self, node_name: str) -> bool:
        node = self.nodes.get(node_name)
        return node is not None and node.status.source != "simulated"

    def _launch(self, replica: Replica, job: TrainingJob, shared_pools: Mapping[str, tuple[int, ...]]) -> bool:
        run_dir = self._run_dir(replica)
        handle = find_shim(run_dir) if run_dir.exists() else None
        if handle is None and run_dir.exists() and (code := read_exit_code(run_dir)) is not None:
            # Started by a control plane that died before recording it, and already finished: never run twice.
            log.info("replica %s already ran to exit code %d; recording it", replica.metadata.name, code)
            return self._record_exit(replica, code)
        launched = handle is None
        if handle is None:
            if self._launch_retry_at is not None and self.clock.monotonic() < self._launch_retry_at:
                self._launches_waiting = True
                return self._wait_to_launch(replica, self._launch_problem)
            sourced, missing = sourced_env(self.layout, replica)
            if missing:
                # As a Pod waits for a Secret it names: the replica starts once the file exists.
                return self._wait_to_launch(replica, missing)
            try:
                handle = self.executor.launch(self._launch_spec(replica, job, run_dir, shared_pools, sourced))
            except LaunchDeferredError as err:
                return self._launch_deferred(replica, err.problem, str(err))
            except LaunchError as err:
                log.warning("cannot start replica %s: %s", replica.metadata.name, err)
                return self._record_exit(replica, CANNOT_START, f"could not start: {err}")
            self._launch_retry_at = None
            self.launch_faults.succeeded()
            log.info("started replica %s (pid %d)", replica.metadata.name, handle.pid)
        else:
            log.info(
                "adopted replica %s (pid %d) started by an earlier control plane",
                replica.metadata.name,
                handle.pid,
            )
        status = replica.status.model_copy(
            update={
                "phase": ReplicaPhase.RUNNING,
                "pid": handle.pid,
                "process_start_ticks": handle.start_ticks,
                "start_time": self.clock.now(),
                "log_path": str(run_dir / "replica.log"),
                "message": "",
            }
        )
        self.store.update_status(replica.model_copy(update={"status": status}))
        if launched:
            # While the shim's interpreter starts: its cgroup join, done here, is off the replica's path.
            self.executor.move_into_cgroups(handle)
        return True

    def _launch_deferred(self, replica: Replica, problem: str, sentence: str) -> bool:
        """A fault of the machine stopped a launch: back off and say so on the replica."""
        self._back_off(problem, sentence)
        return self._wait_to_launch(replica, problem)

    def _back_off(self, problem: str, sentence: str) -> None:
        """Launch nothing until the backoff has passed; ``sentence`` is logged if this starts an episode."""
        self._launch_retry_at = self.clock.monotonic() + self.launch_faults.fail(_LAUNCH_FAULT, sentence)
        self._launch_problem = problem
        self._launches_waiting = True

    def _wait_to_launch(self, replica: Replica, problem: str) -> bool:
        """Leave the replica Pending, its message saying why (written once, not on every retry)."""
        message = f"{problem}; retried with backoff"
        if replica.status.message == message:
            return False
        status = replica.status.model_copy(update={"message": message})
        self.store.update_status(replica.model_copy(update={"status": status}))
        return True

    def _launch_spec(
        self,
        replica: Replica,
        job: TrainingJob,
        run_dir: Path,
        shared_pools: Mapping[str, tuple[int, ...]],
        sourced: tuple[Mapping[str, str], Mapping[str, str]] = ({}, {}),
    ) -> LaunchSpec:
        spec = replica.spec
        placement = spec.placement
        real = self._is_real(placement.node)
        submit_dir = Path(job.metadata.annotations.get(SUBMIT_DIR_ANNOTATION, os.getcwd()))
        working_dir = submit_dir / spec.working_dir if spec.working_dir else submit_dir
        env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED_PREFIXES)}
        # envFrom first, then the replica's own env, then its valueFrom variables: Kubernetes' order.
        env.update(sourced[0])
        env.update(spec.env)
        env.update(sourced[1])
        exclusive = bool(placement.cpus)
        if real:
            cpus: list[int] | None = list(placement.cpus) if exclusive else list(shared_pools.get(placement.node, ()))
            if not cpus:
                cpus = None
        else:
            cpus = None  # a simulated node's CPU ids need not exist on this machine
        if cpus is not None:
            self._pinned[replica.metadata.name] = tuple(cpus)
            env.setdefault("OMP_NUM_THREADS", str(max(1, spec.cpu_milli // 1000)))
        return LaunchSpec(
            name=f"{replica.metadata.namespace}-{replica.metadata.name}-a{spec.attempt}",
            command=resolve_command(spec.command),
            env=env,
            working_dir=working_dir,
            run_dir=run_dir,
            cpus=cpus,
            # The ceiling is enforced (resources.limits, else the reserved amount); exclusive cores need no quota.
            memory_limit=(spec.memory_limit or spec.memory or None) if real else None,
            cpu_limit_milli=None if exclusive or not real else spec.cpu_limit_milli or spec.cpu_milli or None,
            files=dict(spec.files),
            # Made with the run directory, so that a full disk defers the launch like any other of its writes.
            directories=(
                self.layout.job_outputs(replica.metadata.namespace, spec.job_name, spec.job_uid, job.spec.outputs.path),
            ),
        )

    def _observe(self, replica: Replica) -> bool:
        handle = self._handle(replica)
        exit_code: int | None = None
        if handle is not None:
            state = self.executor.poll(handle)
            if state.running:
                return False
            if state.never_ran:
                return self._not_started(replica)
            exit_code = state.exit_code
        if exit_code is None:
            # Never a guess (137 would say "killed"): a Failed replica without an exit code, which the restart
            # policy treats as an unknown outcome and names as such.
            log.warning("replica %s ended, but %s", replica.metadata.name, EXIT_STATUS_UNKNOWN)
            return self._record_exit(replica, None, EXIT_STATUS_UNKNOWN)
        log.info("replica %s finished with exit code %d", replica.metadata.name, exit_code)
        return self._record_exit(replica, exit_code)

    def _not_started(self, replica: Replica) -> bool:
        """Its shim ended before it ran anything (see ``ProcessState.never_ran``): Pending again, to launch later."""
        problem = (
            f"its supervisor could not prepare the launch (is the disk holding {self.executor.root} full or failing?)"
        )
        name = f"{replica.metadata.namespace}/{replica.metadata.name}"
        self._back_off(problem, f"replica {name} was not started: {problem}")
        self._pinned.pop(replica.metadata.name, None)
        status = replica.status.model_copy(
            update={
                "phase": ReplicaPhase.PENDING,
                "pid": None,
                "process_start_ticks": None,
                "start_time": None,
                "message": f"{problem}; retried with backoff",
            }
        )
        self.store.update_status(replica.model_copy(update={"status": status}))
        return True

    def _record_exit(self, replica: Replica, code: int | None, message: str | None = None) -> bool:
        phase = ReplicaPhase.SUCCEEDED if code == 0 else ReplicaPhase.FAILED
        text = message or ("" if code in (0, None) else _describe_exit(code))
        said = "" if code == 0 or replica.status.log_path is None else last_output_line(Path(replica.status.log_path))
        status = replica.status.model_copy(
            update={
                "phase": phase,
                "exit_code": code,
                "finish_time": self.clock.now(),
                "message": text,
                "last_output": said,
            }
        )
        self.store.update_status(replica.model_copy(update={"status": status}))
        self._pinned.pop(replica.metadata.name, None)
        return True

    def _stop(self, replica: Replica) -> bool:
        name = f"{replica.metadata.namespace}/{replica.metadata.name}"
        handle = self._handle(replica)
        if handle is None or self.executor.is_gone(handle):
            if handle is not None:
                self.executor.poll(handle)  # reap it if it was our child
                self.executor.cleanup(handle)
            self._stopping.pop(name, None)
            self._pinned.pop(replica.metadata.name, None)
            self.store.delete(Replica, replica.metadata.namespace, replica.metadata.name)
            return True
        stopping = self._stopping.get(name)
        now = self.clock.monotonic()
        if stopping is None:
            self.executor.terminate(handle)
            self._stopping[name] = _Stopping(handle, now)
        elif not stopping.killed and now - stopping.since >= self.grace_seconds:
            log.warning("replica %s ignored SIGTERM for %.0fs; killing it", name, self.grace_seconds)
            self.executor.kill(handle)
            stopping.killed = True
        else:
            self.executor.poll(handle)
        return False

    # -- shared CPU pool -------------------------------------------------------------------------------

    def _shared_pools(self, replicas: list[Replica]) -> dict[str, tuple[int, ...]]:
        exclusive: dict[str, set[int]] = {}
        for replica in replicas:
            placement = replica.spec.placement
            exclusive.setdefault(placement.node, set()).update(placement.cpus)
        pools = {}
        for name, node in self.nodes.items():
            reserved = set(node.spec.reserved_cpus)
            taken = exclusive.get(name, set())
            pools[name] = tuple(c.id for c in node.status.cpus if c.id not in taken and c.id not in reserved)
        return pools

    def _repin_shared(self, replica: Replica, shared_pools: Mapping[str, tuple[int, ...]]) -> None:
        # Exclusive grants shrink the shared pool; replicas already running on it must move off those CPUs.
        placement = replica.spec.placement
        if placement.cpus or not self._is_real(placement.node):
            return
        pool = shared_pools.get(placement.node, ())
        if not pool or self._pinned.get(replica.metadata.name) == pool:
            return
        handle = self._handle(replica)
        if handle is not None:
            self.executor.set_affinity(handle, list(pool))
            self._pinned[replica.metadata.name] = pool


#: How much of a log's end ``last_output_line`` reads: enough for a last line (a traceback's is short).
LAST_OUTPUT_READ = 8192


def last_output_line(log: Path) -> str:
    """The last non-blank line of a replica's log (its end only is read), cut to ``LAST_OUTPUT_CHARS``; "" if none."""
    try:
        with log.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - LAST_OUTPUT_READ))
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return last_output_of(tail)


def _describe_exit(code: int) -> str:
    if code > 128:
        return f"exited with code {code} (killed by signal {code - 128})"
    return f"exited with code {code}"


def sourced_env(layout: StateLayout, replica: Replica) -> tuple[tuple[dict[str, str], dict[str, str]], str | None]:
    """The env a replica reads from the state directory's secrets and configmaps: (envFrom, valueFrom), or why not.

    A Secret or ConfigMap is a directory of one file per key (``StateLayout.secret_dir``); a missing one that is not
    ``optional`` keeps the replica from starting, as a Pod waits for a Secret it names, and the reason names the
    file to create. ``envFrom`` takes every key that is a valid variable name, with its ``prefix``.
    """
    spec, namespace = replica.spec, replica.metadata.namespace
    bulk: dict[str, str] = {}
    for source in spec.env_from:
        secret = source.secret_ref is not None
        ref = source.secret_ref or source.config_map_ref
        assert ref is not None  # exactly one, by the model
        directory = (layout.secret_dir if secret else layout.config_map_dir)(namespace, ref.name)
        if not directory.is_dir():
            if ref.optional:
                continue
            return ({}, {}), _missing("secret" if secret else "configmap", namespace, ref.name, directory)
        for path in sorted(directory.iterdir()):
            if path.is_file() and _ENV_NAME.fullmatch((source.prefix or "") + path.name):
                bulk[(source.prefix or "") + path.name] = path.read_text()
    single: dict[str, str] = {}
    for variable, value_from in spec.env_sources.items():
        secret = value_from.secret_key_ref is not None
        selector = value_from.secret_key_ref or value_from.config_map_key_ref
        if selector is None:
            continue
        directory = (layout.secret_dir if secret else layout.config_map_dir)(namespace, selector.name)
        path = directory / selector.key
        if not path.is_file():
            if selector.optional:
                continue
            return ({}, {}), _missing("secret" if secret else "configmap", namespace, selector.name, path)
        single[variable] = path.read_text()
    return (bulk, single), None


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _missing(kind: str, namespace: str, name: str, path: Path) -> str:
    return f"waiting for {kind} {namespace}/{name}: create {path} (one file per key)"
