"""The embedded control plane: node registration, then controller, scheduler and node runtime in one loop.

Only the lease holder acts. Pipeline runs advance in the same passes (``services.pipelines.controller``), with
their artifacts in ``ControlPlaneConfig.artifact_store`` (the state directory's ``artifacts`` folder by default).
The loop is level-triggered: each pass reads the store and processes, acts, and
sleeps until something may have changed: the store (a write by any process), a replica's process (its shim
exited), a timer that is due. A pass that changed something is followed at once by another, so a submitted job
runs through Queued → Admitted → Downloading → Running within a few passes. Sweeps are run in the same passes
by the sweep controller written once over the port (``services.sweeps``): their trials are ordinary jobs, with
the studies in ``sweeps.db``. Once per wake, the history recorder (``services.history``) keeps the jobs that
ended in the job history (``history.db``, or ``ControlPlaneConfig.history_url``), opened in a thread of its
own so that the first passes do not wait for it. A pass also checks the GPUs'
health when due, every ``gpu_check_seconds`` (``services.embedded.gpu_watch``), as the node agent does on
Kubernetes.

The sleep is one ``poll(2)`` on the shims' exit descriptors (pidfds, see ``NodeRuntime``) and on a ``Bell``
that the local API rings when it writes, so neither a finished replica nor a job submitted through the API
waits for a polling interval. Writes by other processes (the SDK, other CLI verbs) are seen by checking the
store between slices of that sleep, every 2 ms at first and every 20 ms after a while without any.

A store that cannot be used for a while (locked by another process, a full disk: ``StoreUnavailableError``)
does not stop it: it renews nothing and acts on nothing until the store works again, retrying with backoff and
logging each episode once (``store_faults``). Replicas keep running meanwhile; those that end are recorded
when the store takes writes again.

Losing the lease to another control plane (it took over while ours could not renew in time) does not stop it
either: it steps down to standby at once, acting on nothing more and leaving its replicas' shims alone (they are
processes of their own, which the new leader adopts), and takes over again, adopting them in turn, once the
lease is free.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

from phalanx.adapters.artifacts import ArtifactStore, ArtifactStoreError
from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.devices import discover_local_node, load_inventory
from phalanx.adapters.executor import LocalExecutor
from phalanx.adapters.store import AlreadyExistsError, SqliteStore, StoreError, StoreUnavailableError, UnreadableError
from phalanx.core.scheduling.config import DEFAULT_POLICY, SchedulerConfig
from phalanx.model.nodes import Node
from phalanx.services.embedded.api_server import HttpLimits, LocalApiServer
from phalanx.services.embedded.controller import JobController
from phalanx.services.embedded.datasets import DatasetManager
from phalanx.services.embedded.gpu_watch import GpuWatch
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.leadership import LEASE_NAME, Leadership
from phalanx.services.embedded.node_runtime import NodeRuntime
from phalanx.services.embedded.operations import SUBMIT_DIR_ANNOTATION, SqliteBackend, seed_builtin_jobtypes
from phalanx.services.embedded.scheduler import SchedulerService
from phalanx.services.embedded.state_watch import StateDirWatch
from phalanx.services.embedded.store_faults import StoreFaults
from phalanx.services.history import HistoryRecorder, HistorySink, OpeningSink, open_history_store
from phalanx.services.metrics import SchedulerMetrics
from phalanx.services.pipelines.controller import PipelineController
from phalanx.services.sweeps.controller import SweepController
from phalanx.services.sweeps.study import LazyStudies, StudyStore, optuna_studies

log = logging.getLogger(__name__)
T = TypeVar("T")
STOP_CHECK_SECONDS = 0.1
# How often the sleep looks for other processes' writes: at first, and at most after a quiet while (as the
# store's own wait_for_change does).
STORE_CHECK_SECONDS = 0.002
MAX_STORE_CHECK_SECONDS = 0.02
# How often a running trial's log (a local file's tail) is read for its metric lines: early stopping acts within
# about this much of a report.
SWEEP_LOG_SECONDS = 0.25


class Bell:
    """Wakes the control plane's sleep from another thread of this process (the local API, after a write).

    A non-blocking pipe: ringing writes a byte, the sleeper polls the read end. A full pipe means a ring is
    pending already, so ringing never blocks. A ring after ``close`` does nothing: a request thread of the API
    may outlive the loop, and its ring must not reach whatever file reuses the descriptor's number.
    """

    def __init__(self) -> None:
        self.fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._closed = False

    def ring(self) -> None:
        """Wake the sleeper (now or at its next sleep)."""
        with self._lock, contextlib.suppress(BlockingIOError):
            if not self._closed:
                os.write(self._write_fd, b"\0")

    def silence(self) -> None:
        """Forget the rings so far."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, 4096):
                pass

    def close(self) -> None:
        """Close both ends; later rings are ignored."""
        with self._lock:
            self._closed = True
            os.close(self.fd)
            os.close(self._write_fd)


