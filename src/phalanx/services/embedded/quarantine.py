"""Quarantine in the embedded control plane: an object that makes a step fail is set aside; the rest go on.

Every per-object step of the loop (the controller per job, the scheduler's cycle, the node runtime per replica,
the dataset manager per dataset) catches what it did not expect from one object and calls ``Quarantine.hold``:

- a ``Quarantined`` condition on the object when it is a TrainingJob (the kind users list), with the step's
  reason and the error as one sentence;
- a Warning event ``Quarantined`` on it;
- a record in the store (``SqliteStore.quarantine``) about the object's current version.

Rows that do not even parse are quarantined by the store itself when a step lists them (``UNREADABLE``).

While its record applies, every step skips the object (``Held.skips``); it is tried again when its row changes
(someone fixed, halted or deleted it) or after ``QUARANTINE_RETRY_SECONDS``, so a poison pill costs one try
every few minutes, not one per pass. The step that set it aside releases it once it succeeds on it
(``Quarantine.clear``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pydantic import BaseModel

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.store import (
    ConflictError,
    NotFoundError,
    QuarantineRecord,
    SqliteStore,
    StoreError,
    StoreUnavailableError,
    UnreadableError,
    describe_error,
)
from phalanx.core.lifecycle.quarantine import quarantine_condition, quarantined, released
from phalanx.model.events import Event
from phalanx.model.jobs import TrainingJob
from phalanx.model.meta import ObjectMeta

log = logging.getLogger(__name__)

QUARANTINE_RETRY_SECONDS = 300.0
"""How long a quarantined object is left alone before its steps try it again, unless its row changes first."""

# Reasons: which step failed on the object.
CONTROLLER_ERROR = "ControllerError"
SCHEDULER_ERROR = "SchedulerError"
NODE_RUNTIME_ERROR = "NodeRuntimeError"
DATASET_MANAGER_ERROR = "DatasetManagerError"

_STEPS = {
    CONTROLLER_ERROR: "reconciling it",
    SCHEDULER_ERROR: "scheduling it",
    NODE_RUNTIME_ERROR: "running it",
    DATASET_MANAGER_ERROR: "preparing its data",
}


@dataclass(frozen=True)
class Held:
    """The quarantine records of one kind as one pass sees them, and the pass's time."""

    records: dict[tuple[str, str], QuarantineRecord]
    now: datetime

    def skips(self, obj: BaseModel) -> bool:
        """Whether a step should leave ``obj`` alone: its record is about this very version and not due again."""
        meta = _meta(obj)
        record = self.records.get((meta.namespace, meta.name))
        if record is None or str(record.resource_version) != meta.resource_version:
            return False
        return record.retry_at is None or record.retry_at > self.now

    def has(self, obj: BaseModel) -> bool:
        """Whether ``obj`` has a record (due again or not)."""
        meta = _meta(obj)
        return (meta.namespace, meta.name) in self.records


