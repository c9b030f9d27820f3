"""Riding out a state store that cannot be used for a while: locked by another process, or on a full disk.

Such a fault (``StoreUnavailableError``) changes nothing in the store, and it passes: the other process commits
or dies, someone frees space. So the control plane does not exit on it. It stops acting (a pass half done is
simply done again: passes are level-triggered and idempotent), waits with a growing backoff, and tries again
until the store can be used; work already running goes on meanwhile, and replicas that end are recorded once
the store takes writes again.

An episode, from the first failed attempt to the first one that succeeds, is logged once when it starts (a
warning with the store's own sentence) and once when it ends, however many retries it takes: a lock held for
a minute must not fill the log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from phalanx.adapters.store import StoreUnavailableError

log = logging.getLogger(__name__)

# The first wait after a failed attempt, doubled after each further failure up to the cap. A locked store
# makes each attempt itself wait for the busy timeout, so the cap mostly matters on a full disk, where writes
# fail at once: it bounds how late the control plane notices that space was freed.
STORE_RETRY_FIRST_SECONDS = 0.5
STORE_RETRY_MAX_SECONDS = 5.0


@dataclass
class StoreFaults:
    """The current fault episode of one control plane, if any, and how long to wait before the next try."""

    first_seconds: float = STORE_RETRY_FIRST_SECONDS
    max_seconds: float = STORE_RETRY_MAX_SECONDS
    _cause: str | None = None
    _failures: int = 0

    @property
    def active(self) -> bool:
        """Whether the last attempt failed (an episode is under way)."""
        return self._cause is not None

    def failed(self, err: StoreUnavailableError) -> float:
        """Note a failed attempt; returns the seconds to wait before the next one."""
        if err.cause != self._cause:
            log.warning("%s; waiting for it, and retrying with backoff", err)
            self._cause, self._failures = err.cause, 0
        delay = min(self.max_seconds, self.first_seconds * 2.0 ** min(self._failures, 30))
        self._failures += 1
        return delay

    def succeeded(self) -> None:
        """Note a successful attempt: the episode under way, if any, is over."""
        if self._cause is not None:
            log.info("the state store can be used again after %d failed attempt(s); resuming", self._failures)
            self._cause, self._failures = None, 0
