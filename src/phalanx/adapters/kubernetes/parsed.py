"""Objects of an informer's cache, parsed once per resourceVersion.

The controllers (scheduler, operator, node agent) read their whole caches on every pass, and turning an API
object into a model (pydantic validation, defaults) costs far more than the pass's own logic. An object changes
only with its resourceVersion, so ``ParsedObjects`` keeps each object's parse until its resourceVersion moves,
logs an invalid object once per version rather than once per pass, and forgets objects that left the cache;
``ParsedCache`` does so for one informer's whole cache.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from phalanx.adapters.kubernetes.informer import Informer

log = logging.getLogger(__name__)

T = TypeVar("T")


def _identity(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace') or ''}/{meta.get('name')}")


class ParsedObjects(Generic[T]):
    """Parses of one kind of object, by uid, each kept while its resourceVersion stays the same.

    Args:
        kind: what the objects are, for the log line about an invalid one.
        parse: API object -> model; raises ``ValueError`` (``SpecError``, pydantic's) when it is invalid.
    """

    def __init__(self, kind: str, parse: Callable[[dict[str, Any]], T]) -> None:
        self.kind = kind
        self._parse = parse
        self._lock = threading.Lock()
        self._parsed: dict[str, tuple[str, T | None]] = {}

    def __len__(self) -> int:
        return len(self._parsed)

    def get(self, obj: dict[str, Any]) -> T | None:
        """The object parsed; None (logged once per version) when it is invalid."""
        key = _identity(obj)
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            cached = self._parsed.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            parsed: T | None = self._parse(obj)
        except ValueError as error:
            meta = obj.get("metadata") or {}
            where = f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))
            log.warning("ignoring the invalid %s %s: %s", self.kind, where, error)
            parsed = None
        with self._lock:
            self._parsed[key] = (version, parsed)
        return parsed

    def all(self, objects: Iterable[dict[str, Any]], *, live: Iterable[dict[str, Any]] | None = None) -> list[T]:
        """The valid ones of ``objects``, parsed, in order.

        Forgets every object not among ``live`` (the whole cache; by default ``objects`` are): a reader that asks
        for a selection of the cache keeps the parses of the rest.
        """
        objects = list(objects)
        found = [parsed for obj in objects if (parsed := self.get(obj)) is not None]
        kept = {_identity(obj) for obj in (objects if live is None else live)}
        with self._lock:
            for gone in set(self._parsed) - kept:
                del self._parsed[gone]
        return found


class ParsedCache(ParsedObjects[T]):
    """One informer's objects, each parsed once per version (``kind`` is the informer's)."""

    def __init__(self, informer: Informer, parse: Callable[[dict[str, Any]], T]) -> None:
        super().__init__(informer.resource.kind, parse)
        self.informer = informer

    def current(self) -> list[T]:
        """The valid objects of the cache now, parsed."""
        return self.all(self.informer.items())
