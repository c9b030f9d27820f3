"""The Kubernetes benchmarks' measurements (pure): gang accounting, percentiles, API requests counted by the server.

``GangAccounting`` follows each job's Pods (bound, running) to count partial gangs and idle GPU-seconds;
``parse_request_totals`` reads ``apiserver_request_total`` from the API server's ``/metrics`` so a run reports
what each job cost the API server in writes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from _k8s_workloads import GangJob
from phalanx.adapters.kubernetes.api import KubeApi


@dataclass
class _JobState:
    job: GangJob
    bound: set[str] = field(default_factory=set)
    running: set[str] = field(default_factory=set)
    partial_since: float | None = None
    running_at: float | None = None
    finished_at: float | None = None


class GangAccounting:
    """Partial gangs and the GPUs they hold idle, from pod observations stamped with a time.

    - A job is a **partial gang** while at least one but not all of its Pods are bound (``spec.nodeName`` set).
      ``sample`` counts the jobs partial for at least ``settle_s``: a scheduler binding a gang's Pods one call
      after another leaves it partial for milliseconds, which is not a gang holding GPUs idle.
    - **Idle GPU-seconds** integrate, exactly between observations, the GPUs bound to Pods of partial gangs
      (transients included).
    - A job is **running** once every Pod is observed Running; the driver then ``finish``es it after its duration.
      A finished job is out of the accounting (its Pods are being deleted).
    """

    def __init__(self, jobs: Iterable[GangJob], *, settle_s: float = 1.0, start: float = 0.0) -> None:
        self.states = {job.name: _JobState(job) for job in jobs}
        self.settle_s = settle_s
        self.idle_gpu_seconds = 0.0
        self.partial_max = 0
        self.idle_gpus_max = 0
        self.samples: list[tuple[float, int, int]] = []  # (time, settled partial gangs, GPUs held by partial gangs)
        self.last_progress = start
        self._time = start
        self._idle_gpus = 0

    def _advance(self, now: float) -> None:
        if now > self._time:
            self.idle_gpu_seconds += self._idle_gpus * (now - self._time)
            self._time = now

    def _recount(self) -> None:
        self._idle_gpus = sum(
            len(state.bound) * state.job.gpus_per_pod
            for state in self.states.values()
            if state.finished_at is None and 0 < len(state.bound) < state.job.pods
        )
        self.idle_gpus_max = max(self.idle_gpus_max, self._idle_gpus)

    def observe(self, now: float, job: str, pod: str, *, bound: bool, running: bool, exists: bool = True) -> None:
        """A Pod of ``job`` as seen at ``now``; ``exists`` False when it was deleted."""
        state = self.states.get(job)
        if state is None or state.finished_at is not None:
            return
        self._advance(now)
        was_bound = pod in state.bound
        if bound and exists:
            state.bound.add(pod)
        else:
            state.bound.discard(pod)
        if running and exists:
            state.running.add(pod)
        else:
            state.running.discard(pod)
        if (pod in state.bound) != was_bound:
            self.last_progress = max(self.last_progress, now)
        partial = 0 < len(state.bound) < state.job.pods
        if not partial:
            state.partial_since = None
        elif state.partial_since is None:
            state.partial_since = now
        if len(state.running) == state.job.pods:
            if state.running_at is None:
                state.running_at = now
        else:
            state.running_at = None
        self._recount()

    def finish(self, now: float, job: str) -> None:
        """The driver ended ``job`` (deleted its Pods or its TrainingJob) at ``now``."""
        state = self.states[job]
        if state.finished_at is not None:
            return
        self._advance(now)
        state.finished_at = now
        state.partial_since = None
        self.last_progress = max(self.last_progress, now)
        self._recount()

    def due(self, now: float, duration_s: float) -> list[str]:
        """Jobs whose every Pod has been Running for ``duration_s``: done, in a real cluster."""
        return [
            name
            for name, state in self.states.items()
            if state.finished_at is None and state.running_at is not None and now - state.running_at >= duration_s
        ]

    def partial_now(self, now: float) -> int:
        """Jobs partial for at least ``settle_s`` at ``now``."""
        settled = now - self.settle_s
        return sum(
            1
            for state in self.states.values()
            if state.finished_at is None and state.partial_since is not None and state.partial_since <= settled
        )

    def sample(self, now: float) -> int:
        """Record one sample at ``now``: the settled partial gangs (also kept as the maximum)."""
        self._advance(now)
        partial = self.partial_now(now)
        self.partial_max = max(self.partial_max, partial)
        self.samples.append((now, partial, self._idle_gpus))
        return partial

    @property
    def finished(self) -> int:
        """How many jobs finished."""
        return sum(1 for state in self.states.values() if state.finished_at is not None)

    @property
    def done(self) -> bool:
        """True when every job finished."""
        return all(state.finished_at is not None for state in self.states.values())

    def makespan(self, start: float = 0.0) -> float | None:
        """From ``start`` to the last job's finish, or None while some job has not finished."""
        if not self.done or not self.states:
            return None
        return max(state.finished_at or 0.0 for state in self.states.values()) - start


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank on the sorted values); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def per_second(count: int, seconds: float) -> float:
    """``count / seconds``, NaN when no time passed."""
    return count / seconds if seconds > 0 else float("nan")


