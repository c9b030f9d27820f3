"""Starting, finding and stopping the background control plane of a state directory.

``phalanx run`` and ``phalanx up`` start it when none is running and reuse it otherwise; the lease in the
store says who leads, so no pid file can go stale.

The scheduler configuration (``phalanx up --scheduler-config``) is recorded in the state directory, so every
control plane started there later (by ``up`` or ``run``) schedules the same way; a running one is never
silently given another: ``up`` with a different file refuses and says how to switch.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess  # nosec B404  # runs a known program without a shell
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.private_files import open_private, tighten, write_private
from phalanx.adapters.store import SqliteStore
from phalanx.model.loading import dump_yaml, read_scheduler_configuration
from phalanx.model.nodes import Node
from phalanx.model.scheduler_config import SchedulerConfiguration
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.leadership import LEASE_NAME, holder_is_dead, process_start_ticks


class DaemonError(RuntimeError):
    """The control plane could not be started or stopped; the message says where its log is."""


@dataclass(frozen=True)
class LeaderInfo:
    """Who leads a state directory."""

    holder: str
    pid: int | None
    host: str | None


def current_leader(store: SqliteStore, clock: Clock | None = None) -> LeaderInfo | None:
    """The live holder of the control-plane lease, or None when nobody leads."""
    lease = store.get_lease(LEASE_NAME)
    if lease is None or holder_is_dead(lease) or lease.is_expired((clock or SystemClock()).now()):
        return None
    return _holder(lease.holder, lease.holder_info or {})


def _holder(holder: str, info: Mapping[str, object]) -> LeaderInfo:
    pid, host = info.get("pid"), info.get("host")
    return LeaderInfo(holder, pid if isinstance(pid, int) else None, host if isinstance(host, str) else None)


def recorded_scheduler_configuration(layout: StateLayout) -> SchedulerConfiguration:
    """The scheduler configuration recorded for the state directory (the defaults when none is).

    Raises:
        SpecError: the recorded file was edited into something invalid.
    """
    if not layout.scheduler_config.exists():
        return SchedulerConfiguration()
    return read_scheduler_configuration(layout.scheduler_config)


def start_control_plane(
    layout: StateLayout,
    *,
    inventory: Path | None = None,
    cache_size: str | None = None,
    gpu_fault_file: Path | None = None,
    scheduler_config: SchedulerConfiguration | None = None,
    listen: str | None = None,
    no_auth: bool = False,
    timeout: float = 120.0,
) -> tuple[LeaderInfo, bool]:
    """Reuse the running control plane or start one, first recording ``scheduler_config`` when given.

    Starts are serialised per state directory: a second ``phalanx run`` while the first is still starting the
    control plane waits for it and reuses it, rather than starting a second. A start that does not lead within
    ``timeout`` (a loaded machine takes long to import and register) is stopped, so a retry starts afresh
    instead of adding to one that is still coming up.

    ``listen`` (``HOST:PORT``, checked by the caller) makes the control plane serve the REST API there too, with
    its /metrics (every request needs a token of the state directory, unless ``no_auth``).

    Returns:
        (leader, started): who leads, and whether this call started it.

    Raises:
        DaemonError: it did not take the lead within ``timeout`` seconds, or one runs with another scheduler
            configuration than ``scheduler_config``.
        SpecError: the recorded scheduler configuration is invalid.
    """
    layout.ensure()
    store = SqliteStore(layout.database)
    try:
        with _starting(layout):
            serve = ["--listen", listen, *(["--no-auth"] if no_auth else [])] if listen is not None else []
            return _reuse_or_start(
                layout, store, inventory, cache_size, gpu_fault_file, scheduler_config, timeout, serve=serve
            )
    finally:
        store.close()


@contextlib.contextmanager
def _starting(layout: StateLayout) -> Iterator[None]:
    """Hold the state directory's start lock (released by the OS if this process dies)."""
    with os.fdopen(open_private(layout.root / "start.lock", os.O_WRONLY | os.O_APPEND), "ab") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(guard, fcntl.LOCK_UN)


