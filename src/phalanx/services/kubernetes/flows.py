"""Sweeps and pipeline runs on Kubernetes: the operator runs the controllers written once over the port.

The sweep controller (``services.sweeps.controller``) and the pipeline controller
(``services.pipelines.controller``) are the embedded control plane's, unchanged: here each runs on a thread of
the operator, over a ``CachedKubeBackend`` that reads the operator's informers (TrainingJobs, JobTypes, and this
module's Sweeps, Pipelines and PipelineRuns), so a pass costs no LIST. A thread's pass runs when a watch brings a
change to one of its kinds (a Sweep, or a TrainingJob labelled ``phalanx.dev/sweep``; a PipelineRun, a Pipeline,
or a TrainingJob or Sweep labelled ``phalanx.dev/pipelinerun``), when a running trial's log is due to be read for
its ``phalanx-metric`` lines (``SweepController.due_in``), and at least every ``period_s``. A pass that wrote
something is followed at once by another, as on the embedded runtime. Trials and steps are TrainingJobs the
operator itself then reconciles.

Where the state lives (``FlowSettings``; docs/sweeps.md and docs/pipelines.md, "On Kubernetes"):

- **Studies**: an Optuna storage URL (``--sweep-storage``). In production a PostgreSQL database
  (``postgresql+psycopg://...``), which outlives the operator's Pod; by default a SQLite file in the operator's
  state directory (``--state-dir``; the install mounts an ``emptyDir`` there, which survives the container's
  restarts but not the Pod's replacement).
- **Artifacts and the step cache**: ``--artifact-store``, a directory (default ``<state dir>/artifacts``) or an
  fsspec URL (``s3://``, ``gs://``). A step's process reads and writes files under the store's paths, and the
  operator collects its outputs there, so they must reach the step's Pods: with ``--artifact-volume-claim``
  the store's directory is on that PersistentVolumeClaim (mounted in the operator at the store's path) and
  every step job mounts the same claim at the same path (``core.pipelines.step_files``). Without it, or with an
  object store, steps with file inputs or outputs fail at once, saying so (the operator also logs it at start);
  parameter-only steps run either way.

Nothing here is remembered between passes that a restart would need: the objects, their statuses and the study
database hold it, as the controllers require.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from phalanx.adapters.artifacts import ArtifactStore, ArtifactStoreError
from phalanx.adapters.clock import Clock
from phalanx.adapters.kubernetes.api import PIPELINERUNS, PIPELINES, SWEEPS, KubeApi
from phalanx.adapters.kubernetes.informer import Informer, Signal
from phalanx.core.pipelines.step_files import store_warning
from phalanx.core.pipelines.steps import RUN_LABEL
from phalanx.core.sweeps.substitute import SWEEP_LABEL
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.pipelines import Pipeline, PipelineRun
from phalanx.model.sweeps import Sweep
from phalanx.services.kubernetes.cached_backend import CachedKubeBackend
from phalanx.services.kubernetes.operations import KubeBackend
from phalanx.services.pipelines.controller import PipelineController
from phalanx.services.sweeps.controller import SweepController
from phalanx.services.sweeps.study import LazyStudies, optuna_studies

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path("/var/lib/phalanx/state")
# After a pass that wrote something the next starts this soon: the watch events of its writes come meanwhile.
_AGAIN_S = 0.05


@dataclass(frozen=True)
class FlowSettings:
    """Where the operator keeps the sweeps' studies and the pipelines' artifacts, and how often it looks.

    Attributes:
        state_dir: the operator's own directory (the install's ``emptyDir``); the defaults below live there.
        sweep_storage: the Optuna storage URL of the studies; None: ``sqlite:///<state_dir>/sweeps.db``.
        artifact_store: the pipelines' artifact store (a directory or an fsspec URL); None: ``<state_dir>/artifacts``.
        artifact_volume_claim: the PersistentVolumeClaim the store's directory is on (mounted in the operator at
            the store's path); step jobs mount it at the same path. None: step Pods cannot see the store.
        period_s: the longest wait between two passes of a controller.
    """

    state_dir: Path = DEFAULT_STATE_DIR
    sweep_storage: str | None = None
    artifact_store: str | None = None
    artifact_volume_claim: str | None = None
    period_s: float = 2.0

    @property
    def study_url(self) -> str:
        """The studies' storage URL."""
        return self.sweep_storage or f"sqlite:///{self.state_dir / 'sweeps.db'}"

    @property
    def artifacts_url(self) -> str:
        """The artifact store's URL or directory."""
        return self.artifact_store or str(self.state_dir / "artifacts")


class Controller(Protocol):
    """A controller written once over the port: one level-triggered pass, True when it wrote something."""

    def sync(self) -> bool: ...  # noqa: D102


def _no_timer() -> float | None:
    return None


@dataclass(frozen=True)
class _Loop:
    """One controller's thread: what runs, what wakes it, and when it is due regardless (None: no timer)."""

    name: str
    controller: Controller
    signal: Signal
    due_in: Callable[[], float | None] = _no_timer