def study_store(layout: StateLayout) -> StudyStore:
    """The sweeps' studies in the state directory (``sweeps.db``); without Optuna, sweeps wait saying why."""
    return optuna_studies(f"sqlite:///{layout.sweeps_database}", "the control plane")


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
    cache_bytes: int | None = None
    api_limits: HttpLimits = field(default_factory=HttpLimits)
    gpu_check_seconds: float = 10.0
    gpu_fault_file: Path | None = None
    scheduler_policy: SchedulerConfig = DEFAULT_POLICY
    #: Where pipeline steps keep their artifacts and the step cache: a local folder or an fsspec URL (s3://, gs://
    #: with the extras). None: the state directory's ``artifacts`` folder.
    artifact_store: str | None = None
    #: The job history's database: a SQLAlchemy URL (``postgresql://…``), or None for ``history.db`` in the state
    #: directory. Without the ``history`` extra, jobs run and nothing is recorded (said once in the log).
    history_url: str | None = None
    #: The history's retention, applied whenever a job is recorded: records of jobs that ended longer ago than
    #: this many days go, and all but the newest ``history_keep``. None: no limit.
    history_keep_days: float | None = None
    history_keep: int | None = None
    #: Where the scheduler counts admissions, preemptions and cycle durations (``services.metrics``): the registry
    #: the REST API's /metrics serves with ``phalanx up --listen``. None: not counted.
    metrics: SchedulerMetrics | None = None


