"""The operator's job history (``services.kubernetes.history``) over the in-memory API and a real history store.

The point it must get right: a job that finishes and is deleted between two passes is kept with the final state
its DELETED event carried, not with the last snapshot a pass saw (on the real apiserver a job finished and
deleted through the server was recorded ``Admitted`` before this).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from phalanx.adapters.history.records import HistoryQuery
from phalanx.adapters.history.store import HistoryStore
from phalanx.adapters.kubernetes.api import TRAININGJOBS
from phalanx.adapters.kubernetes.informer import Informer
from phalanx.model.loading import builtin_jobtypes
from phalanx.services.kubernetes.history import OperatorHistory
from support.memory_kube_api import MemoryKubeApi
from support.waiting import wait_until


def job(name: str, phase: str) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "type": "generic",
            "replicas": {"worker": {"count": 1, "template": {"image": "example.org/t:1", "command": ["true"]}}},
        },
        "status": {"phase": phase},
    }


def test_a_job_finished_and_deleted_between_two_passes_is_kept_with_its_final_phase(tmp_path: Path) -> None:
    api = MemoryKubeApi()
    api.create(TRAININGJOBS, job("quick", "Admitted"))
    jobs = Informer(api, TRAININGJOBS)
    jobs._list()
    store = HistoryStore.at_path(tmp_path / "history.db")
    history = OperatorHistory(api, jobs, builtin_jobtypes, lambda: store, every=3600)
    stop = threading.Event()
    history.start(stop)
    try:
        wait_until(lambda: history.sink.is_open() and history.recorder._seen is not None, 30, "a first pass")
        # Behind the pass's back: finished, then deleted; only the DELETED event says how it ended.
        current = api.get(TRAININGJOBS, "quick", "team-a")
        finished = api.replace_status(TRAININGJOBS, {**current, "status": {"phase": "Succeeded"}})
        api.delete(TRAININGJOBS, "quick", "team-a")
        jobs._pop(("team-a", "quick"))
        history.job_changed("DELETED", finished)

        def recorded() -> list[Any]:
            return store.list(HistoryQuery(namespace="team-a")).records

        [record] = wait_until(recorded, 30, "the deleted job recorded")
        assert (record.name, record.phase) == ("quick", "Succeeded")
        assert record.deleted_at is not None
    finally:
        stop.set()
        history.join(10)


def test_a_change_wakes_the_recorder_before_its_period(tmp_path: Path) -> None:
    api = MemoryKubeApi()
    jobs = Informer(api, TRAININGJOBS)
    jobs._list()
    store = HistoryStore.at_path(tmp_path / "history.db")
    history = OperatorHistory(api, jobs, builtin_jobtypes, lambda: store, every=3600)
    stop = threading.Event()
    history.start(stop)
    try:
        wait_until(lambda: history.recorder._seen is not None, 30, "a first pass")
        api.create(TRAININGJOBS, job("done", "Failed"))
        jobs._watch()  # the cache takes the new job in, as its watch would
        history.job_changed("ADDED", api.get(TRAININGJOBS, "done", "team-a"))
        [record] = wait_until(lambda: store.list(HistoryQuery()).records, 30, "the finished job recorded")
        assert (record.name, record.phase, record.deleted_at) == ("done", "Failed", None)
    finally:
        stop.set()
        history.join(10)
