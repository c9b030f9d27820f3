"""The history recorder: keeps every job that ends (finishes, is deleted, or is removed by its TTL) in the history.

Written once over the port's read side (``ObjectReader``), so the embedded control plane and a cluster's operator
run the same recorder; the history itself is a ``HistorySink`` (``adapters.history.store.HistoryStore``).

``sync`` is level-triggered, like the controllers: it lists the jobs and records each one that is finished or
being deleted and was not recorded at that resourceVersion yet, and each one it saw last time that is gone now
(with the last snapshot it saw and ``deleted_at`` now). A backend that removes a job itself in the same step
that finished it (a TTL of 0) calls ``removing`` first, since no ``sync`` would see that job finished. After a
restart the recorder has seen nothing: its first ``sync`` marks deleted every record whose job is no longer
listed, which covers a finished job deleted while no recorder ran. A job created and deleted between two syncs,
never seen, is not recorded.

Recording is an upsert by uid, so recording again (a restart, a retry after the database failed) is harmless; a
failure of the history database is logged and retried on the next sync, never raised into the caller's loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.history.records import JobRecord
from phalanx.adapters.lazy_imports import serially
from phalanx.model.jobs import TERMINAL_PHASES, Phase, TrainingJob
from phalanx.model.masking import mask_urls_in
from phalanx.services.port import ObjectReader

log = logging.getLogger(__name__)


class HistorySink(Protocol):
    """Where records go: the history store (``adapters.history.store.HistoryStore``)."""

    def record(self, record: JobRecord) -> None:
        """Keep the record (an upsert by uid)."""
        ...

    def mark_deleted(self, uid: str, when: datetime) -> bool:
        """Say the recorded job was deleted; False when there is no record of it."""
        ...

    def undeleted_uids(self) -> set[str]:
        """The uids of the records not marked deleted."""
        ...

    def prune(self, *, older_than: datetime | None = None, keep: int | None = None) -> int:
        """Drop records that ended before ``older_than`` and all but the newest ``keep``; how many went."""
        ...

    def close(self) -> None:
        """Let go of the database."""
        ...


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())


def placements_of(reader: ObjectReader, job: TrainingJob, seen: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Where the job's replicas ran (replica name -> placement).

    Its status says while it holds them; a finished job has released them, so then its replicas (kept until the
    job goes) say, or else ``seen``: the placements a recorder saw last.
    """
    if job.status.placements:
        return {k: v.model_dump(mode="json", by_alias=True) for k, v in job.status.placements.items()}
    replicas = {
        r.metadata.name: r.spec.placement.model_dump(mode="json", by_alias=True) for r in reader.replicas_of(job)
    }
    return replicas or dict(seen or {})


def job_record(
    reader: ObjectReader,
    job: TrainingJob,
    *,
    deleted_at: datetime | None,
    now: datetime,
    seen_placements: Mapping[str, Any] | None = None,
) -> JobRecord:
    """What the history keeps of ``job``: final state, durations, placements, events of this incarnation, metrics.

    ``seen_placements`` is where a recorder saw it placed last, for when nothing else says (``placements_of``).
    """
    meta, status = job.metadata, job.status
    born = meta.creation_timestamp
    # Events are kept by the object's name: a name reused by a later submission has its predecessors' events too.
    events = [e for e in reader.events_of(job) if born is None or e.time >= born]
    return JobRecord(
        uid=meta.uid or "",
        namespace=meta.namespace,
        name=meta.name,
        kind=job.kind,
        queue=job.spec.scheduling.queue,
        job_type=job.spec.type,
        phase=str(status.phase),
        reason=status.reason,
        message=status.message,
        submitted_at=born,
        started_at=status.start_time,
        finished_at=status.completion_time,
        ended_at=status.completion_time or deleted_at or now,
        queueing_seconds=_seconds(born, status.admitted_time),
        run_seconds=_seconds(status.start_time, status.completion_time),
        # The wire form, as `get -o json` shows it: passwords in URLs masked, as everywhere a job leaves Phalanx.
        spec=mask_urls_in(job.spec.model_dump(mode="json", by_alias=True, exclude_none=True)),
        status=mask_urls_in(status.model_dump(mode="json", by_alias=True, exclude_none=True)),
        placements=placements_of(reader, job, seen_placements),
        events=[mask_urls_in(e.model_dump(mode="json", by_alias=True)) for e in events],
        metrics=dict(status.metrics),
        deleted_at=deleted_at,
    )


