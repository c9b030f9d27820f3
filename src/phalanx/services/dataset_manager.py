"""The dataset manager both backends run: when a Dataset is materialised, and what its status and events say.

A Dataset is materialised when its status does not hold the outcome of its current spec (``Dataset.settled``):
once, from its source, into the dataset store (``dataset_store.materialize_version``, versioned by content hash),
on a pool, so that no control loop waits for a download. Its status goes ``Pending`` (the source waits, e.g. for
its job) or ``Materializing`` (with progress) -> ``Ready`` (version, bytes, files, lineage, observedGeneration) or
``Failed`` (the sentence naming the field and the fix), with an event at each step; a Failed generation is final
until the spec changes. An outcome belongs to the Dataset object it started for (its uid), not to a namesake
created after a delete. The copies of Datasets that are gone leave the store.

Statuses and events go through the backend port's status side (``services.port.StatusWriter``: the SQLite store;
the API's status subresource). What else differs is ``DatasetSources``: how a Dataset is read now, which sources
it reads and from where. How data then reaches a node stays with each backend (local staging in
``services.embedded.datasets``; node agents on Kubernetes).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from phalanx.adapters.datasources import Materialized, SourceError, SourceRequest
from phalanx.core.clock import Clock
from phalanx.model.datasets import Dataset, DatasetPhase, JobOutputSource
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.masking import mask_url
from phalanx.services.dataset_store import (
    DatasetStore,
    human_bytes,
    materialize_version,
    progress_reporter,
    remove_unknown_datasets,
    sweep_leftovers,
)
from phalanx.services.outputs_storing import is_url
from phalanx.services.port import StatusWriter, Written

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceChoice:
    """How a backend reads a Dataset's source: a request (from ``base_dir``), or why it waits, or its refusal."""

    request: SourceRequest | None = None
    base_dir: Path = Path(".")
    waiting: str | None = None
    refusal: str | None = None


def from_job_choice(from_job: JobOutputSource, job: TrainingJob | None) -> SourceChoice:
    """How a Dataset ``fromJob`` reads its job's outputs, on either backend.

    From where the job's Succeeded status says they were stored (``status.artifacts``); else why it waits for the
    job, or why it cannot.
    """
    if job is None:
        return SourceChoice(waiting=f"waiting for job {from_job.job} (spec.source.fromJob.job) to exist and succeed")
    phase = Phase(job.status.phase)
    if phase == Phase.FAILED:
        return SourceChoice(
            refusal=(
                f"spec.source.fromJob.job: job {from_job.job} failed ({job.status.message}); rerun it, or point "
                "fromJob at a job that succeeded"
            )
        )
    if phase != Phase.SUCCEEDED:
        return SourceChoice(waiting=f"waiting for job {from_job.job} to succeed (it is {phase.value})")
    stored = job.status.artifacts
    if not stored:
        return SourceChoice(
            refusal=(
                f"spec.source.fromJob.job: job {from_job.job} succeeded but its outputs were not stored "
                f"({job.status.message}); store them (docs/kubernetes.md#outputs) and rerun the job, or read the "
                "data with spec.source.path or spec.source.url"
            )
        )
    field = "spec.source.fromJob.output"
    if is_url(stored):
        url = stored.rstrip("/") if from_job.output in (".", "") else f"{stored.rstrip('/')}/{from_job.output}"
        return SourceChoice(SourceRequest("url", url=url, field=field), Path("."))
    return SourceChoice(SourceRequest("path", path=str(Path(stored) / from_job.output), field=field), Path("."))


class DatasetSources(Protocol):
    """What the dataset manager reads of a backend besides the port: the Datasets as held now, their sources."""

    def current(self, namespace: str, name: str) -> Dataset | None:
        """The Dataset as the backend holds it now; None when it is gone (or cannot be read)."""

    def source(self, dataset: Dataset) -> SourceChoice:
        """How to read the Dataset's source, or why not (yet)."""


@dataclass(frozen=True)
class MaterializeOutcome:
    """What a finished materialisation makes of a Dataset: its status fields, and the event that says so."""

    changes: dict[str, Any]
    reason: str  # Materialized or MaterializeFailed
    message: str
    warning: bool


def materialize_outcome(future: Future[Materialized], generation: int, now: datetime) -> MaterializeOutcome:
    """The status of a Dataset whose materialisation of ``generation`` ended as ``future`` (done) did.

    A SourceError's sentence (naming the field and the fix) goes to the status as it is; anything else is a bug,
    logged with its traceback.
    """
    error = future.exception()
    if error is None:
        done = future.result()
        files = f"{len(done.files)} file{'' if len(done.files) == 1 else 's'}"
        message = f"{human_bytes(done.bytes)} in {files}, version {done.version[:19]}"
        changes = {
            "phase": DatasetPhase.READY,
            "version": done.version,
            "bytes": done.bytes,
            "files": len(done.files),
            "lineage": done.lineage,
            "message": message,
            "materialized_time": now,
            "observed_generation": generation,
        }
        return MaterializeOutcome(changes, "Materialized", f"{message}; {done.lineage}", warning=False)
    # A source masks the URLs it names; an unexpected error (a driver's, say) may not have, so mask here too:
    # this text becomes the status message and an event.
    text = mask_url(str(error) if isinstance(error, SourceError) else f"materialising failed: {error!r}")
    if not isinstance(error, SourceError):
        log.error("materialising failed", exc_info=error)
    changes = {"phase": DatasetPhase.FAILED, "message": text, "observed_generation": generation}
    return MaterializeOutcome(changes, "MaterializeFailed", text, warning=True)


