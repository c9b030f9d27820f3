"""Riding out a fault of the machine that passes: a state store locked by another process, a full disk.

Such a fault changes nothing, and it passes: the other process commits or dies, someone frees space. So the
control plane does not exit on it, and it fails nothing. What met it stops (a pass half done is simply done
again: passes are level-triggered and idempotent; a replica that could not be launched stays Pending), waits
with a growing backoff, and tries again until it works; work already running goes on meanwhile.

An episode, from the first failed attempt to the first one that succeeds, is logged once when it starts (a
warning with the fault's own sentence) and once when it ends, however many retries it takes: a lock held for
a minute, or a disk full for an hour, must not fill the log.

``StoreFaults`` is the episode of the state store (``StoreUnavailableError``); the node runtime keeps one of
its own for launching replicas (``FaultEpisodes``).
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
class FaultEpisodes:
    """The current fault episode of one kind of work, if any, and how long to wait before the next try.

    Attributes:
        recovered: the line logged when an episode ends; ``%d`` is the number of failed attempts.

    """

    recovered: str
    first_seconds: float = STORE_RETRY_FIRST_SECONDS
    max_seconds: float = STORE_RETRY_MAX_SECONDS
    _cause: str | None = None
    _failures: int = 0

    @property
    def active(self) -> bool:
        """Whether the last attempt failed (an episode is under way)."""
        return self._cause is not None

    def fail(self, cause: str, message: str) -> float:
        """Note a failed attempt (``message`` is logged if it starts an episode); returns the seconds to wait.

        Args:
            cause: what failed, in a word; a failure with another cause than the last starts a new episode.
            message: one sentence saying what is wrong.

        """
        if cause != self._cause:
            log.warning("%s; waiting for it, and retrying with backoff", message)
            self._cause, self._failures = cause, 0
        delay = min(self.max_seconds, self.first_seconds * 2.0 ** min(self._failures, 30))
        self._failures += 1
        return delay

    def succeeded(self) -> None:
        """Note a successful attempt: the episode under way, if any, is over."""
        if self._cause is not None:
            log.info(self.recovered, self._failures)
            self._cause, self._failures = None, 0


@dataclass
class StoreFaults(FaultEpisodes):
    """The state store's fault episodes: a store locked past the busy timeout, or on a full disk."""

    recovered: str = "the state store can be used again after %d failed attempt(s); resuming"

    def failed(self, err: StoreUnavailableError) -> float:
        """Note a failed attempt on the store; returns the seconds to wait before the next one."""
        return self.fail(err.cause, str(err))
