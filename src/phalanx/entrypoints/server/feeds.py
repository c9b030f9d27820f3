"""The server's change broadcaster: one reader of a kind's changes per process, fanned out to every watcher.

A ``KindFeed`` runs one thread that follows ``ChangeReader.watch`` of its kind from where it started (the
backend's ``resource_version`` when the first watcher came) and turns each change into a ``Delivery``: the
object's wire form and its server-sent-event frame, encoded once for all watchers. So a hundred watchers cost one
store read per change, not a hundred. The feed keeps the last ``keep`` deliveries (a ring): a watcher resuming
from a resourceVersion the ring covers is replayed from it; an older one is read from the backend first
(``ExpiredError`` when the backend no longer has it either: 410), then joins the ring.

A deletion the backend sends without the object (the embedded store keeps only its key) carries the object as
the feed last saw it, so a watcher that selects by phase or labels is told of it; the feed lists its kind once at
start to know every object. Each ``Subscription`` is a deque filled under the feed's lock, in resourceVersion
order (the replay first, then what follows), and a wake-up on the watcher's event loop; a watcher that falls more
than ``MAX_BACKLOG`` deliveries behind is ended (it resumes from its last id). BOOKMARKs move every watcher's
place on while its kind is quiet. ``Feeds.close`` ends every subscription (server shutdown).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from phalanx.model.base import API_VERSION
from phalanx.services.port import ChangeReader, ExpiredError, ObjectReader, Stored, WatchEvent

log = logging.getLogger(__name__)

#: How many deliveries of a kind the feed keeps for watchers that resume.
KEEP = 10_000
#: How far behind a watcher may fall before it is ended (it resumes from its last id).
MAX_BACKLOG = 50_000
#: How long one ``ChangeReader.watch`` call runs before the feed starts the next from where it is.
WINDOW_SECONDS = 30.0
_RETRY_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0)


class WatchBackend(ObjectReader, ChangeReader, Protocol):
    """What a feed reads: the kind's objects once, then its changes."""


@dataclass(frozen=True)
class Delivery:
    """One change as every watcher gets it: the object's wire form and its SSE frame (None for a BOOKMARK)."""

    type: str
    resource_version: int
    namespace: str = ""
    name: str = ""
    document: dict[str, Any] | None = None
    frame: bytes = b""


def sse_frame(event_type: str, resource_version: int, document: dict[str, Any]) -> bytes:
    """``id: RV`` / ``event: TYPE`` / ``data: JSON`` and the blank line that ends an event."""
    data = json.dumps(document, separators=(",", ":"))
    return f"id: {resource_version}\nevent: {event_type}\ndata: {data}\n\n".encode()