def _reuse_or_start(
    layout: StateLayout,
    store: SqliteStore,
    inventory: Path | None,
    cache_size: str | None,
    gpu_fault_file: Path | None,
    scheduler_config: SchedulerConfiguration | None,
    timeout: float,
    *,
    serve: list[str],
) -> tuple[LeaderInfo, bool]:
    leader = current_leader(store)
    if leader is not None:
        if scheduler_config is not None and scheduler_config != recorded_scheduler_configuration(layout):
            raise DaemonError(
                f"the control plane (pid {leader.pid}) runs with another scheduler configuration, the one in "
                f"{layout.scheduler_config}: run `phalanx down`, then `phalanx up --scheduler-config` again"
            )
        return leader, False
    if scheduler_config is not None:
        write_private(layout.scheduler_config, dump_yaml(scheduler_config.to_dict()))
    else:
        recorded_scheduler_configuration(layout)  # refused here, not in the background process's log
    command = [sys.executable, "-m", "phalanx.entrypoints.controlplane", "--state-dir", str(layout.root)]
    if inventory is not None:
        command += ["--inventory", str(inventory.resolve())]
    if cache_size is not None:
        command += ["--cache-size", cache_size]
    if gpu_fault_file is not None:
        command += ["--gpu-fault-file", str(gpu_fault_file.resolve())]
    command += serve
    # The log names jobs, datasets and errors: the owner's alone (0600), like the rest of the state.
    tighten(layout.control_plane_log)  # written 0644 by older versions
    with os.fdopen(open_private(layout.control_plane_log, os.O_WRONLY | os.O_APPEND), "ab") as log_file:
        process = subprocess.Popen(  # nosec B603  # a list of arguments, no shell
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(layout.root),
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leader = current_leader(store)
        # Ready once it leads and has registered its nodes (it takes the lease first).
        if leader is not None and store.list(Node):
            return leader, True
        if process.poll() is not None:
            raise DaemonError(
                f"the control plane exited with code {process.returncode}; see {layout.control_plane_log}"
            )
        store.wait_for_change(store.latest_seq(), 0.02)
    _stop_started(process)
    raise DaemonError(
        f"the control plane did not start within {timeout:.0f}s, so it was stopped; see {layout.control_plane_log}"
    )


def _stop_started(process: subprocess.Popen[bytes]) -> None:
    """Stop a control plane this call started and gave up on: SIGTERM, then SIGKILL after 10 s."""
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def stop_control_plane(layout: StateLayout, *, timeout: float = 20.0) -> LeaderInfo | None:
    """Ask the leader to stop (SIGTERM) and wait until it has released the lease and its process has ended.

    A holder whose lease lapsed without being released (a pass that overran the TTL) still runs: it is stopped
    too, and waited for until its process is gone.

    Returns:
        The leader that was stopped, or None if none was running.

    Raises:
        DaemonError: the leader runs on another host, or did not stop in time.
    """
    store = SqliteStore(layout.database)
    try:
        leader = current_leader(store)
        lease = store.get_lease(LEASE_NAME)
        lapsed = leader is None and lease is not None and not holder_is_dead(lease)
        if lapsed and lease is not None:
            # Its lease ran out (a pass overran the TTL) but it has not released it: it still runs. Taken for
            # gone, it once ran on at full CPU after its benchmark had deleted its state directory.
            leader = _holder(lease.holder, lease.holder_info or {})
        if leader is None:
            return None
        if leader.pid is None or leader.host != socket.gethostname():
            raise DaemonError(f"the control plane is led by {leader.holder} on another host; stop it there")
        ticks = process_start_ticks(leader.pid)
        try:
            os.kill(leader.pid, signal.SIGTERM)
        except ProcessLookupError:
            return leader
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # A lapsed lease says nothing of the process: then its end is the process's. A released one says the
            # process is on its way out, not out: a caller that removes the state directory next must not race it.
            released = lapsed or current_leader(store) is None
            if released and process_start_ticks(leader.pid) != ticks:
                return leader
            store.wait_for_change(store.latest_seq(), 0.05)
        raise DaemonError(f"the control plane (pid {leader.pid}) did not stop within {timeout:.0f}s")
    finally:
        store.close()