class KubeFlows:
    """The sweep and pipeline controllers of the operator, their informers and their threads.

    Args:
        api: the API (as the operator's identity).
        settings: where the studies and artifacts live.
        jobs: the operator's TrainingJob informer (shared: one cache of jobs per operator).
        jobtypes: the operator's JobType informer.
        current_jobtypes: the JobTypes jobs are validated against.
        clock: the clock.
        component, identity: who the Events say reported them.
    """

    def __init__(
        self,
        api: KubeApi,
        settings: FlowSettings,
        *,
        jobs: Informer,
        jobtypes: Informer,
        current_jobtypes: Callable[[], Mapping[str, JobType]],
        clock: Clock,
        component: str,
        identity: str,
    ) -> None:
        self.settings = settings
        self.sweep_signal = Signal()
        self.pipeline_signal = Signal()
        self.sweeps = Informer(api, SWEEPS, signal=self.sweep_signal, on_change=self._sweep_changed)
        self.pipelines = Informer(api, PIPELINES, signal=self.pipeline_signal)
        self.runs = Informer(api, PIPELINERUNS, signal=self.pipeline_signal)
        caches: dict[type, Informer] = {TrainingJob: jobs, JobType: jobtypes, Sweep: self.sweeps}
        caches.update({Pipeline: self.pipelines, PipelineRun: self.runs})
        self.backend = CachedKubeBackend(
            api,
            caches,
            current_jobtypes,
            clock=clock,
            component=component,
            instance=identity,
            artifact_claim=settings.artifact_volume_claim,
        )
        self.sweep_controller = SweepController(
            self.backend,
            LazyStudies(lambda: optuna_studies(settings.study_url, "phalanx-operator")),
            clock,
        )
        self.pipeline_controller: PipelineController | None = None
        try:
            artifacts = ArtifactStore(settings.artifacts_url, staging=settings.state_dir / "artifact-staging")
        except ArtifactStoreError as error:
            log.error("pipeline runs wait: the artifact store %s cannot be used: %s", settings.artifacts_url, error)
        else:
            self.pipeline_controller = PipelineController(self.backend, artifacts, clock)
            warning = store_warning(self.backend.step_files, str(artifacts.root) if artifacts.is_local else None)
            if warning is not None:
                log.warning("%s", warning)
        self._threads: list[threading.Thread] = []

    @staticmethod
    def served(backend: KubeBackend) -> bool:
        """Whether the cluster serves Sweeps, Pipelines and PipelineRuns (an older install does not)."""
        return all(backend.installed(resource) for resource in (SWEEPS, PIPELINES, PIPELINERUNS))

    @property
    def informers(self) -> list[Informer]:
        """The caches this adds to the operator's."""
        return [self.sweeps, self.pipelines, self.runs]

    # -- what changed -------------------------------------------------------------------------------------------

    def job_changed(self, obj: dict[str, Any]) -> None:
        """A TrainingJob changed (the operator's informer): a trial's wakes the sweeps, a step's the pipelines."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if SWEEP_LABEL in labels:
            self.sweep_signal.set()
        if RUN_LABEL in labels:
            self.pipeline_signal.set()

    def _sweep_changed(self, kind: str, obj: dict[str, Any]) -> None:
        if RUN_LABEL in ((obj.get("metadata") or {}).get("labels") or {}):
            self.pipeline_signal.set()  # a sweep step of a pipeline run

    # -- the threads ----------------------------------------------------------------------------------------------

    def start(self, stop: threading.Event) -> None:
        """Run each controller on a thread of its own until ``stop`` is set (the informers must be synced)."""
        # A running trial's metric lines change nothing a watch sees: the sweeps' thread wakes when they are due.
        loops = [_Loop("sweeps", self.sweep_controller, self.sweep_signal, self.sweep_controller.due_in)]
        if self.pipeline_controller is not None:
            loops.append(_Loop("pipelines", self.pipeline_controller, self.pipeline_signal))
        for loop in loops:
            thread = threading.Thread(target=self._loop, args=(loop, stop), name=f"operator-{loop.name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def wake(self) -> None:
        """End both threads' waits (at stop)."""
        self.sweep_signal.set()
        self.pipeline_signal.set()

    def join(self, timeout: float) -> None:
        """Wait for the threads to end."""
        for thread in self._threads:
            thread.join(timeout)

    def _loop(self, loop: _Loop, stop: threading.Event) -> None:
        failure = ""
        while not stop.is_set():
            try:
                wrote = loop.controller.sync()
            except Exception as error:
                # A bug in one pass (or the API server failing it) must not end the operator: the next pass starts
                # from the caches again.
                if repr(error) != failure:
                    log.exception("%s pass failed; retrying every %.0f s", loop.name, self.settings.period_s)
                    failure = repr(error)
                wrote = False
            else:
                failure = ""
            if wrote:
                stop.wait(_AGAIN_S)
                continue
            due = loop.due_in()
            loop.signal.wait(self.settings.period_s if due is None else max(0.0, min(due, self.settings.period_s)))