#: Verbs of apiserver_request_total that change something (the rest are GET, LIST, WATCH, CONNECT).
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"})
#: Writes that happen at a steady rate whatever the workload: node heartbeats (kwok's Leases and Node status)
#: and the components' leader-election Leases. Reported, but not part of a job's cost.
BACKGROUND_RESOURCES = frozenset({"leases", "nodes/status"})
_REQUEST_TOTAL = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
RequestKey = tuple[str, str]  # (verb, resource or resource/subresource)


def parse_request_totals(metrics: str) -> Counter[RequestKey]:
    """Requests the API server answered so far, by verb and resource, from its ``/metrics`` text.

    Sums ``apiserver_request_total`` over the labels other than ``verb``, ``resource`` and ``subresource``
    (response code, group, version, scope, component).
    """
    totals: Counter[RequestKey] = Counter()
    for line in metrics.splitlines():
        match = _REQUEST_TOTAL.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource = f"{resource}/{labels['subresource']}"
        totals[(labels.get("verb", ""), resource)] += int(float(match["value"]))
    return totals


def request_totals(api: KubeApi) -> Counter[RequestKey]:
    """The API server's request counts now (``GET /metrics``, which the admin may read)."""
    response = api.http.get("/metrics")
    response.raise_for_status()
    return parse_request_totals(response.text)


def writes_between(before: Mapping[RequestKey, int], after: Mapping[RequestKey, int]) -> Counter[RequestKey]:
    """Write requests answered between two ``request_totals`` (rows that did not change are left out)."""
    writes: Counter[RequestKey] = Counter()
    for key, count in after.items():
        if key[0] in WRITE_VERBS and count > before.get(key, 0):
            writes[key] = count - before.get(key, 0)
    return writes


def reads_between(before: Mapping[RequestKey, int], after: Mapping[RequestKey, int]) -> Counter[RequestKey]:
    """Requests other than writes (GET, LIST, WATCH...) answered between two ``request_totals``."""
    reads: Counter[RequestKey] = Counter()
    for key, count in after.items():
        if key[0] not in WRITE_VERBS and count > before.get(key, 0):
            reads[key] = count - before.get(key, 0)
    return reads


def job_writes(writes: Mapping[RequestKey, int]) -> int:
    """The writes that belong to the workload: all but the background heartbeats (``BACKGROUND_RESOURCES``)."""
    return sum(count for (_, resource), count in writes.items() if resource not in BACKGROUND_RESOURCES)