def open_history_store(url: str, *, without_extra: str, level: int = logging.INFO) -> HistorySink | None:
    """The history database at ``url``, opened and migrated; None (logged) when the history cannot be kept.

    ``without_extra`` is logged at ``level`` when the ``history`` extra is not installed. The embedded control
    plane and a cluster's operator open their history here.
    """
    # Under the lazy-import lock: SQLAlchemy and Alembic load here, and the migration imports its scripts, while
    # other threads may be loading SQLAlchemy for a SQL Dataset or a sweep's storage (adapters.lazy_imports).
    with serially():
        try:
            from phalanx.adapters.history.store import HistoryError, HistoryStore
        except ImportError:
            log.log(level, without_extra)
            return None
        try:
            return HistoryStore(url)
        except HistoryError as err:
            log.error("the job history is off: %s", err)
            return None


class OpeningSink:
    """A history sink opened in a thread of its own, so that a control loop runs before the history is ready.

    Importing SQLAlchemy and Alembic and migrating the database take seconds on a loaded machine; a loop that
    waited for them would neither schedule the jobs submitted meanwhile nor fail on time a job whose
    ``activeDeadlineSeconds`` passed in the wait (a CI run failed a 2 s deadline that way). Meanwhile the
    recorder watches without recording (``HistoryRecorder``'s ``opened``). ``on_ready`` is called once the
    opening is over, whether the history opened or not, to wake the loop for its first recording. A history that
    could not be opened is off: writing to it does nothing.
    """

    def __init__(self, open_sink: Callable[[], HistorySink | None], on_ready: Callable[[], None] | None = None) -> None:
        """Start opening with ``open_sink`` (None from it: the history is off, said in the log by ``open_sink``)."""
        self._open_sink = open_sink
        self._on_ready = on_ready
        self._sink: HistorySink | None = None
        self._done = threading.Event()
        threading.Thread(target=self._open, name="history-open", daemon=True).start()

    def _open(self) -> None:
        try:
            self._sink = self._open_sink()
        except Exception:
            log.exception("the job history is off: it could not be opened")
        finally:
            self._done.set()
            if self._on_ready is not None:
                self._on_ready()

    def is_open(self) -> bool:
        """Whether the history is open (False while it opens, and when it is off)."""
        return self._done.is_set() and self._sink is not None

    def is_off(self) -> bool:
        """Whether the opening is over and left no history."""
        return self._done.is_set() and self._sink is None

    def _wait(self) -> HistorySink | None:
        self._done.wait()
        return self._sink

    def record(self, record: JobRecord) -> None:
        """Keep the record, once the history is open."""
        if (sink := self._wait()) is not None:
            sink.record(record)

    def mark_deleted(self, uid: str, when: datetime) -> bool:
        """Say the recorded job was deleted, once the history is open."""
        sink = self._wait()
        return sink.mark_deleted(uid, when) if sink is not None else False

    def undeleted_uids(self) -> set[str]:
        """The uids of the records not marked deleted (none when the history is off)."""
        sink = self._wait()
        return sink.undeleted_uids() if sink is not None else set()

    def prune(self, *, older_than: datetime | None = None, keep: int | None = None) -> int:
        """Apply the retention, once the history is open."""
        sink = self._wait()
        return sink.prune(older_than=older_than, keep=keep) if sink is not None else 0

    def close(self) -> None:
        """Wait for the opening to end, then let go of the history if it opened."""
        if (sink := self._wait()) is not None:
            sink.close()


