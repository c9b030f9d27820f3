"""A node agent's dataset cache report on its Node, and the eviction requests it takes: their wire format.

A node agent (``services.kubernetes.node_cache``) writes its ``CacheReport`` into the Node's
``phalanx.dev/dataset-cache`` annotation: the cache's host directory, each entry's state, how each job placed
there stands, capacity, use, pins and counters. The operator's staging gate and ``phalanx cache ls`` read it.
``phalanx cache evict`` asks an agent to evict entries through the ``phalanx.dev/dataset-cache-evict``
annotation. This module is only that wire format: compact JSON with sorted keys (an unchanged report is an
unchanged value), and garbage read as no report.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.adapters.kubernetes.rendering import DATASET_MOUNT_PATH
from phalanx.core.data import DatasetCounters

#: On a Node: what its agent's dataset cache holds and how each job placed there stands (``CacheReport``).
CACHE_ANNOTATION = "phalanx.dev/dataset-cache"
#: On a Node: cache entries someone asked its agent to evict (``phalanx cache evict``), a JSON list of keys; the
#: agent evicts those no job uses, says in its report which it kept and why, and removes the request.
EVICT_ANNOTATION = "phalanx.dev/dataset-cache-evict"
#: Where node agents keep their cache on the host, and where Pods see its entries, unless told otherwise.
DEFAULT_CACHE_DIR = DATASET_MOUNT_PATH


@dataclass(frozen=True)
class JobCacheState:
    """How one job's entries stand on one node: ``ready``, ``staging``, ``waiting`` or ``error``, and why."""

    uid: str
    state: str
    message: str | None = None


@dataclass(frozen=True)
class HeldEntry:
    """What a node's cache holds under one key: whose data, how many bytes, and the jobs it is pinned for."""

    dataset: str
    bytes: int
    pinned_by: tuple[str, ...] = ()


_COUNTER_FIELDS = {
    "hits": "hits",
    "misses": "misses",
    "bytesFromCache": "bytes_from_cache",
    "bytesFetched": "bytes_fetched",
    "evictions": "evictions",
}


@dataclass(frozen=True)
class CacheReport:
    """What a node agent says about its dataset cache, in the Node's ``phalanx.dev/dataset-cache`` annotation.

    Attributes:
        directory: the cache's directory on the host (what Pods mount entries from).
        entries: per entry key: ``ready``, ``staging`` or ``waiting`` (what the operator's gate reads).
        jobs: per job (``namespace/name``) placed on the node with datasets: its uid and state.
        capacity: the cache's size limit in bytes.
        used: bytes held or reserved.
        held: per entry key the cache holds: its dataset, bytes and pins (what ``phalanx cache ls`` shows).
        counters: per dataset (``namespace/name``): hits, misses, bytes served and fetched, evictions.
        refused: the entries of the last eviction request the agent kept, and why (in use by a job).
        samples: the host directory of the node's sample caches (``<samples>/<namespace>`` per namespace,
            made by the agent for the jobs placed there), or None when the agent keeps none.
    """

    directory: str
    entries: Mapping[str, str] = field(default_factory=dict)
    jobs: Mapping[str, JobCacheState] = field(default_factory=dict)
    capacity: int | None = None
    used: int | None = None
    held: Mapping[str, HeldEntry] = field(default_factory=dict)
    counters: Mapping[str, DatasetCounters] = field(default_factory=dict)
    refused: Mapping[str, str] = field(default_factory=dict)
    samples: str | None = None

    def to_annotation(self) -> str:
        """The annotation's value: compact JSON with sorted keys (so an unchanged report is an unchanged value)."""
        jobs = {
            key: {"uid": state.uid, "state": state.state, **({"message": state.message} if state.message else {})}
            for key, state in self.jobs.items()
        }
        document: dict[str, Any] = {"dir": self.directory, "entries": dict(self.entries), "jobs": jobs}
        if self.capacity is not None:
            document["capacity"] = self.capacity
        if self.used is not None:
            document["used"] = self.used
        if self.held:
            document["held"] = {
                key: {"dataset": e.dataset, "bytes": e.bytes, **({"pins": list(e.pinned_by)} if e.pinned_by else {})}
                for key, e in self.held.items()
            }
        if self.counters:
            document["counters"] = {
                dataset: {name: getattr(c, attribute) for name, attribute in _COUNTER_FIELDS.items()}
                for dataset, c in self.counters.items()
            }
        if self.refused:
            document["refused"] = dict(self.refused)
        if self.samples is not None:
            document["samples"] = self.samples
        return json.dumps(document, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, text: str | None) -> CacheReport | None:
        """The report in an annotation's value; None when there is none or it cannot be read."""
        if not text:
            return None
        try:
            document = json.loads(text)
            jobs = {
                str(key): JobCacheState(str(value["uid"]), str(value["state"]), value.get("message"))
                for key, value in (document.get("jobs") or {}).items()
            }
            held = {
                str(key): HeldEntry(str(value["dataset"]), int(value["bytes"]), tuple(map(str, value.get("pins", ()))))
                for key, value in (document.get("held") or {}).items()
            }
            counters = {
                str(dataset): DatasetCounters(
                    **{attribute: int(values.get(name, 0)) for name, attribute in _COUNTER_FIELDS.items()}
                )
                for dataset, values in (document.get("counters") or {}).items()
            }
            return cls(
                directory=str(document.get("dir") or DEFAULT_CACHE_DIR),
                entries={str(k): str(v) for k, v in (document.get("entries") or {}).items()},
                jobs=jobs,
                capacity=document.get("capacity"),
                used=document.get("used"),
                held=held,
                counters=counters,
                refused={str(k): str(v) for k, v in (document.get("refused") or {}).items()},
                samples=str(document["samples"]) if document.get("samples") else None,
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def ready_keys(self) -> set[str]:
        """The keys of the entries held completely."""
        return {key for key, state in self.entries.items() if state == "ready"}


def eviction_request(node: Mapping[str, Any] | None) -> list[str] | None:
    """The keys a Node's ``EVICT_ANNOTATION`` asks its agent to evict; None when it asks nothing (or garbage)."""
    annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
    text = annotations.get(EVICT_ANNOTATION)
    if not text:
        return None
    try:
        keys = json.loads(text)
    except ValueError:
        return []
    return [str(key) for key in keys] if isinstance(keys, list) else []


def cache_report(node: Mapping[str, Any] | None) -> CacheReport | None:
    """The cache report on a Node object (None when the Node or the report is missing)."""
    if node is None:
        return None
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return CacheReport.from_annotation(annotations.get(CACHE_ANNOTATION))
