"""The embedded control plane: node registration, then controller, scheduler and node runtime in one loop.

Only the lease holder acts. The loop is level-triggered: each pass reads the store and processes, acts, and
sleeps until the store changes (a write by any process), a timer is due, or the poll interval passes (process
exits are noticed by polling). A pass that changed something is followed at once by another, so a submitted
job runs through Queued → Admitted → Downloading → Running within a few passes.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from phalanx.adapters.clock import SystemClock
from phalanx.adapters.devices import discover_local_node, load_inventory
from phalanx.adapters.executor import LocalExecutor
from phalanx.adapters.store import AlreadyExistsError, SqliteStore, StoreError
from phalanx.model.nodes import Node
from phalanx.services.api_server import LocalApiServer
from phalanx.services.controller import JobController
from phalanx.services.layout import StateLayout
from phalanx.services.leadership import Leadership
from phalanx.services.node_runtime import NodeRuntime
from phalanx.services.operations import seed_builtin_jobtypes
from phalanx.services.scheduler import SchedulerService

log = logging.getLogger(__name__)
STOP_CHECK_SECONDS = 0.1


@dataclass
class ControlPlaneConfig:
    """How the control plane runs."""

    state_dir: Path
    inventory: Path | None = None
    node_name: str | None = None
    lease_ttl_seconds: float = 5.0
    poll_seconds: float = 0.01
    idle_seconds: float = 1.0
    grace_seconds: float = 10.0
    max_busy_passes: int = 50
    maintenance_seconds: float = 600.0
    keep_changes: int = 100_000
    keep_events_days: float = 7.0


@dataclass
class ControlPlane:
    """The local control plane of one state directory."""

    config: ControlPlaneConfig
    clock: SystemClock = field(default_factory=SystemClock)

    def __post_init__(self) -> None:
        self.layout = StateLayout(self.config.state_dir)
        self.layout.ensure()
        self.store = SqliteStore(self.layout.database)
        self.leadership = Leadership(self.store, ttl_seconds=self.config.lease_ttl_seconds)
        self.is_leader = False

    def register_nodes(self) -> dict[str, Node]:
        """Discover this machine (or load the simulated inventory) and record the nodes in the store."""
        if self.config.inventory is not None:
            nodes = load_inventory(self.config.inventory)
        else:
            nodes = [discover_local_node(self.config.node_name)]
        for existing in self.store.list(Node):
            if existing.metadata.name not in {n.metadata.name for n in nodes}:
                self.store.delete(Node, existing.metadata.namespace, existing.metadata.name)
        for node in nodes:
            node = node.model_copy(
                update={"status": node.status.model_copy(update={"heartbeat_time": self.clock.now()})}
            )
            current = self.store.try_get(Node, node.metadata.namespace, node.metadata.name)
            if current is None:
                with contextlib.suppress(AlreadyExistsError):  # another process registered it first
                    self.store.create(node)
            else:
                updated = self.store.update(node.model_copy(update={"metadata": current.metadata}))
                self.store.update_status(node.model_copy(update={"metadata": updated.metadata}))
        return {node.metadata.name: node for node in nodes}

    def _maintain(self) -> None:
        """Bound the store's growth: old change-feed entries and events go; objects stay."""
        dropped = self.store.compact_changes(self.config.keep_changes)
        pruned = self.store.prune_events(self.clock.now() - timedelta(days=self.config.keep_events_days))
        if dropped or pruned:
            log.info("maintenance: dropped %d change-feed entries and %d old events", dropped, pruned)

    def run(self, stop: threading.Event) -> None:
        """Lead (or wait to lead) until ``stop`` is set; then release the lease."""
        try:
            self._run(stop)
        finally:
            if self.is_leader:
                self.leadership.release()
                log.info("released the control-plane lease")
            self.store.close()

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set() and not self.leadership.acquire():
            if not getattr(self, "_said_standby", False):
                lease = self.store.get_lease("controlplane")
                log.info("standing by: the control plane lease is held by %s", lease.holder if lease else "?")
                self._said_standby = True
            stop.wait(min(1.0, self.config.lease_ttl_seconds / 3))
        if stop.is_set():
            return
        self.is_leader = True
        log.info("leading as %s", self.leadership.holder)
        # Serve the API before registering nodes: clients treat "leads and has nodes" as ready.
        api = LocalApiServer(self.layout)
        api.start()
        try:
            nodes = self.register_nodes()
            seed_builtin_jobtypes(self.store)
            self._lead(stop, nodes)
        finally:
            api.stop()

    def _lead(self, stop: threading.Event, nodes: dict[str, Node]) -> None:
        executor = LocalExecutor(self.layout.root / "runs")
        runtime = NodeRuntime(self.store, executor, self.layout, nodes, grace_seconds=self.config.grace_seconds)
        controller = JobController(self.store, self.layout, identity=self.leadership.holder)
        scheduler = SchedulerService(self.store, identity=self.leadership.holder)
        renew_every = self.config.lease_ttl_seconds / 3
        last_renew = last_maintenance = self.clock.monotonic()
        seq = self.store.latest_seq()
        while not stop.is_set():
            now = self.clock.monotonic()
            if now - last_renew >= renew_every:
                if not self.leadership.renew():
                    log.error("lost the control-plane lease; stopping")
                    self.is_leader = False
                    return
                last_renew = now
            wake: float | None = None
            try:
                for _ in range(self.config.max_busy_passes):
                    seq = self.store.latest_seq()
                    changed_runtime = runtime.sync()
                    changed_jobs, wake = controller.sync()
                    changed_sched = scheduler.sync()
                    if not (changed_runtime or changed_jobs or changed_sched):
                        break
                if now - last_maintenance >= self.config.maintenance_seconds:
                    self._maintain()
                    last_maintenance = now
            except StoreError:
                # The database was busy or briefly unreadable: keep leading and try again shortly.
                log.exception("a pass failed on the store; retrying")
                wake = 0.5
            # Process exits are not store writes: poll for them only while processes live. Otherwise sleep
            # until a write (any process's) wakes us, a timer is due, or the lease needs renewing.
            period = self.config.poll_seconds if runtime.watching else min(self.config.idle_seconds, renew_every)
            timeout = period if wake is None else max(0.0, min(period, wake))
            self._wait(stop, seq, timeout)

    def _wait(self, stop: threading.Event, seq: int, timeout: float) -> None:
        """Wait for a store change, in slices short enough that a stop request is honoured at once."""
        deadline = self.clock.monotonic() + timeout
        while not stop.is_set():
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0 or self.store.wait_for_change(seq, min(remaining, STOP_CHECK_SECONDS)):
                return
