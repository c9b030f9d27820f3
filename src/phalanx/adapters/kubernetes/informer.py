"""Informers: a local cache of one kind, filled by one LIST and kept current by a WATCH, like client-go's.

The operator and the scheduler read the cluster from these caches and never LIST per cycle. Each informer runs
one daemon thread: list, then watch from the list's resourceVersion; a watch that ends is resumed from the last
resourceVersion seen (bookmarks included); a 410 Gone or an error lists again, and the cache is replaced by the
new list, with the differences reported as changes, so a consumer never misses a deletion that happened while
it was disconnected.

Every change sets a shared ``Signal``; loops wait on it instead of polling. A watch event that brings the version
the cache already holds (the echo of a write this process made and ``observe``d) is no change: it neither calls
``on_change`` nor sets the signal, so a controller does not reconcile again what it has just written. The cache
holds the API's dicts; readers must not mutate them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from phalanx.adapters.kubernetes.api import GoneError, KubeApi, KubeApiError, Resource

log = logging.getLogger(__name__)
ChangeHandler = Callable[[str, dict[str, Any]], None]
IndexFunc = Callable[[dict[str, Any]], str]
_RETRY_DELAYS = (0.1, 0.2, 0.5, 1.0, 2.0)


class Signal:
    """A level-triggered wake-up: ``set`` from any thread, ``wait`` until set (then it is cleared)."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        """Something changed."""
        self._event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until something changed or ``timeout`` passed; True when something changed. Clears the flag."""
        changed = self._event.wait(timeout)
        self._event.clear()
        return changed