@dataclass
class Quarantine:
    """Sets objects aside for the steps of one control plane, and lets them go again."""

    store: SqliteStore
    clock: Clock = field(default_factory=SystemClock)
    retry_seconds: float = QUARANTINE_RETRY_SECONDS

    def held(self, kind: str) -> Held:
        """The records of ``kind`` that apply, for one pass."""
        records = {(r.namespace, r.name): r for r in self.store.quarantined(kind)}
        return Held(records, self.clock.now())

    def hold(self, obj: BaseModel, *, reason: str, error: BaseException) -> None:
        """Set ``obj`` aside: ``reason`` names the step that failed, ``error`` is what it raised.

        Raises only ``StoreError`` (the store failed meanwhile; the next pass tries again).
        """
        meta = _meta(obj)
        kind = _kind(obj)
        now = self.clock.now()
        message = (
            f"{_STEPS.get(reason, 'a step')} failed with {describe_error(error)}; Phalanx leaves it alone until it "
            f"changes, retrying every {self.retry_seconds / 60:g} minutes (delete it or fix it)"
        )
        log.warning("quarantined %s %s/%s: %s", kind, meta.namespace, meta.name, message, exc_info=error)
        if isinstance(obj, TrainingJob):
            # The step may have written the job before it failed: the condition goes on the job as stored now.
            current = self.store.try_get(TrainingJob, meta.namespace, meta.name)
            if current is None:
                return  # deleted meanwhile: nothing to set aside
            with contextlib.suppress(ConflictError, NotFoundError):  # it changed: the next pass tries it afresh
                status = quarantined(current.status, reason=reason, message=message, now=now)
                self.store.update_status(current.model_copy(update={"status": status}))
        self._event(kind, meta, message, now)
        self.store.quarantine(
            type(obj),
            meta.namespace,
            meta.name,
            reason=reason,
            message=message,
            retry_at=now + timedelta(seconds=self.retry_seconds),
        )

    def clear(self, obj: BaseModel, held: Held, *, reason: str) -> None:
        """The step of ``reason`` succeeded on ``obj``: drop its record and make its ``Quarantined`` condition False.

        Only what that step set: another step that fails on the object keeps it set aside.
        """
        meta = _meta(obj)
        record = held.records.get((meta.namespace, meta.name))
        if record is not None and record.reason == reason:
            self.store.release(type(obj), meta.namespace, meta.name)
        condition = quarantine_condition(obj.status) if isinstance(obj, TrainingJob) else None
        if condition is not None and condition.reason == reason:
            current = self.store.try_get(TrainingJob, meta.namespace, meta.name)
            if current is not None and quarantine_condition(current.status) is not None:
                with contextlib.suppress(ConflictError, NotFoundError):
                    status = released(current.status, now=self.clock.now())
                    self.store.update_status(current.model_copy(update={"status": status}))
                log.info("released %s from quarantine: its steps succeed again", current.key)

    def _event(self, kind: str, meta: ObjectMeta, message: str, now: datetime) -> None:
        try:
            event = Event.about(kind, meta, "Quarantined", message, now, warning=True)
        except ValueError:  # an event model stricter than the object it is about: the record still names it
            return
        self.store.record_event(event)


def guarded_hold(quarantine: Quarantine, obj: BaseModel, *, reason: str, error: BaseException) -> None:
    """``Quarantine.hold``, logging instead of raising when even that fails (the store is busy or gone).

    The object then stays as it was and is tried again on the next pass: a store fault is not its fault.
    """
    try:
        quarantine.hold(obj, reason=reason, error=error)
    except StoreError:
        meta = _meta(obj)
        log.exception("cannot quarantine %s %s/%s; retrying on the next pass", _kind(obj), meta.namespace, meta.name)


def guarded_step(
    quarantine: Quarantine, obj: BaseModel, held: Held, step: Callable[[], bool], *, reason: str, doing: str
) -> bool | None:
    """Run one object's step: a store fault is retried on the next pass; anything unexpected sets ``obj`` aside.

    Returns what ``step`` returned (whether it changed anything); True when ``obj`` changed under it (a conflict:
    the next pass sees the new version) or was set aside (something of its own cannot be read, or the step
    failed unexpectedly); None after a store fault. ``StoreUnavailableError`` propagates: the whole pass waits
    for the store (see store_faults). An object set aside by ``reason`` is released once its step succeeds.
    """
    try:
        changed = step()
    except (ConflictError, NotFoundError):
        return True
    except StoreUnavailableError:
        raise
    except StoreError as err:
        if isinstance(err, UnreadableError):
            guarded_hold(quarantine, obj, reason=reason, error=err)
            return True
        # The store failed (busy, full): not the object's fault, so it is simply tried again.
        meta = _meta(obj)
        log.exception("%s %s/%s failed on the store; retrying on the next pass", doing, meta.namespace, meta.name)
        return None
    except Exception as err:
        # One object's unexpected failure must not stop the others (nor the control plane's loop).
        guarded_hold(quarantine, obj, reason=reason, error=err)
        return True
    quarantine.clear(obj, held, reason=reason)
    return changed


def _meta(obj: BaseModel) -> ObjectMeta:
    meta = getattr(obj, "metadata", None)
    assert isinstance(meta, ObjectMeta), f"{type(obj).__name__} is not an API object"
    return meta


def _kind(obj: BaseModel) -> str:
    return str(getattr(obj, "kind", type(obj).__name__))