@dataclass
class ControlPlane:
    """The local control plane of one state directory."""

    config: ControlPlaneConfig
    clock: Clock = field(default_factory=SystemClock)

    def __post_init__(self) -> None:
        self.layout = StateLayout(self.config.state_dir)
        self.layout.ensure()
        self.store = SqliteStore(self.layout.database)
        self.state_watch = StateDirWatch(self.layout.root, self.layout.database)
        self.leadership = Leadership(self.store, ttl_seconds=self.config.lease_ttl_seconds)
        self.is_leader = False
        self.faults = StoreFaults()
        #: Why it stopped by itself (its state directory was removed or replaced); None when it was told to stop.
        self.abandoned: str | None = None

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
            try:
                current = self.store.try_get(Node, node.metadata.namespace, node.metadata.name)
            except UnreadableError:
                # Observed state, not the user's: what is observed now replaces a row that cannot be read.
                self.store.delete_row("Node", node.metadata.namespace, node.metadata.name)
                current = None
            if current is None:
                with contextlib.suppress(AlreadyExistsError):  # another process registered it first
                    self.store.create(node)
            else:
                updated = self.store.update(node.model_copy(update={"metadata": current.metadata}))
                self.store.update_status(node.model_copy(update={"metadata": updated.metadata}))
        return {node.metadata.name: node for node in nodes}

    def _register(self) -> dict[str, Node]:
        """Record the nodes and the built-in JobTypes (both idempotent, so a retry after a fault is safe)."""
        nodes = self.register_nodes()
        seed_builtin_jobtypes(self.store)
        return nodes

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
                try:
                    self.leadership.release()
                    log.info("released the control-plane lease")
                except StoreError as err:
                    # It expires by itself; a standby waits out its time-to-live instead of taking over at once.
                    log.warning("could not release the control-plane lease (%s); it expires by itself", err)
            self.store.close()

    def _retrying(self, stop: threading.Event, action: Callable[[], T]) -> T | None:
        """Run ``action`` until the store lets it through (None if ``stop`` is set first)."""
        while not stop.is_set():
            try:
                result = action()
            except StoreUnavailableError as err:
                stop.wait(self.faults.failed(err))
                continue
            self.faults.succeeded()
            return result
        return None

    def _acquire(self) -> bool:
        """Try to take the lease once; say who holds it the first time it is someone else."""
        if self.leadership.acquire():
            return True
        if not getattr(self, "_said_standby", False):
            lease = self.store.get_lease(LEASE_NAME)
            log.info("standing by: the control plane lease is held by %s", lease.holder if lease else "?")
            self._said_standby = True
        return False

    def _run(self, stop: threading.Event) -> None:
        """Stand by until the lease is ours, lead until it is lost or ``stop`` is set; again and again."""
        while not stop.is_set():
            while not stop.is_set() and not self._retrying(stop, self._acquire):
                stop.wait(min(1.0, self.config.lease_ttl_seconds / 3))
            if stop.is_set():
                return
            self._lead_until_lost(stop)

    def _lead_until_lost(self, stop: threading.Event) -> None:
        """Lead with a fresh runtime (it adopts the replicas it finds) until ``stop`` or the lease is lost."""
        self.is_leader = True
        log.info("leading as %s", self.leadership.holder)
        # Serve the API before registering nodes: clients treat "leads and has nodes" as ready. It shares our
        # store, so that its long polls wake at once on our writes, and rings the bell on its own writes.
        bell = Bell()
        api = LocalApiServer(self.layout, store=self.store, on_write=bell.ring, limits=self.config.api_limits)
        api.start()
        try:
            nodes = self._retrying(stop, self._register)
            if nodes is not None:
                self._lead(stop, nodes, bell)
        finally:
            api.stop()
            bell.close()

    def _lead(self, stop: threading.Event, nodes: dict[str, Node], bell: Bell) -> None:
        executor = LocalExecutor(self.layout.root / "runs")
        runtime = NodeRuntime(self.store, executor, self.layout, nodes, grace_seconds=self.config.grace_seconds)
        gpus = GpuWatch(
            self.store,
            nodes,
            inventory=self.config.inventory,
            fault_file=self.config.gpu_fault_file,
            interval_s=self.config.gpu_check_seconds,
            clock=self.clock,
        )
        try:
            self._loop(stop, runtime, gpus, bell)
        finally:
            runtime.close()
            gpus.close()

    def _loop(self, stop: threading.Event, runtime: NodeRuntime, gpus: GpuWatch, bell: Bell) -> None:
        datasets = DatasetManager(self.store, self.layout, wake=bell.ring, cache_capacity=self.config.cache_bytes)
        for leftover in datasets.materializer.sweep_leftovers():
            log.info("removed %s, left by an interrupted materialisation", leftover)
        try:
            self._passes(stop, runtime, gpus, bell, datasets)
        finally:
            datasets.close()

    def _passes(
        self, stop: threading.Event, runtime: NodeRuntime, gpus: GpuWatch, bell: Bell, datasets: DatasetManager
    ) -> None:
        history = OpeningSink(self._history_sink, on_ready=bell.ring)
        recorder = HistoryRecorder(
            SqliteBackend(self.store, self.layout, clock=self.clock), history, self.clock, opened=history.is_open
        )
        try:
            self._run_passes(stop, runtime, gpus, bell, datasets, recorder, history)
        finally:
            history.close()

    def _history_sink(self) -> HistorySink | None:
        """The job history's database, opened and migrated; None (logged) when the history cannot be kept."""
        url = self.config.history_url or f"sqlite:///{self.layout.history_database}"
        missing = "the job history is off: install it with pip install 'phalanx[history]'"
        return open_history_store(url, without_extra=missing)

    def _retain_history(self, recorder: HistoryRecorder, *, tell: bool = True) -> bool:
        """Apply the history's retention (``history_keep_days``, ``history_keep``); False when it failed.

        A failure is logged (at warning when ``tell``, the first of an episode) and left to the caller to retry.
        """
        days, keep = self.config.history_keep_days, self.config.history_keep
        if days is None and keep is None:
            return True
        older_than = None if days is None else self.clock.now() - timedelta(days=days)
        try:
            dropped = recorder.sink.prune(older_than=older_than, keep=keep)
        except Exception as err:
            (log.warning if tell else log.debug)(
                "job history: retention failed (%s); tried again at the next wake", err
            )
            return False
        if dropped:
            log.info("job history: dropped %d records past its retention", dropped)
        return True

    def _run_passes(
        self,
        stop: threading.Event,
        runtime: NodeRuntime,
        gpus: GpuWatch,
        bell: Bell,
        datasets: DatasetManager,
        recorder: HistoryRecorder,
        history: OpeningSink,
    ) -> None:
        controller = JobController(
            self.store,
            self.layout,
            identity=self.leadership.holder,
            data=datasets,
            on_removing=recorder.removing,  # waits for the history to open: the job is seen only now
        )
        sweeps = SweepController(
            SqliteBackend(self.store, self.layout, clock=self.clock),
            LazyStudies(lambda: study_store(self.layout)),
            self.clock,
            inherited_annotations=frozenset({SUBMIT_DIR_ANNOTATION}),
            passthrough=(StoreError,),  # the loop backs off on the store's faults, as for every step
            log_every_s=SWEEP_LOG_SECONDS,
        )
        pipelines = self._pipeline_controller()
        scheduler = SchedulerService(
            self.store,
            identity=self.leadership.holder,
            policy=self.config.scheduler_policy,
            metrics=self.config.metrics,
        )
        retention = "done"  # the history's retention: done, due (a job was recorded) or failed (retried)
        renew_every = self.config.lease_ttl_seconds / 3
        last_renew = last_maintenance = self.clock.monotonic()
        seq = self._retrying(stop, self.store.latest_seq)
        history_seq: int | None = None
        failed: str | None = None
        while seq is not None and not stop.is_set():
            now = self.clock.monotonic()
            wake: float | None = None
            try:
                # Inside the try: a store that cannot be renewed in is waited for like any other fault, and no
                # pass acts until the lease is renewed again.
                if now - last_renew >= renew_every:
                    if (gone := self.state_watch.problem()) is not None:
                        self._abandon(gone, runtime, stop)
                        return
                    if not self.leadership.renew():
                        self._step_down()
                        return
                    last_renew = now
                for _ in range(self.config.max_busy_passes):
                    seq = self.store.latest_seq()
                    changed_runtime = gpus.sync()
                    changed_runtime |= runtime.sync()
                    changed_runtime |= datasets.sync()
                    # Before the sweep and job controllers: a step's Sweep or job made here is taken up in this pass.
                    changed_runtime |= pipelines.sync() if pipelines is not None else False
                    changed_runtime |= sweeps.sync()  # before the controller: a trial made now is queued now
                    changed_jobs, wake = controller.sync()
                    changed_sched = scheduler.sync()
                    if not (changed_runtime or changed_jobs or changed_sched):
                        break
                # Once per wake, not per busy pass, and only when the store moved: it lists every job, and a job
                # ends or goes only by a write. A history that failed is retried on every wake until it works.
                if not history.is_off() and (recorder.behind or seq != history_seq):
                    history_seq = seq
                    if recorder.sync():
                        retention = "due"
                if retention != "done":
                    # A retention that failed (the database briefly locked by a reader) is tried again at every
                    # wake, not only when the next job is recorded: after the last job there may be none.
                    retention = "done" if self._retain_history(recorder, tell=retention == "due") else "failed"
                if now - last_maintenance >= self.config.maintenance_seconds:
                    self._maintain()
                    last_maintenance = now
                self.faults.succeeded()
            except StoreUnavailableError as err:
                # Locked by another process or a full disk: logged once per episode, retried with backoff.
                wake = self.faults.failed(err)
            except StoreError:
                # The database was busy or briefly unreadable: keep leading and try again shortly.
                log.exception("a pass failed on the store; retrying")
                wake = 0.5
            except Exception as err:
                # Steps set aside the objects they fail on (services.embedded.quarantine); anything that still escapes
                # must not stop the control plane either. Said once per distinct error, then retried each pass.
                if repr(err) != failed:
                    log.exception("a pass failed; retrying on every pass until it succeeds")
                failed, wake = repr(err), 0.5
            else:
                failed = None
            # Sleep until a write (any process's) or a replica's exit wakes us, a timer is due, or the lease
            # needs renewing. Exits that nothing announces (see NodeRuntime.polling) are polled for.
            period = self.config.poll_seconds if runtime.polling else min(self.config.idle_seconds, renew_every)
            timeout = period if wake is None else max(0.0, min(period, wake))
            if (launch_in := runtime.launch_retry_in()) is not None:
                timeout = min(timeout, launch_in)  # a launch deferred by a fault of the machine is due
            if (read_in := sweeps.due_in()) is not None:
                timeout = min(timeout, read_in)  # a running trial's metric lines are due to be read
            if (check_in := gpus.due_in()) is not None:
                timeout = min(timeout, check_in)  # the GPUs' health is due to be checked
            if self.faults.active and wake is not None:
                timeout = wake  # the backoff, however often polling would look otherwise
            runtime.exits_noticed(self._wait(stop, seq, timeout, bell, runtime.exit_fds(), datasets.has_results))

    def _pipeline_controller(self) -> PipelineController | None:
        """The pipeline controller over this store and the configured artifact store (None if that is unusable)."""
        url = self.config.artifact_store or str(self.layout.artifacts)
        try:
            artifacts = ArtifactStore(url, staging=self.layout.artifact_staging)
        except ArtifactStoreError as err:
            log.error("pipeline runs wait: %s", err)
            return None
        backend = SqliteBackend(self.store, self.layout, clock=self.clock)
        # The store's faults end the pass: the loop backs off on them, as for every step.
        return PipelineController(backend, artifacts, self.clock, passthrough=(StoreError,))

    def _abandon(self, why: str, runtime: NodeRuntime, stop: threading.Event) -> None:
        """Stop leading for good: the state directory is gone, and with it every job its replicas ran for."""
        stopped = runtime.abandon()
        log.error(
            "%s; stopping this control plane and the %d replica(s) it ran, which nothing can see or adopt now. "
            "Start again with `phalanx up` (a fresh state directory) and submit the jobs again",
            why,
            stopped,
        )
        self.abandoned = why
        stop.set()

    def _step_down(self) -> None:
        """Another control plane holds the lease now: stop acting at once and go back to standing by."""
        self.is_leader = False
        self._said_standby = False  # say again who holds it
        try:
            lease = self.store.get_lease(LEASE_NAME)
            holder = lease.holder if lease else "nobody"
        except StoreError:
            holder = "another control plane"
        log.warning(
            "lost the control-plane lease to %s; stepping down to standby (replicas keep running) "
            "and taking over again once the lease is free",
            holder,
        )

    def _wait(
        self,
        stop: threading.Event,
        seq: int,
        timeout: float,
        bell: Bell,
        exit_fds: list[int],
        work_done: Callable[[], bool] = lambda: False,
    ) -> set[int]:
        """Sleep until the store moves past ``seq``, the bell rings, an exit descriptor is readable, or ``timeout``.

        Slices are short enough that other processes' writes are seen within ``MAX_STORE_CHECK_SECONDS`` and a
        stop request within ``STOP_CHECK_SECONDS``.

        Returns:
            The descriptors that are readable, the bell's included; empty when the store moved or time ran out.
        """
        bell.silence()  # rung for writes made before ``seq``, which this pass has seen
        if work_done():
            # Background work (the dataset manager's) finished after this pass looked and rang before the
            # silence above: its ring is gone, so do not sleep on it.
            return set()
        poller = select.poll()
        poller.register(bell.fd, select.POLLIN)
        for fd in exit_fds:
            poller.register(fd, select.POLLIN)
        deadline = self.clock.monotonic() + timeout
        interval = STORE_CHECK_SECONDS
        store_readable = True
        while not stop.is_set():
            try:
                if store_readable and self.store.wait_for_change(seq, 0):
                    return set()
            except StoreError:
                store_readable = False  # the pass after this sleep meets the fault and backs off
            if store_readable is False and not self.faults.active:
                return set()
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                return set()
            ready = poller.poll(max(1, round(min(remaining, interval, STOP_CHECK_SECONDS) * 1000)))
            if ready:
                return {fd for fd, _events in ready}
            interval = min(interval * 1.5, MAX_STORE_CHECK_SECONDS)
        return set()
