"""What the operator writes to the cluster for one job, decided without I/O: Pods, children, events, orphans.

``kube_operator`` runs the loop and talks to the API; this module holds the pure pieces it is made of, so unit
tests can check them without a cluster:

- ``observe_job_pods``: the planner's view of a job's Pods (``objects.observe_pod``), with the Pods this
  process has asked to delete counted as deleting before the watch says so;
- ``render_creates``: the Pod for every ``CreateReplica`` of a plan (its placement in annotations),
  and the headless Service and hostfile ConfigMap the Pods need;
- ``orphan_pods``: Pods of jobs that no longer exist;
- ``event_body``: a core/v1 Event about a TrainingJob;
- ``invalid_spec_message``: a spec error as one line of field-path errors;
- ``EventBudget``: how many Normal events may be posted under a burst (Warnings always are).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from phalanx.adapters.kubernetes.objects import LABEL_JOB, observe_pod
from phalanx.adapters.kubernetes.rendering import (
    ANNOTATION_JOB_UID,
    DEFAULT_SCHEDULER_NAME,
    render_headless_service,
    render_hostfile_configmap,
    render_pod,
)
from phalanx.core.reconcile.types import CreateReplica, ObservedReplica, Plan
from phalanx.model.errors import SpecError
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType

MAX_MESSAGE = 1024  # an Event's message is capped by the API server; keep ours well under


@dataclass(frozen=True, slots=True)
class PodSettings:
    """How the operator renders Pods."""

    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    image: str | None = None


def pod_uid(pod: Mapping[str, Any]) -> str:
    """The Pod's ``metadata.uid`` ('' when it has none)."""
    return str((pod.get("metadata") or {}).get("uid") or "")


def job_uid_of(pod: Mapping[str, Any]) -> str:
    """The uid of the job a Pod was rendered for (annotation ``phalanx.dev/job-uid``), '' if none."""
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_JOB_UID) or "")


def observe_job_pods(pods: Iterable[Mapping[str, Any]], deleting: Collection[str]) -> tuple[ObservedReplica, ...]:
    """The planner's view of one job's Pods.

    Args:
        pods: the job's Pods as cached.
        deleting: uids of Pods this process deleted whose deletion the cache does not show yet; they count as
            deleting, so a pass before the watch event neither deletes them again nor believes them running.

    """
    observed = []
    for pod in pods:
        replica = observe_pod(pod)
        if replica is None:
            continue  # not rendered by the operator (labels missing): not a replica
        if not replica.deleting and pod_uid(pod) in deleting:
            replica = replace(replica, deleting=True)
        observed.append(replica)
    return tuple(sorted(observed, key=lambda replica: replica.name))


def render_creates(job: TrainingJob, jobtype: JobType, decided: Plan, settings: PodSettings) -> list[dict[str, Any]]:
    """The Pods to create for the plan's ``CreateReplica`` actions, in the plan's order.

    Each Pod carries the action's attempt, and its placement in annotations.

    Raises:
        RenderError: a Pod cannot be rendered (no image, a name too long...); the message names the field.

    """
    pods = []
    for action in decided.actions:
        if not isinstance(action, CreateReplica):
            continue
        pods.append(
            render_pod(
                job,
                jobtype,
                action.role,
                action.index,
                action.attempt,
                scheduler_name=settings.scheduler_name,
                image=settings.image,
                placement=action.placement,
            )
        )
    return pods


def render_children(job: TrainingJob, jobtype: JobType) -> list[dict[str, Any]]:
    """What the job's Pods need before they start: the headless Service, and the hostfile ConfigMap for MPI."""
    children = [render_headless_service(job, jobtype)]
    hostfile = render_hostfile_configmap(job, jobtype)
    if hostfile is not None:
        children.append(hostfile)
    return children


def orphan_pods(pods: Iterable[Mapping[str, Any]], live_job_uids: Collection[str]) -> list[Mapping[str, Any]]:
    """Pods labelled ``phalanx.dev/job`` whose ``phalanx.dev/job-uid`` names no live job, not already going.

    A Pod without the uid annotation was not made by the operator and is left alone.
    """
    orphans = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if LABEL_JOB not in (meta.get("labels") or {}) or meta.get("deletionTimestamp"):
            continue
        uid = job_uid_of(pod)
        if uid and uid not in live_job_uids:
            orphans.append(pod)
    return orphans


def invalid_spec_message(error: SpecError) -> str:
    """Every problem of a spec on one line: ``spec.replicas.worker.count: must be >= 1, got 0; ...``."""
    return "; ".join(str(problem) for problem in error.errors) or str(error)


class EventBudget:
    """A token bucket for Normal events, as client-go's event spam filter keeps bursts from flooding the API.

    Every Event is a write the API server stores (with a lease), so a burst of thousands of jobs would spend as
    many writes on Normal events as on the jobs themselves. ``burst`` Normal events pass at once, then
    ``per_s`` a second; the rest are dropped (the job's status says the same thing). Warning events always
    pass: they are what ``kubectl describe`` must show.
    """

    def __init__(self, burst: int = 50, per_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = float(burst)
        self.per_s = per_s
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()

    def allow(self, *, warning: bool) -> bool:
        """True when an event may be posted now (always for a Warning; a Normal one takes a token)."""
        if warning:
            return True
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.per_s)
            self._at = now
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True


def event_body(
    job: Mapping[str, Any],
    reason: str,
    message: str,
    *,
    warning: bool,
    now: datetime,
    component: str,
    instance: str,
) -> dict[str, Any]:
    """A core/v1 Event about a TrainingJob (``job`` as read from the API), as ``kubectl describe`` shows them."""
    meta = job.get("metadata") or {}
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name')}.", "namespace": meta.get("namespace")},
        "involvedObject": {
            "apiVersion": job.get("apiVersion", "phalanx.dev/v1alpha1"),
            "kind": "TrainingJob",
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "type": "Warning" if warning else "Normal",
        "source": {"component": component},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "reportingComponent": component,
        "reportingInstance": instance,
    }


def check_renderable(job: TrainingJob, jobtype: JobType, settings: PodSettings) -> None:
    """Render one Pod per role (its highest index: the longest name) to find what cannot run, before admission.

    Every Pod of a role shares its image and template, so one render per role finds a missing image, a Pod name
    that is not a DNS label, or a rendezvous template that fails, while the job is still Pending.

    Raises:
        RenderError: with the field to fix.

    """
    for role, replica in job.spec.replicas.items():
        render_pod(
            job, jobtype, role, replica.count - 1, 0, scheduler_name=settings.scheduler_name, image=settings.image
        )
