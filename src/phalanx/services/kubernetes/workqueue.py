"""The operator's work queue: which jobs the next pass reconciles, and when a pass is due.

A job is picked when something about it changed (``mark``: an informer event about the job or its Pods), when
its plan asked to be looked at again (``requeue``: backoff, deadlines, TTL), or at the latest ``resync_s`` after
it was last reconciled (each job on its own timer, so a resync is not a burst); ``mark_all`` picks every job
(the first pass, a JobType change). A job is only ever in one worker: one picked while it is being reconciled
is reconciled once more afterwards (``finish`` says so), and one already waiting for a worker is not queued
twice (it reads the caches when it starts). Thread-safe: informer threads mark, job workers start and finish.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Hashable
from typing import Generic, TypeVar

from phalanx.services.kubernetes.apply import Timers

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    """The jobs waiting for a reconcile, those being reconciled, and their timers."""

    def __init__(self, resync_s: float) -> None:
        self.resync_s = resync_s
        self._lock = threading.Lock()
        self._dirty: set[K] = set()
        self._queued: set[K] = set()  # handed to the job workers, not started: it will read the newest
        self._running: set[K] = set()  # being reconciled now
        self._again: set[K] = set()  # changed while being reconciled: reconcile once more after
        self._everything = True  # the first pass looks at every job
        self._next_resync = 0.0
        self._timers: Timers[K] = Timers()  # job -> monotonic time its plan asked to be looked at again

    def mark(self, keys: Collection[K]) -> None:
        """Reconcile these jobs on the next pass."""
        with self._lock:
            self._dirty.update(keys)

    def mark_all(self) -> None:
        """Reconcile every job on the next pass."""
        with self._lock:
            self._everything = True

    def take(self, now: float, every_key: Callable[[], set[K]]) -> set[K]:
        """The jobs this pass hands to the workers (``every_key`` lists the cached jobs); they count as queued."""
        with self._lock:
            if self._everything:
                keys = every_key()
                self._everything = False
                self._next_resync = now + self.resync_s
            elif now >= self._next_resync:
                # Every reconciled job has a timer at most resync_s away; this catches any job never reconciled.
                keys = every_key() - self._timers.keys() | self._dirty
                self._next_resync = now + self.resync_s
            else:
                keys = set(self._dirty)
            self._dirty.clear()
            keys.update(self._timers.pop_due(now))
            self._again |= keys & self._running
            keys = {key for key in keys if key not in self._running and key not in self._queued}
            self._queued |= keys
            return keys

    def start(self, key: K) -> None:
        """A worker begins reconciling ``key``."""
        with self._lock:
            self._queued.discard(key)
            self._running.add(key)

    def finish(self, key: K) -> bool:
        """A worker is done with ``key``; whether it changed meanwhile (then it is marked for the next pass)."""
        with self._lock:
            self._running.discard(key)
            again = key in self._again
            self._again.discard(key)
            if again:
                self._dirty.add(key)
            return again

    def requeue(self, key: K, at: float) -> None:
        """Look at ``key`` again at monotonic time ``at``."""
        with self._lock:
            self._timers.set(key, at)

    def cancel(self, key: K) -> None:
        """Forget the timer of a job that is gone."""
        with self._lock:
            self._timers.cancel(key)

    def next_due(self, now: float) -> float:
        """When the next pass is due: ``now`` if a job changed during this one, else the earliest timer or resync."""
        with self._lock:
            if self._dirty:
                return now  # changed while this pass ran (a job reconciled again): look again at once
            earliest = self._timers.earliest()
            return self._next_resync if earliest is None else min(earliest, self._next_resync)
