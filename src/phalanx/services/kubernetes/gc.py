"""The operator's garbage collection: the Pods it deleted until the cache drops them, and orphan Pods.

A Pod whose job uid names no job (confirmed with one GET: the job cache may lag behind the Pod cache) is deleted
at once; ownerReferences alone would leave it to kube-controller-manager's garbage collector, tens of seconds
later. ``PodDeletions`` remembers the uids of Pods this process deleted, so that a pass on a cache from before
the deletion neither counts them as running nor deletes them twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from phalanx.adapters.kubernetes.api import TRAININGJOBS, KubeApiError, NotFoundError
from phalanx.adapters.kubernetes.informer import Informer
from phalanx.adapters.kubernetes.objects import LABEL_JOB
from phalanx.services.kubernetes.apply import Wiring, job_uid_of, orphan_pods, pod_uid

log = logging.getLogger(__name__)


class PodDeletions:
    """The uids of Pods this process deleted, until the Pod cache no longer holds them (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._uids: set[str] = set()

    def add(self, uid: str) -> None:
        """Remember a Pod this process deleted."""
        with self._lock:
            self._uids.add(uid)

    def snapshot(self) -> frozenset[str]:
        """The uids remembered now."""
        with self._lock:
            return frozenset(self._uids)

    def forget_gone(self, pods: Informer) -> None:
        """Stop remembering deletions the cache has caught up with (the Pod is gone)."""
        with self._lock:
            if not self._uids:
                return
        present = {pod_uid(pod) for pod in pods.items()}
        with self._lock:
            self._uids &= present


def collect_orphans(
    wiring: Wiring,
    *,
    jobs: Informer,
    pods: Informer,
    deletions: PodDeletions,
    delete_pod: Callable[[Mapping[str, Any], str], bool],
) -> None:
    """Delete Pods whose job is gone (confirmed by a GET: the job cache may lag behind the Pod cache).

    Only the Pods of job uids that name no cached job are looked at (the Pod cache is indexed by job uid).
    """
    live = {str(obj["metadata"].get("uid")) for obj in jobs.items()}
    suspects = [pod for uid in pods.index_values() - live for pod in pods.indexed(uid)]
    if not suspects:
        return
    deleting = deletions.snapshot()
    for pod in orphan_pods(suspects, live):
        if pod_uid(pod) in deleting:
            continue
        meta = pod["metadata"]
        namespace, job_name = str(meta.get("namespace")), str(meta["labels"][LABEL_JOB])
        try:
            wiring.counters.add("orphan_reads")
            try:
                current = wiring.api.get(TRAININGJOBS, job_name, namespace)
            except NotFoundError:
                current = None
            if current is not None and current["metadata"].get("uid") == job_uid_of(pod):
                jobs.observe(current)  # the cache was behind
                continue
            log.info("deleting orphan pod %s/%s (its job %s is gone)", namespace, meta.get("name"), job_name)
            delete_pod(pod, "Orphaned")
            wiring.counters.add("orphans_deleted")
        except KubeApiError as error:
            log.warning("orphan pod %s/%s not deleted yet: %s", namespace, meta.get("name"), error)