class HistoryRecorder:
    """Records the jobs a backend ends, on every ``sync``."""

    def __init__(
        self,
        reader: ObjectReader,
        sink: HistorySink,
        clock: Clock | None = None,
        *,
        opened: Callable[[], bool] | None = None,
    ) -> None:
        """Record the jobs ``reader`` lists into ``sink``.

        ``opened`` says whether ``sink`` is ready yet (``OpeningSink.is_open``); until it is, ``sync`` only
        watches: where jobs are placed, and the last snapshot of each, so that what ended or went meanwhile is
        recorded by the first ``sync`` after, with its placements.
        """
        self.reader = reader
        self.sink = sink
        self.clock: Clock = clock or SystemClock()
        self._opened = opened or (lambda: True)
        self._seen: dict[str, TrainingJob] | None = None  # uid -> last snapshot; None before the first sync
        self._unopened: dict[str, TrainingJob] = {}  # uid -> last snapshot, of the jobs seen before the sink opened
        self._recorded: dict[str, tuple[str | None, bool]] = {}  # uid -> (resourceVersion, deleted) recorded
        self._placed: dict[str, dict[str, Any]] = {}  # uid -> the placements last seen in its status
        self._failing = False

    @property
    def behind(self) -> bool:
        """Whether a sync is worth running though nothing changed: the last one failed, or the history is not open."""
        return self._failing or self._seen is None

    @property
    def failing(self) -> bool:
        """Whether the last sync failed."""
        return self._failing

    def sync(self) -> bool:
        """Record what ended since the last sync; whether anything was recorded (False when the history failed)."""
        try:
            return self._sync()
        except Exception as err:
            # The history is a record, not the control plane's state: its failures must not stop the loop.
            if not self._failing:
                log.warning("job history: cannot record (%s); retrying on the next passes", err)
            self._failing = True
            return False

    def _sync(self) -> bool:
        now = self.clock.now()
        current = {job.metadata.uid: job for job in self.reader.list(TrainingJob) if job.metadata.uid}
        for uid, job in current.items():
            if job.status.placements:
                self._placed[uid] = placements_of(self.reader, job)
        if not self._opened():
            self._unopened.update(current)
            return False
        wrote = False
        for uid, job in current.items():
            deleting = job.metadata.deletion_timestamp
            if Phase(job.status.phase) not in TERMINAL_PHASES and deleting is None:
                continue
            if self._recorded.get(uid) == (job.metadata.resource_version, deleting is not None):
                continue
            self.sink.record(self._record_of(job, deleted_at=deleting, now=now))
            self._recorded[uid] = (job.metadata.resource_version, deleting is not None)
            wrote = True
        if self._seen is None:
            # The first sync with the history open: what went while no recorder ran, or while it opened.
            for uid, job in self._unopened.items():
                if uid not in current:
                    self._record_gone(job, now)
                    wrote = True
            for uid in self.sink.undeleted_uids() - current.keys() - self._unopened.keys():
                wrote |= self.sink.mark_deleted(uid, now)
            self._unopened = {}
        else:
            for uid, job in self._seen.items():
                if uid not in current:
                    self._record_gone(job, now)
                    wrote = True
        self._seen = current
        self._recorded = {uid: done for uid, done in self._recorded.items() if uid in current}
        self._placed = {uid: placed for uid, placed in self._placed.items() if uid in current}
        if self._failing:
            log.info("job history: recording again")
            self._failing = False
        return wrote

    def _record_gone(self, job: TrainingJob, now: datetime) -> None:
        uid = job.metadata.uid or ""
        if uid in self._recorded:
            # Recorded at this snapshot or a later one (``removing``): only its deletion is news, if that.
            self.sink.mark_deleted(uid, now)
        else:
            self.sink.record(self._record_of(job, deleted_at=now, now=now))

    def _record_of(self, job: TrainingJob, *, deleted_at: datetime | None, now: datetime) -> JobRecord:
        seen = self._placed.get(job.metadata.uid or "")
        return job_record(self.reader, job, deleted_at=deleted_at, now=now, seen_placements=seen)

    def close(self) -> None:
        """Close the history."""
        self.sink.close()

    def removing(self, job: TrainingJob) -> None:
        """Record ``job`` as deleted now: a backend calls this just before it removes a job itself (its TTL).

        Never raises: a failure is logged, as in ``sync``.
        """
        try:
            now = self.clock.now()
            self.sink.record(self._record_of(job, deleted_at=now, now=now))
            if job.metadata.uid:
                self._recorded[job.metadata.uid] = (job.metadata.resource_version, True)
        except Exception as err:
            log.warning("job history: cannot record the removal of job %s (%s)", job.key, err)
