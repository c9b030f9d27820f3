"""Attained service on runtimes that rebuild their snapshot every cycle (least-attained-service, time slicing).

A ``SchedulingSession`` kept for a whole run (the simulator's) knows every job's service. The embedded runtime
and phalanx-scheduler build a session per cycle from what they observe, so they keep this instead: each job's
GPU-seconds in the runs they saw (``RunningJob.attained_service``, ``PendingJob.attained_service``) and the
core's band state, handed to every cycle's session. Pure: the caller says what runs and when.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from phalanx.core.scheduling.config import SchedulerConfig
from phalanx.core.scheduling.preemption import ServiceBands
from phalanx.core.scheduling.types import RunningJob


class AttainedService:
    """What least-attained-service needs across cycles: each job's GPU-seconds in the runs this scheduler saw.

    A run is counted from the job's admission to the last cycle that saw it hold its devices (a preemption is
    decided in such a cycle, so a preempted run counts whole). It lives in the scheduler's memory: a restarted
    scheduler counts earlier runs from zero. ``bands`` is the core's time-slicing state, handed to every cycle.
    """

    def __init__(self) -> None:
        self._past: dict[str, float] = {}
        self._runs: dict[str, tuple[datetime, float, datetime]] = {}  # key -> (started, GPUs, last seen)
        self._bands: ServiceBands | None = None

    def bands(self, policy: SchedulerConfig) -> ServiceBands | None:
        """The time-slicing state every cycle under ``policy`` shares (None without time slicing)."""
        if not policy.las_preempt:
            return None
        if self._bands is None:
            self._bands = ServiceBands(policy.las_thresholds, policy.las_starve_limit)
        return self._bands

    def before(self, key: str) -> float:
        """GPU-seconds of the job's runs that have ended."""
        return self._past.get(key, 0.0)

    def observe(self, running: Iterable[RunningJob], now: datetime, jobs: Iterable[str]) -> tuple[RunningJob, ...]:
        """Note the runs of this cycle's ``running`` jobs; forget jobs no longer among ``jobs`` (keys).

        Returns:
            ``running``, each with the service of its earlier runs.
        """
        running = tuple(running)
        seen = set()
        for job in running:
            seen.add(job.key)
            run = self._runs.get(job.key)
            if run is not None and run[0] != job.started:
                self._end(job.key, run)
            gpus = sum(len(a.gpus) + a.gpu_milli / 1000 for a in job.assignments)
            self._runs[job.key] = (job.started, gpus, now)
        for key in [key for key in self._runs if key not in seen]:
            self._end(key, self._runs.pop(key))
        live = set(jobs)
        for key in [key for key in self._past if key not in live]:
            del self._past[key]
        return tuple(replace(job, attained_service=self.before(job.key)) for job in running)

    def _end(self, key: str, run: tuple[datetime, float, datetime]) -> None:
        started, gpus, seen = run
        self._past[key] = self._past.get(key, 0.0) + gpus * max(0.0, (seen - started).total_seconds())