def object_key(obj: dict[str, Any]) -> tuple[str, str]:
    """``(namespace, name)``; the namespace is '' for cluster-scoped kinds."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class Informer:
    """The cache of one kind (optionally one namespace, or a label/field selection)."""

    def __init__(
        self,
        api: KubeApi,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        signal: Signal | None = None,
        on_change: ChangeHandler | None = None,
        watch_timeout_s: int = 60,
        index: IndexFunc | None = None,
    ) -> None:
        self.api = api
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.signal = signal or Signal()
        self.on_change = on_change
        self.watch_timeout_s = watch_timeout_s
        self._cache: dict[tuple[str, str], dict[str, Any]] = {}
        # An optional secondary index (e.g. a Pod's job uid): value -> the keys of the objects it names, so a
        # reader asks for one job's Pods without scanning every Pod.
        self._index_func = index
        self._index: dict[str, set[tuple[str, str]]] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.resource_version = ""
        self.relists = 0

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> Informer:
        """Start listing and watching in a daemon thread."""
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.resource.plural}", daemon=True)
        self._thread.start()
        return self

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Wait until the first list has filled the cache."""
        return self._synced.wait(timeout)

    def stop(self) -> None:
        """Stop after the current watch request ends (the thread is a daemon: it never blocks exit)."""
        self._stopped.set()

    def join(self, timeout: float) -> bool:
        """Wait for a stopped informer's thread to end; True once it has (or never started).

        The watch request in flight ends it (at the latest after ``watch_timeout_s``).
        """
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def synced(self) -> bool:
        """True once the first list filled the cache."""
        return self._synced.is_set()

    # -- reading ------------------------------------------------------------------------------------------------

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The cached object, or None."""
        with self._lock:
            return self._cache.get((namespace or "", name))

    def items(self) -> list[dict[str, Any]]:
        """Every cached object (a snapshot of the cache's current contents)."""
        with self._lock:
            return list(self._cache.values())

    def indexed(self, value: str) -> list[dict[str, Any]]:
        """The cached objects whose index value is ``value`` (the informer must have been given ``index``)."""
        with self._lock:
            return [self._cache[key] for key in self._index.get(value, ()) if key in self._cache]

    def index_values(self) -> set[str]:
        """Every index value some cached object has (the informer must have been given ``index``)."""
        with self._lock:
            return set(self._index)

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    def _put(self, key: tuple[str, str], obj: dict[str, Any]) -> None:
        """Store ``obj`` under ``key`` (the lock held), keeping the index current."""
        if self._index_func is not None:
            old = self._cache.get(key)
            if old is not None:
                self._unindex(key, old)
            self._index.setdefault(self._index_func(obj), set()).add(key)
        self._cache[key] = obj

    def _pop(self, key: tuple[str, str]) -> None:
        """Drop ``key`` (the lock held), keeping the index current."""
        old = self._cache.pop(key, None)
        if old is not None and self._index_func is not None:
            self._unindex(key, old)

    def _unindex(self, key: tuple[str, str], obj: dict[str, Any]) -> None:
        assert self._index_func is not None
        value = self._index_func(obj)
        keys = self._index.get(value)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._index[value]

    # -- writing through (a controller's own writes, seen before their watch event) -----------------------------

    def observe(self, obj: dict[str, Any]) -> None:
        """Put an object this process just wrote into the cache, unless the cache already has a newer one.

        Without it a controller that wrote an object and looks again before the watch event arrives would act
        on the old version (and, e.g., create a Pod twice or write a status on a stale resourceVersion). A write's
        answer may lack ``kind`` and ``apiVersion`` (a status subresource's does): they are filled in.
        """
        obj.setdefault("kind", self.resource.kind)
        obj.setdefault("apiVersion", self.resource.api_version)
        key = object_key(obj)
        with self._lock:
            current = self._cache.get(key)
            if current is not None and _newer(current, obj):
                return
            self._put(key, obj)
        self.signal.set()

    def forget(self, namespace: str | None, name: str) -> None:
        """Drop an object this process just deleted (its DELETED event may come later)."""
        with self._lock:
            self._pop((namespace or "", name))
        self.signal.set()

    # -- the loop -----------------------------------------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        need_list = True
        while not self._stopped.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
                failures = 0
            except GoneError:
                need_list = True
            except KubeApiError as error:
                delay = _RETRY_DELAYS[min(failures, len(_RETRY_DELAYS) - 1)]
                failures += 1
                need_list = need_list or failures > 2
                log.warning("informer %s: %s; retrying in %.1fs", self.resource.plural, error, delay)
                self._stopped.wait(delay)
            except Exception:  # never let the cache silently freeze
                log.exception("informer %s failed; listing again", self.resource.plural)
                need_list = True
                self._stopped.wait(0.5)

    def _list(self) -> None:
        items, version = self.api.list(
            self.resource, self.namespace, label_selector=self.label_selector, field_selector=self.field_selector
        )
        fresh = {object_key(item): item for item in items}
        with self._lock:
            gone = [obj for key, obj in self._cache.items() if key not in fresh]
            changed = [obj for key, obj in fresh.items() if self._cache.get(key) != obj]
            self._cache = fresh
            if self._index_func is not None:
                self._index = {}
                for key, obj in fresh.items():
                    self._index.setdefault(self._index_func(obj), set()).add(key)
            self.resource_version = version
            self.relists += 1
        for obj in gone:
            self._notify("DELETED", obj)
        for obj in changed:
            self._notify("MODIFIED", obj)
        self._synced.set()
        self.signal.set()

    def _watch(self) -> None:
        for kind, obj in self.api.watch(
            self.resource,
            self.resource_version,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=self.watch_timeout_s,
        ):
            version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            if kind == "BOOKMARK":
                self.resource_version = version or self.resource_version
                continue
            obj.setdefault("kind", self.resource.kind)
            obj.setdefault("apiVersion", self.resource.api_version)
            key = object_key(obj)
            with self._lock:
                echo = False
                if kind == "DELETED":
                    self._pop(key)
                else:
                    current = self._cache.get(key)
                    # This process's own write, put into the cache by ``observe`` when it was made: no news.
                    echo = current is not None and bool(version) and _version(current) == version
                    if not echo:
                        self._put(key, obj)
                self.resource_version = version or self.resource_version
            if not echo:
                self._notify(kind, obj)
                self.signal.set()
            if self._stopped.is_set():
                return

    def _notify(self, kind: str, obj: dict[str, Any]) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(kind, obj)
        except Exception:
            log.exception("informer %s: change handler failed", self.resource.plural)


def _version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _newer(current: dict[str, Any], candidate: dict[str, Any]) -> bool:
    """True when ``current`` is a later version than ``candidate`` (resourceVersions compare as integers here).

    Kubernetes calls resourceVersions opaque; etcd-backed servers issue increasing integers, and comparing them
    is what client-go's informers avoid only for portability. A non-integer falls back to "not newer".
    """
    try:
        return int(current["metadata"]["resourceVersion"]) > int(candidate["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return False


def wait_all_synced(informers: list[Informer], timeout: float) -> bool:
    """Wait until every informer has listed once."""
    deadline = time.monotonic() + timeout
    return all(informer.wait_synced(max(0.0, deadline - time.monotonic())) for informer in informers)


def start_synced(informers: list[Informer], timeout: float, stop: threading.Event | None = None) -> bool:
    """Start the informers and wait for their first lists; False when ``stop`` was set before they filled.

    Raises:
        KubeApiError: the caches did not fill within ``timeout`` (the API server is unreachable, or a permission
            is missing); the message names them.
    """
    for informer in informers:
        informer.start()
    deadline = time.monotonic() + timeout
    while not wait_all_synced(informers, min(0.5, max(0.0, deadline - time.monotonic()))):
        if stop is not None and stop.is_set():
            return False
        if time.monotonic() >= deadline:
            missing = [informer.resource.plural for informer in informers if not informer.synced]
            raise KubeApiError(0, "NotSynced", f"the caches of {', '.join(missing)} did not fill in {timeout:.0f}s")
    return True
