"""The job history in the operator: the embedded runtime's recorder (``services.history``) over the cluster.

Given a history URL (``phalanx-operator --history-url``, the chart's ``history.url`` from a Secret), the operator
runs the same ``HistoryRecorder`` the embedded control plane runs, reading the jobs from the operator's own
TrainingJob cache (``CachedKubeBackend``: no LIST per pass) and each ended job's Pods and Events from the API
server, once, when it records it. The history opens in a thread of its own (``OpeningSink``), so the operator
reconciles from its first second even while the database is migrated or unreachable.

The recorder runs whenever the TrainingJob cache changes (``job_changed``, from the operator's informer), and at
least every ``every`` seconds (default 2): it is level-triggered, so what it missed is recorded on its next pass.
A job's DELETED event carries its last state, which is recorded as it is (``HistoryRecorder.removing``): a job
that finished and was deleted, by a user or by its TTL, before a pass saw it finished is kept with its final
phase, not with the last snapshot a pass happened to see.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.kubernetes.api import KubeApi
from phalanx.adapters.kubernetes.informer import Informer
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.services.history import HistoryRecorder, HistorySink, OpeningSink, open_history_store
from phalanx.services.kubernetes.cached_backend import CachedKubeBackend

log = logging.getLogger(__name__)
DEFAULT_EVERY_S = 2.0
_COALESCE_S = 0.05  # after a wake, so a burst of watch events makes one pass


def open_history(url: str) -> HistorySink | None:
    """The history database at ``url``, opened and migrated; None (logged) when it cannot be kept."""
    missing = "the job history is off: the operator's image lacks the history extra (phalanx[history])"
    return open_history_store(url, without_extra=missing, level=logging.ERROR)


class OperatorHistory:
    """Records the cluster's ended jobs into the history, on a thread of its own."""

    def __init__(
        self,
        api: KubeApi,
        jobs: Informer,
        jobtypes: Callable[[], Mapping[str, JobType]],
        open_sink: Callable[[], HistorySink | None],
        *,
        every: float = DEFAULT_EVERY_S,
        clock: Clock | None = None,
    ) -> None:
        """Record the jobs of ``jobs`` (the operator's synced cache) into the sink ``open_sink`` opens."""
        self.clock = clock or SystemClock()
        self.every = every
        self.wake = threading.Event()
        self.sink = OpeningSink(open_sink, on_ready=self.wake.set)
        self.reader = CachedKubeBackend(api, {TrainingJob: jobs}, jobtypes, clock=self.clock)
        self.recorder = HistoryRecorder(self.reader, self.sink, self.clock, opened=self.sink.is_open)
        self._jobtypes = jobtypes
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._deleted: list[dict[str, Any]] = []  # the last state of the jobs deleted since the last pass

    def job_changed(self, kind: str, obj: dict[str, Any]) -> None:
        """A TrainingJob changed (an informer's handler): record it soon; a DELETED one as it last was."""
        if kind == "DELETED":
            with self._lock:
                self._deleted.append(obj)
        self.wake.set()

    def start(self, stop: threading.Event) -> None:
        """Start recording until ``stop`` is set."""
        self._thread = threading.Thread(target=self._run, args=(stop,), name="operator-history", daemon=True)
        self._thread.start()

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with self._lock:
                deleted, self._deleted = self._deleted, []
            for obj in deleted:
                self._removed(obj)
            self.recorder.sync()  # never raises: a failing database is logged and retried
            if self.wake.wait(self.every):
                stop.wait(_COALESCE_S)
            self.wake.clear()

    def _removed(self, obj: dict[str, Any]) -> None:
        try:
            job = self.reader.to_job(obj, self._jobtypes())
        except Exception as err:  # unreadable: the next pass records the last snapshot it saw instead
            log.warning("job history: cannot read the deleted job %s (%s)", obj.get("metadata", {}).get("name"), err)
            return
        self.recorder.removing(job)  # never raises, as sync

    def join(self, timeout: float) -> None:
        """Wait for the thread to end (after ``stop`` was set), then close the history."""
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.sink.close()