class Subscription:
    """One watcher's deliveries, in order; filled from the feed's thread, drained on the watcher's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: collections.deque[Delivery] = collections.deque()
        self.ready = asyncio.Event()
        self.closed = False
        self.reason = ""

    def push(self, deliveries: list[Delivery], *, wake: bool = True) -> None:
        """Queue deliveries (the feed's thread, under its lock) and wake the watcher (unless the caller will)."""
        self.pending.extend(deliveries)
        if len(self.pending) > MAX_BACKLOG:
            self.end("fell behind")
        elif wake:
            self.wake()

    def end(self, reason: str) -> None:
        """End the watch once what is queued is sent (shutdown, a watcher too slow, a feed that had to restart)."""
        self.closed = True
        self.reason = self.reason or reason
        self.wake()

    def wake(self) -> None:
        """Set ``ready`` on the watcher's loop, from any thread."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any longer
            self.loop.call_soon_threadsafe(self.ready.set)

    def drain(self) -> list[Delivery]:
        """Everything queued so far (the watcher's loop)."""
        taken: list[Delivery] = []
        while self.pending:
            taken.append(self.pending.popleft())
        return taken


def _wake_all(subscriptions: list[Subscription]) -> None:
    for subscription in subscriptions:
        subscription.ready.set()


class KindFeed:
    """The changes of one kind, read once, for every watcher of it in this process."""

    def __init__(self, backend: WatchBackend, kind: type[Stored], *, keep: int = KEEP) -> None:
        self.backend = backend
        self.kind = kind
        self.keep = keep
        self._lock = threading.Lock()
        self._ring: collections.deque[Delivery] = collections.deque()
        self._subscribers: set[Subscription] = set()
        self._known: dict[tuple[str, str], dict[str, Any]] = {}
        self._stopped = threading.Event()
        self.position = 0
        self.ring_start = 0
        """Deliveries after this resourceVersion are all in the ring."""
        self._start()

    def _start(self) -> None:
        version = int(self.backend.resource_version(self.kind))
        known = {
            (obj.metadata.namespace, obj.metadata.name): obj.to_dict()
            for obj in self.backend.list(self.kind)  # type: ignore[type-var]  # Stored kinds are Readable
        }
        with self._lock:
            self.position = self.ring_start = version
            self._known = known
        threading.Thread(target=self._run, name=f"watch-{self.kind.__name__}", daemon=True).start()

    # -- the watchers' side ---------------------------------------------------------------------------------------

    def subscribe(self, subscription: Subscription, after: int | None) -> None:
        """Join ``subscription``: it gets every change after ``after`` (None: from now on), in order.

        Runs in a worker thread: a resume from before the ring reads the backend.

        Raises:
            ExpiredError: ``after`` is older than the backend keeps.
        """
        with self._lock:
            if after is None or after >= self.ring_start:
                self._join(subscription, after)
                return
        position = after
        while True:
            missed: list[Delivery] = []
            target = self.ring_start
            for event in self.backend.watch(self.kind, str(position), timeout=0.2):
                if event.type != "BOOKMARK":
                    missed.append(self._delivery(event, remember=False))
                position = int(event.resource_version)
                if position >= self.ring_start:
                    break
            else:
                # The window ran out: it brought every change made before it ended, and ``target`` was read
                # before it began, so nothing of the kind lies between ``position`` and ``target`` unread.
                position = max(position, target)
            with self._lock:
                subscription.push(missed)
                if position >= self.ring_start:
                    self._join(subscription, position)
                    return

    def _join(self, subscription: Subscription, after: int | None) -> None:
        """Register under the lock, with the ring's deliveries after ``after`` queued first."""
        if after is not None:
            subscription.push([d for d in self._ring if d.resource_version > after])
        self._subscribers.add(subscription)

    def unsubscribe(self, subscription: Subscription) -> None:
        """The watcher has gone."""
        with self._lock:
            self._subscribers.discard(subscription)

    def close(self) -> None:
        """Stop reading and end every subscription (lock-free: it may run in a signal handler)."""
        self._stopped.set()
        for subscription in list(self._subscribers):
            subscription.end("the server is shutting down")

    # -- the feed's thread ------------------------------------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        while not self._stopped.is_set():
            try:
                for event in self.backend.watch(self.kind, str(self.position), timeout=WINDOW_SECONDS):
                    self._publish(event)
                    failures = 0
                    if self._stopped.is_set():
                        return
            except ExpiredError:
                self._restart()
            except Exception as err:  # never let the feed freeze: log, wait, read again from where it was
                delay = _RETRY_SECONDS[min(failures, len(_RETRY_SECONDS) - 1)]
                failures += 1
                log.warning("watch %s: %s; reading again in %.1fs", self.kind.__name__, err, delay)
                self._stopped.wait(delay)

    def _restart(self) -> None:
        """Start again from now: the feed fell behind the backend's horizon.

        Its watchers may have missed changes, so they are ended (each resumes, and is told 410 if its place is
        gone too).
        """
        log.warning("watch %s: the feed fell behind the kept changes; starting again", self.kind.__name__)
        version = int(self.backend.resource_version(self.kind))
        known = {(o.metadata.namespace, o.metadata.name): o.to_dict() for o in self.backend.list(self.kind)}  # type: ignore[type-var]
        with self._lock:
            ended = list(self._subscribers)
            self._subscribers.clear()
            self._ring.clear()
            self.position = self.ring_start = version
            self._known = known
        for subscription in ended:
            subscription.end("changes were missed")

    def _publish(self, event: WatchEvent) -> None:
        if event.type == "BOOKMARK":
            delivery = Delivery("BOOKMARK", int(event.resource_version))
        else:
            delivery = self._delivery(event, remember=True)
        with self._lock:
            if delivery.resource_version <= self.position:
                return  # already delivered (a backend that resent it)
            self.position = delivery.resource_version
            if delivery.type != "BOOKMARK":
                self._ring.append(delivery)
                while len(self._ring) > self.keep:
                    self.ring_start = self._ring.popleft().resource_version
            else:
                # Nothing up to here is missing from the ring: a resume from here needs no backend read.
                self.ring_start = max(self.ring_start, self.position) if not self._ring else self.ring_start
            woken: dict[asyncio.AbstractEventLoop, list[Subscription]] = {}
            for subscription in self._subscribers:
                subscription.push([delivery], wake=False)
                woken.setdefault(subscription.loop, []).append(subscription)
        # One wake-up per event loop, not per watcher: a hundred watchers cost the loop one callback.
        for loop, subscriptions in woken.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits there any longer
                loop.call_soon_threadsafe(_wake_all, subscriptions)

    def _delivery(self, event: WatchEvent, *, remember: bool) -> Delivery:
        """The delivery of a change: the object's wire form, the one last seen for a deletion without one."""
        version = int(event.resource_version)
        key = (event.namespace, event.name)
        if event.obj is not None:
            document = event.obj.to_dict()
        else:
            document = dict(self._known.get(key) or {"apiVersion": API_VERSION, "kind": self.kind.__name__})
            metadata = dict(document.get("metadata") or {"name": event.name, "namespace": event.namespace})
            document["metadata"] = metadata
        document.setdefault("metadata", {})["resourceVersion"] = str(version)
        if remember:
            if event.type == "DELETED":
                self._known.pop(key, None)
            else:
                self._known[key] = document
        return Delivery(
            event.type, version, event.namespace, event.name, document, sse_frame(event.type, version, document)
        )


class Feeds:
    """The feed of each kind, started when its first watcher comes."""

    def __init__(self, backend: WatchBackend, *, keep: int = KEEP) -> None:
        self.backend = backend
        self.keep = keep
        self._feeds: dict[type[Stored], KindFeed] = {}
        self._lock = threading.Lock()
        self.closed = False
        self.heartbeat = 15.0
        """Seconds between BOOKMARKs on a quiet watch (the watch route's)."""

    def of(self, kind: type[Stored]) -> KindFeed:
        """The kind's feed (started here, in a worker thread: it lists the kind once)."""
        with self._lock:
            feed = self._feeds.get(kind)
            if feed is None:
                feed = self._feeds[kind] = KindFeed(self.backend, kind, keep=self.keep)
            return feed

    def close(self) -> None:
        """End every watch (lock-free, see ``KindFeed.close``)."""
        self.closed = True
        for feed in list(self._feeds.values()):
            feed.close()
