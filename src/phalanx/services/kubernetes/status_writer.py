"""What the operator writes onto a TrainingJob: its status (held back to coalesce moves), versions, and events.

- **Status**: a PUT of the status subresource carrying the resourceVersion the plan was made from; a 409 means
  the job changed, so the pass drops the plan and the next pass plans again from the newer version. Two moves
  are held back instead (``apply.may_hold``), in memory with their events, so that one write records them with
  the next move: Pending -> Queued for the scheduler, which accepts a new job in the write that admits it or
  says why it waits (the operator writes it after ``accept_hold_s`` if no scheduler did), and Admitted ->
  Downloading for the move to Running (written after ``hold_s`` if the Pods have not all started by then). A
  held status is dropped when the job changes (the next plan starts again from the stored one), and is lost
  with the process: the next operator plans from the stored phase again, which makes the same move.
- **Dataset versions** a job reads, recorded once as an annotation (a merge patch on the version read).
- **Events**: core/v1 Events posted in the background (best effort; Normal ones budgeted by ``EventBudget``),
  and warnings given once per job (``first_time``).

Every write that succeeds is put into the job cache at once (``Informer.observe``), so the next pass does not
act on the state from before it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Collection, Mapping
from typing import Any

from phalanx.adapters.kubernetes.api import EVENTS, TRAININGJOBS, ConflictError, KubeApiError, NotFoundError
from phalanx.adapters.kubernetes.informer import Informer, object_key
from phalanx.adapters.kubernetes.objects import status_body
from phalanx.model.jobs import TrainingJobStatus
from phalanx.services.dataset_store import DATASET_VERSIONS_ANNOTATION
from phalanx.services.kubernetes.apply import Background, EventBudget, HeldStatus, Wiring, event_body

log = logging.getLogger(__name__)


def resource_version(obj: Mapping[str, Any]) -> str:
    """The object's metadata.resourceVersion ('' when it has none)."""
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class StatusWriter:
    """Writes statuses, held statuses, dataset versions and events of the jobs in one informer's cache."""

    def __init__(self, wiring: Wiring, jobs: Informer, *, component: str, identity: str) -> None:
        self.api, self.jobs, self.counters, self.clock = wiring.api, jobs, wiring.counters, wiring.clock
        self.events = EventBudget(clock=wiring.clock.monotonic)
        self._pool = wiring.pool
        self._component = component
        self._identity = identity
        self._lock = threading.Lock()
        self._held: dict[str, HeldStatus] = {}  # job uid -> a planned status not written yet (``may_hold``)
        self._warned: set[tuple[str, str]] = set()  # (job uid, warning) given once per job
        self._background = Background()  # events being recorded

    # -- held statuses ------------------------------------------------------------------------------------------

    def take_held(self, obj: dict[str, Any]) -> HeldStatus | None:
        """Remove and return the job's held status, if it was planned on this version of the job."""
        with self._lock:
            held = self._held.pop(str(obj["metadata"].get("uid") or ""), None)
        if held is None or held.resource_version != resource_version(obj):
            return None  # the job changed since (halted, edited, written by someone): plan from what is stored
        return held

    def hold(self, obj: dict[str, Any], held: HeldStatus) -> None:
        """Keep a planned status unwritten until the next move or its ``due`` time."""
        with self._lock:
            self._held[str(obj["metadata"].get("uid") or "")] = held
        self.counters.add("status_writes_held")

    def still_current(self, obj: dict[str, Any]) -> bool:
        """Whether the job is still at the version the cache holds; a newer version goes into the cache.

        One GET, answered from the API server's watch cache (not older than the version cached here): a sixth of
        the API server's work for the status write it stands in for. That cache trails etcd by the time an event
        takes to reach it, milliseconds; a job changed within them is caught by the next pass, as one changed
        just after a status write and before the Pods' creation always was.
        """
        namespace, name = object_key(obj)
        self.counters.add("freshness_reads")
        try:
            current = self.api.get(TRAININGJOBS, name, namespace, not_older_than=resource_version(obj) or None)
        except NotFoundError:
            self.jobs.forget(namespace, name)
            return False
        if resource_version(current) == resource_version(obj):
            return True
        self.counters.add("conflicts")
        self.jobs.observe(current)
        return False

    # -- writes -------------------------------------------------------------------------------------------------

    def write_status(self, obj: dict[str, Any], status: TrainingJobStatus) -> dict[str, Any] | None:
        """PUT the status on the resourceVersion it was planned from; None when the job changed or is gone."""
        namespace, name = object_key(obj)
        try:
            written = self.api.replace_status(TRAININGJOBS, status_body(obj, status))
        except ConflictError:
            self.counters.add("conflicts")
            log.debug("job %s/%s changed since it was read; planning again", namespace, name)
            return None
        except NotFoundError:
            self.jobs.forget(namespace, name)
            return None
        self.counters.add("status_writes")
        self.jobs.observe(written)
        return written

    def record_versions(self, obj: dict[str, Any], versions: dict[str, str]) -> bool:
        """Record on the job the dataset versions it reads (a merge patch on the version read); whether it did."""
        namespace, name = object_key(obj)
        meta = obj["metadata"]
        patch = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "annotations": {DATASET_VERSIONS_ANNOTATION: json.dumps(versions, sort_keys=True)},
            }
        }
        try:
            written = self.api.patch(TRAININGJOBS, name, patch, namespace)
        except ConflictError:
            self.counters.add("conflicts")
            return False
        except NotFoundError:
            self.jobs.forget(namespace, name)
            return False
        self.jobs.observe(written)
        return True

    # -- events -------------------------------------------------------------------------------------------------

    def event(self, job: dict[str, Any], reason: str, message: str, *, warning: bool = False) -> None:
        """Record a core/v1 Event on the job, in the background: events are best effort (Normal ones budgeted)."""
        if not self.events.allow(warning=warning):
            self.counters.add("events_dropped")
            return
        body = event_body(
            job,
            reason,
            message,
            warning=warning,
            now=self.clock.now(),
            component=self._component,
            instance=self._identity,
        )

        def post() -> None:
            try:
                self.api.create(EVENTS, body)
            except KubeApiError as error:
                log.debug("event %s on %s not recorded: %s", reason, object_key(job), error)

        self._background.track(self._pool.submit(post))

    def flush(self, timeout: float | None = None) -> None:
        """Wait until the events recorded so far have been sent (or failed)."""
        self._background.flush(timeout)

    def first_time(self, obj: Mapping[str, Any], what: str) -> bool:
        """Whether ``what`` is news about this job (each warning is given once per job)."""
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        with self._lock:
            if (uid, what) in self._warned:
                return False
            self._warned.add((uid, what))
            return True

    def forget(self, live: Collection[str]) -> None:
        """Drop the held statuses and given warnings of jobs whose uid is not in ``live``."""
        with self._lock:
            self._warned = {entry for entry in self._warned if entry[0] in live}
            self._held = {uid: held for uid, held in self._held.items() if uid in live}