@dataclass
class _Materialization:
    uid: str
    generation: int
    future: Future[Materialized]


class DatasetMaterializer:
    """Materialises Datasets into a dataset store and says so in their status and events, for either backend.

    ``wake`` is called (from a worker thread) when a materialisation finishes or has progress to show, to bring
    the next pass; progress is shown at most every ``progress_every_s`` seconds.
    """

    def __init__(
        self,
        port: StatusWriter,
        sources: DatasetSources,
        store: DatasetStore,
        pool: Executor,
        *,
        wake: Callable[[], None],
        clock: Clock,
        progress_every_s: float,
    ) -> None:
        self.port = port
        self.sources = sources
        self.store = store
        self._pool = pool
        self._wake = wake
        self._clock = clock
        self._every_s = progress_every_s
        self._lock = threading.Lock()  # progress arrives on worker threads
        self._running: dict[tuple[str, str], _Materialization] = {}
        self._progress: dict[tuple[str, str], str] = {}
        self._known: frozenset[tuple[str, str]] | None = None

    def sweep_leftovers(self) -> list[Path]:
        """Remove what materialisations interrupted by a crash left; only before the first pass. Returns what went."""
        return sweep_leftovers(self.store.root)

    def has_results(self) -> bool:
        """Whether a materialisation finished that ``collect`` would take up."""
        with self._lock:
            return any(work.future.done() for work in self._running.values())

    def materialize_if_due(self, dataset: Dataset) -> bool:
        """Materialise the Dataset if its status is not for its current spec, or show progress; whether it acted."""
        key = (dataset.metadata.namespace, dataset.metadata.name)
        with self._lock:
            running = self._running.get(key)
            progress = self._progress.get(key)
        if running is not None:
            if running.uid != (dataset.metadata.uid or "") or progress in (None, dataset.status.message):
                return False  # nothing new, or the progress of a deleted namesake
            return self.port.write_status(dataset, {"message": progress}) is not Written.UNCHANGED
        if dataset.settled:
            return False
        generation = dataset.metadata.generation
        choice = self.sources.source(dataset)
        if choice.refusal is not None:
            failed = {"phase": DatasetPhase.FAILED, "message": choice.refusal, "observed_generation": generation}
            written = self.port.write_status(dataset, failed)
            if written is Written.WROTE:
                self.port.record(dataset, "MaterializeFailed", choice.refusal, warning=True)
                log.warning("dataset %s/%s refused: %s", *key, choice.refusal)
            return written is not Written.UNCHANGED
        if choice.request is None:
            waiting = {"phase": DatasetPhase.PENDING, "message": choice.waiting}
            return self.port.write_status(dataset, waiting) is not Written.UNCHANGED
        incoming = self.store.dataset_dir(*key) / f".incoming-{uuid.uuid4().hex[:12]}"
        incoming.parent.mkdir(parents=True, exist_ok=True)  # before the status says so: readers may look
        message = f"materialising from {dataset.spec.source.kind}"
        status = {"phase": DatasetPhase.MATERIALIZING, "message": message}
        if self.port.write_status(dataset, status) is Written.LOST:
            return True  # changed meanwhile: the next pass looks again
        future = self._pool.submit(materialize_version, choice.request, incoming, choice.base_dir, self._reporter(key))
        future.add_done_callback(lambda _f: self._wake())
        with self._lock:
            self._running[key] = _Materialization(dataset.metadata.uid or "", generation, future)
        self.port.record(dataset, "Materializing", message)
        return True

    def collect(self) -> bool:
        """Write the outcome of each finished materialisation on its Dataset; whether any finished."""
        with self._lock:
            finished = {key: work for key, work in self._running.items() if work.future.done()}
            for key in finished:
                del self._running[key]
                self._progress.pop(key, None)
        for key, work in finished.items():
            dataset = self.sources.current(*key)
            if dataset is None or (dataset.metadata.uid or "") != work.uid:
                continue  # deleted (or deleted and created again) meanwhile
            outcome = materialize_outcome(work.future, work.generation, self._clock.now())
            if self.port.write_status(dataset, outcome.changes) is Written.LOST:
                continue  # changed meanwhile (a new spec, say): the next pass looks again
            self.port.record(dataset, outcome.reason, outcome.message, warning=outcome.warning)
            log.log(logging.WARNING if outcome.warning else logging.INFO, "dataset %s/%s: %s", *key, outcome.message)
        return bool(finished)

    def remove_deleted(self, live: frozenset[tuple[str, str]]) -> None:
        """Delete the materialised copies of Datasets not ``live`` (node caches keep theirs, evictable)."""
        with self._lock:
            known = live | frozenset(self._running)
        if known != self._known:  # the same Datasets as last pass: nothing new to remove
            self._known = known
            remove_unknown_datasets(self.store.root, known)

    def _reporter(self, key: tuple[str, str]) -> Callable[[int, int | None], None]:
        def say(message: str) -> None:
            with self._lock:
                self._progress[key] = message
            self._wake()

        return progress_reporter(say, self._every_s, clock=self._clock)
