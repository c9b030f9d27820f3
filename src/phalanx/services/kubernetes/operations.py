"""The operations users call, against a Kubernetes cluster: the embedded ``Operations`` surface over the API server.

The CLI's kubernetes backend and ``phalanx.Client.kubernetes`` call these; the phalanx-operator and
phalanx-scheduler do the rest, as the embedded control plane does for ``Operations``:

- **Submitting** validates every document first with the embedded runtime's validation
  (``operations.validate_documents``, against the built-in JobTypes and the cluster's), so a spec error creates
  nothing and names the same field paths on both backends. Then JobTypes are created (or updated), then
  TrainingJobs. A job name in use is checked before anything is created.
- **Halt and resume** are a merge patch of ``spec.runPolicy.suspend``, conditional on the resourceVersion that
  was read, exactly the embedded runtime's update of the same field; the operator moves the phases.
- **Delete** removes the TrainingJob; its Pods, Service and ConfigMap are garbage-collected through their
  ownerReferences.
- **Replicas** are the job's Pods (``<job>-<role>-<index>``, labelled ``phalanx.dev/job``), **events** the
  core/v1 Events whose ``involvedObject.uid`` is the job's, and **logs** the Pods' logs (a Pod of an earlier
  attempt is deleted before the next is created, so the Pod that exists is the latest attempt).

Every failure of the API becomes an ``OperationError`` that says what to do: an unreachable server, Phalanx not
installed (its API group is not served), a missing permission (the verb and the resource).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.datacache import in_use_sentence
from phalanx.adapters.kubernetes.api import (
    DATASETS,
    EVENTS,
    JOBTYPES,
    NODES,
    PODS,
    QUEUES,
    TRAININGJOBS,
    ConflictError,
    KubeApi,
    KubeApiError,
    KubeConfigError,
    NotFoundError,
    Resource,
)
from phalanx.adapters.kubernetes.objects import (
    LABEL_ATTEMPT,
    LABEL_INDEX,
    LABEL_JOB,
    LABEL_ROLE,
    dataset_from_object,
    job_document,
    job_from_object,
    job_status,
    jobtype_from_object,
    model_metadata,
    node_from_object,
    pod_exit,
)
from phalanx.adapters.kubernetes.rendering import ANNOTATION_JOB_UID, CONTAINER_NAME
from phalanx.core.lifecycle import ACTIVE_PHASES
from phalanx.model.datasets import Dataset
from phalanx.model.errors import SpecError
from phalanx.model.events import Event
from phalanx.model.jobs import Phase, ReplicaPlacement, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import builtin_jobtypes, parse_queue
from phalanx.model.meta import ObjectMeta
from phalanx.model.nodes import Node
from phalanx.model.queues import Queue, QueueStatus
from phalanx.model.replicas import Replica, ReplicaObjectSpec, ReplicaObjectStatus, ReplicaPhase
from phalanx.model.validation import parse_job
from phalanx.services.dataset_views import (
    DatasetDescription,
    NodeCacheView,
    cache_view_from_labels,
    entries_to_evict,
    eviction_failure,
    readers,
)
from phalanx.services.kubernetes.datasets import EVICT_ANNOTATION, CacheReport, cache_report, eviction_request
from phalanx.services.operations import (
    MAX_CONFLICT_RETRIES,
    JobDescription,
    JobExistsError,
    OperationError,
    Submitted,
    check_no_readers,
    exists_message,
    not_found_message,
    validate_documents,
)
from phalanx.services.queue_views import QueueDescription, QueueView, describe_queue, queue_views

INSTALL_HINT = "phalanx install --print | kubectl apply -f -"
NOT_INSTALLED = f"Phalanx is not installed on this cluster: {INSTALL_HINT}"
DELETE_WAIT_SECONDS = 60.0
EVICT_TIMEOUT_S = 30.0  # how long `phalanx cache evict` waits for the node agents to answer
_POD_PHASES = {phase.value: phase for phase in ReplicaPhase}


#: The kinds ``submit -n`` moves on a cluster: JobTypes and Queues are cluster-scoped there.
CLUSTER_NAMESPACED_KINDS = frozenset({"TrainingJob", "Dataset"})


@dataclass(frozen=True)
class ReplicaLog:
    """The log of one replica's Pod (its latest attempt)."""

    replica: str  # e.g. worker-0
    pod: str
    attempt: int
    phase: str
    text: str
    error: str = ""  # why the log could not be read, when it could not


def resource_name(resource: Resource) -> str:
    """``trainingjobs.phalanx.dev``, ``pods``: how kubectl and RBAC name a resource."""
    return f"{resource.plural}.{resource.group}" if resource.group else resource.plural


def job_body(job: TrainingJob) -> dict[str, Any]:
    """The TrainingJob to POST: the validated, defaulted spec; metadata the user may set; no status."""
    return _body(job, namespaced=True)


def jobtype_body(jobtype: JobType) -> dict[str, Any]:
    """The JobType to POST (cluster-scoped: no namespace)."""
    return _body(jobtype, namespaced=False)


def queue_body(queue: Queue) -> dict[str, Any]:
    """The Queue to POST (cluster-scoped: no namespace; no status, the scheduler's)."""
    return _body(queue, namespaced=False)


def dataset_body(dataset: Dataset) -> dict[str, Any]:
    """The Dataset to POST (namespaced; no status, the dataset manager's)."""
    return _body(dataset, namespaced=True)


def _body(obj: TrainingJob | JobType | Queue | Dataset, *, namespaced: bool) -> dict[str, Any]:
    """The object without status, with only the metadata a user may set (name, namespace, labels, annotations)."""
    data = obj.to_dict()
    data.pop("status", None)
    meta = obj.metadata
    metadata: dict[str, Any] = {"name": meta.name}
    if namespaced:
        metadata["namespace"] = meta.namespace
    if meta.labels:
        metadata["labels"] = dict(meta.labels)
    if meta.annotations:
        metadata["annotations"] = dict(meta.annotations)
    data["metadata"] = metadata
    return data


def queue_from_object(obj: Mapping[str, Any]) -> Queue:
    """A stored Queue as the model's, with the status the scheduler wrote (an unreadable status is empty).

    Raises:
        SpecError: its spec is not a valid Queue (written with kubectl past the schema).
    """
    meta = obj.get("metadata") or {}
    document = {
        "apiVersion": obj.get("apiVersion", QUEUES.api_version),
        "kind": "Queue",
        "metadata": model_metadata(obj, cluster_scoped=True),
        "spec": obj.get("spec") or {},
    }
    queue = parse_queue(document, source=f"queue/{meta.get('name')}")
    with contextlib.suppress(ValueError):
        queue = queue.model_copy(update={"status": QueueStatus.model_validate(obj.get("status") or {})})
    return queue


def _timestamp(value: Any) -> datetime | None:
    if not value:
        return None
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return None


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def replica_from_pod(pod: Mapping[str, Any], job: TrainingJob) -> Replica:
    """A job's Pod as a ``Replica``, the embedded runtime's object, so ``describe`` shows both alike."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    name = str(meta.get("name"))
    containers = spec.get("containers") or [{}]
    container = next((c for c in containers if c.get("name") == CONTAINER_NAME), containers[0])
    planned = job.status.placements.get(name)
    node = str(spec.get("nodeName") or "")
    placement = (
        planned.model_copy(update={"node": node or planned.node})
        if planned is not None
        else ReplicaPlacement(node=node or "-")
    )
    exit_code, finished, reason = pod_exit(pod)
    phase = _POD_PHASES.get(str(status.get("phase") or "Pending"), ReplicaPhase.PENDING)
    return Replica(
        metadata=ObjectMeta(
            name=name,
            namespace=str(meta.get("namespace") or job.metadata.namespace),
            uid=meta.get("uid"),
            creation_timestamp=_timestamp(meta.get("creationTimestamp")),
            deletion_timestamp=_timestamp(meta.get("deletionTimestamp")),
        ),
        spec=ReplicaObjectSpec(
            job_name=job.metadata.name,
            job_uid=job.metadata.uid or "",
            role=str(labels.get(LABEL_ROLE, "")),
            index=max(0, _int(labels.get(LABEL_INDEX))),
            attempt=max(0, _int(labels.get(LABEL_ATTEMPT))),
            command=[*(container.get("command") or []), *(container.get("args") or [])],
            placement=placement,
        ),
        status=ReplicaObjectStatus(
            phase=phase,
            exit_code=exit_code,
            start_time=_timestamp(status.get("startTime")),
            finish_time=finished,
            message=str(status.get("message") or reason or ""),
        ),
    )


def event_from_object(obj: Mapping[str, Any]) -> Event:
    """A core/v1 Event about a job as the model's ``Event``."""
    involved = obj.get("involvedObject") or {}
    meta = obj.get("metadata") or {}
    when = (
        _timestamp(obj.get("lastTimestamp"))
        or _timestamp(obj.get("eventTime"))
        or _timestamp(obj.get("firstTimestamp"))
        or _timestamp(meta.get("creationTimestamp"))
        or datetime.now(UTC)
    )
    count = _int(obj.get("count"), 1)
    message = str(obj.get("message") or "")
    return Event(
        object_kind=str(involved.get("kind") or "TrainingJob"),
        object_name=str(involved.get("name") or ""),
        namespace=str(involved.get("namespace") or meta.get("namespace") or "default"),
        type="Warning" if obj.get("type") == "Warning" else "Normal",
        reason=str(obj.get("reason") or ""),
        message=f"{message} (x{count})" if count > 1 else message,
        time=when,
    )


class KubeOperations:
    """User-facing operations on one cluster (one kubeconfig context)."""

    def __init__(
        self, api: KubeApi, *, server: str = "", poll_seconds: float = 0.5, clock: Clock | None = None
    ) -> None:
        self.api = api
        self.server = server
        self.poll_seconds = poll_seconds
        self.clock = clock or SystemClock()
        self._installed: bool | None = None

    # -- errors --------------------------------------------------------------------------------------------------

    def installed(self) -> bool:
        """True when the API server serves Phalanx's TrainingJobs (the CRDs are installed)."""
        if self._installed is None:
            path = f"/apis/{TRAININGJOBS.group}/{TRAININGJOBS.version}"
            try:
                served = self.api.request("GET", path) or {}
            except NotFoundError:
                self._installed = False
            except KubeApiError:
                return True  # cannot tell (e.g. discovery refused): let the request's own error speak
            else:
                plurals = {str(r.get("name")) for r in served.get("resources") or []}
                self._installed = TRAININGJOBS.plural in plurals
        return self._installed

    def error(self, error: KubeApiError, verb: str, resource: Resource, namespace: str | None = None) -> OperationError:
        """A failed request as a message that says what to do about it."""
        what = resource_name(resource)
        where = f" in namespace {namespace}" if namespace and resource.namespaced else ""
        if isinstance(error, KubeConfigError):
            return OperationError(f"{error.message}; pass --kubeconfig FILE and --context NAME")
        if error.status == 0:
            at = f" at {self.server}" if self.server else ""
            return OperationError(
                f"cannot reach the Kubernetes API server{at}: {error.message}; is the cluster up, and do "
                "--kubeconfig and --context point at it?"
            )
        if error.status == 401:
            return OperationError(
                "the Kubernetes API server did not accept your credentials (401 Unauthorized); refresh them "
                "(e.g. log in again) or pick another --context"
            )
        if error.status == 403:
            return OperationError(
                f"forbidden: you may not {verb} {what}{where} ({error.message}); ask a cluster administrator for "
                "that permission"
            )
        if error.status == 404 and resource.group == TRAININGJOBS.group and not self.installed():
            return OperationError(NOT_INSTALLED)
        return OperationError(f"cannot {verb} {what}{where}: {error.message}")

    @contextmanager
    def calling(self, verb: str, resource: Resource, namespace: str | None = None) -> Iterator[None]:
        """Turn any ``KubeApiError`` raised inside into an ``OperationError`` naming ``verb`` and ``resource``."""
        try:
            yield
        except KubeApiError as error:
            raise self.error(error, verb, resource, namespace) from None

    def _require_installed(self) -> None:
        if not self.installed():
            raise OperationError(NOT_INSTALLED)

    # -- reading -------------------------------------------------------------------------------------------------

    def jobtypes(self) -> dict[str, JobType]:
        """Every JobType by name: the built-ins, and the cluster's (which win; invalid ones are left out)."""
        found = dict(builtin_jobtypes())
        try:
            objects, _ = self.api.list(JOBTYPES)
        except KubeApiError as error:
            if error.status == 403:
                return found  # may not list JobTypes: validate against the built-ins, the server checks the rest
            raise self.error(error, "list", JOBTYPES) from None
        for obj in objects:
            with contextlib.suppress(SpecError, ValueError):
                jobtype = jobtype_from_object(obj)
                found[jobtype.metadata.name] = jobtype
        return found

    def job_object(self, namespace: str, name: str) -> dict[str, Any]:
        """The job as the API server stores it.

        Raises:
            OperationError: no such job (with the names of existing ones), or the API failed.
        """
        with self.calling("get", TRAININGJOBS, namespace):
            try:
                return self.api.get(TRAININGJOBS, name, namespace)
            except NotFoundError:
                pass
            self._require_installed()
            objects, _ = self.api.list(TRAININGJOBS, namespace)
        names = sorted(str((o.get("metadata") or {}).get("name")) for o in objects)
        hint = f"; jobs in {namespace}: {', '.join(names[:10])}" if names else f"; {namespace} has no jobs"
        raise OperationError(f"job {namespace}/{name} not found{hint}")

    def to_job(self, obj: Mapping[str, Any], jobtypes: Mapping[str, JobType] | None = None) -> TrainingJob:
        """The stored object as a validated, defaulted job; one the JobTypes reject is shown as stored.

        Raises:
            OperationError: the object is not a TrainingJob the model can read at all.
        """
        try:
            return job_from_object(obj, jobtypes if jobtypes is not None else self.jobtypes())
        except SpecError:
            # E.g. its JobType was removed since, or the job came from kubectl: show it as stored, with the status
            # the operator wrote (which says what is wrong with it).
            try:
                job = parse_job(job_document(obj))
            except SpecError as err:
                meta = obj.get("metadata") or {}
                raise OperationError(f"job {meta.get('namespace')}/{meta.get('name')} cannot be read: {err}") from None
            return job.model_copy(update={"status": job_status(obj)})

    def get_job(self, namespace: str, name: str) -> TrainingJob:
        """One job.

        Raises:
            OperationError: no such job, with the names of existing ones.
        """
        return self.to_job(self.job_object(namespace, name))

    def list_jobs(self, namespace: str | None = None) -> list[TrainingJob]:
        """Jobs of a namespace (None: every namespace), newest last."""
        with self.calling("list", TRAININGJOBS, namespace):
            objects, _ = self.api.list(TRAININGJOBS, namespace)
        jobtypes = self.jobtypes() if objects else {}
        jobs = []
        for obj in objects:
            with contextlib.suppress(OperationError):
                jobs.append(self.to_job(obj, jobtypes))
        return sorted(
            jobs,
            key=lambda j: (
                j.metadata.creation_timestamp.timestamp() if j.metadata.creation_timestamp else 0.0,
                j.metadata.name,
            ),
        )

    def list_nodes(self) -> list[Node]:
        """The cluster's nodes as the phalanx-scheduler sees them (CPUs, memory, GPUs, topology)."""
        with self.calling("list", NODES):
            objects, _ = self.api.list(NODES)
        nodes = []
        for obj in objects:
            with contextlib.suppress(ValueError):
                nodes.append(node_from_object(obj))
        return sorted(nodes, key=lambda n: n.metadata.name)

    def list_queues(self) -> list[Queue]:
        """Every Queue, sorted by name; one that is not valid (written past the schema) is left out."""
        with self.calling("list", QUEUES):
            objects, _ = self.api.list(QUEUES)
        queues = []
        for obj in objects:
            with contextlib.suppress(SpecError, ValueError):
                queues.append(queue_from_object(obj))
        return sorted(queues, key=lambda q: q.metadata.name)

    def get_queue(self, name: str) -> Queue:
        """One Queue.

        Raises:
            OperationError: no such queue (with the names of existing ones), or it cannot be read.
        """
        with self.calling("get", QUEUES):
            try:
                obj = self.api.get(QUEUES, name)
            except NotFoundError:
                obj = None
                self._require_installed()
        if obj is None:
            names = [q.metadata.name for q in self.list_queues()]
            known = f"queues: {', '.join(names[:20])}" if names else "there are no queues"
            raise OperationError(f"queue {name} not found; {known}")
        try:
            return queue_from_object(obj)
        except SpecError as err:
            raise OperationError(f"queue {name} cannot be read: {err}") from None

    def _all_jobs(self) -> list[TrainingJob] | None:
        """Every job of every namespace, or None when the user may not list them cluster-wide."""
        try:
            return self.list_jobs(None)
        except OperationError as err:
            if "forbidden" in str(err):
                return None
            raise

    def queue_views(self) -> list[QueueView]:
        """Every Queue with what its jobs hold now (from the jobs; from its status if jobs cannot be listed)."""
        queues = self.list_queues()
        return queue_views(queues, self._all_jobs() if queues else [])

    def describe_queue(self, name: str) -> QueueDescription:
        """The Queue, its usage, its admitted and pending jobs, and the other queues of its cohort.

        Raises:
            OperationError: no such queue.
        """
        queue = self.get_queue(name)
        queues = [q for q in self.list_queues() if q.metadata.name != name] + [queue]
        described = describe_queue(name, queues, self._all_jobs())
        assert described is not None
        return described

    def delete_queue(self, name: str) -> QueueView:
        """Delete a Queue; its jobs keep running and are no longer limited by any quota.

        Returns:
            The queue as it was, with its admitted jobs.

        Raises:
            OperationError: no such queue.
        """
        described = self.describe_queue(name)
        with self.calling("delete", QUEUES), contextlib.suppress(NotFoundError):
            self.api.delete(QUEUES, name, uid=described.view.queue.metadata.uid)
        return described.view

    # -- datasets and node caches ---------------------------------------------------------------------------
    def list_datasets(self, namespace: str | None = None) -> list[Dataset]:
        """Datasets of the namespace (every namespace when None); one written past the schema is left out."""
        with self.calling("list", DATASETS, namespace):
            objects, _ = self.api.list(DATASETS, namespace)
        found = []
        for obj in objects:
            with contextlib.suppress(SpecError, ValueError):
                found.append(dataset_from_object(obj))
        return sorted(found, key=lambda d: (d.metadata.namespace, d.metadata.name))

    def get_dataset(self, namespace: str, name: str) -> Dataset:
        """One Dataset.

        Raises:
            OperationError: no such Dataset (with the names of the others), or it cannot be read.
        """
        with self.calling("get", DATASETS, namespace):
            try:
                obj = self.api.get(DATASETS, name, namespace)
            except NotFoundError:
                self._require_installed()
                raise OperationError(
                    not_found_message("dataset", namespace, name, self.list_datasets(namespace))
                ) from None
        try:
            return dataset_from_object(obj)
        except SpecError as err:
            raise OperationError(f"dataset {namespace}/{name} cannot be read: {err}") from None

    def describe_dataset(self, namespace: str, name: str) -> DatasetDescription:
        """The Dataset, the jobs that read it and its events."""
        dataset = self.get_dataset(namespace, name)
        events: list[Event] = []
        if dataset.metadata.uid:
            with self.calling("list", EVENTS, namespace):
                objects, _ = self.api.list(
                    EVENTS, namespace, field_selector=f"involvedObject.uid={dataset.metadata.uid}"
                )
            events = sorted((event_from_object(obj) for obj in objects), key=lambda e: e.time)
        return DatasetDescription(dataset=dataset, jobs=readers(dataset, self.list_jobs(namespace)), events=events)

    def delete_dataset(self, namespace: str, name: str) -> Dataset:
        """Delete a Dataset no unfinished job reads.

        Raises:
            OperationError: no such Dataset, or unfinished jobs read it (named).
        """
        dataset = self.get_dataset(namespace, name)
        check_no_readers(dataset, self.list_jobs(namespace))
        with self.calling("delete", DATASETS, namespace), contextlib.suppress(NotFoundError):
            self.api.delete(DATASETS, name, namespace, uid=dataset.metadata.uid)
        return dataset

    def cache_views(self, node: str | None = None) -> list[NodeCacheView]:
        """What each node's agent reports of its dataset cache (its labels alone, from an agent without a report)."""
        with self.calling("list", NODES):
            objects, _ = self.api.list(NODES)
        names = sorted(str(obj["metadata"]["name"]) for obj in objects)
        if node is not None and node not in names:
            raise OperationError(f"node {node} not found; nodes: {', '.join(names)}")
        views = []
        for obj in sorted(objects, key=lambda o: str(o["metadata"]["name"])):
            meta = obj["metadata"]
            if node not in (None, meta["name"]):
                continue
            report = cache_report(obj)
            if report is not None:
                views.append(report.view(str(meta["name"])))
            else:
                views.append(cache_view_from_labels(str(meta["name"]), dict(meta.get("labels") or {})))
        return views

    def evict(
        self,
        *,
        key: str | None = None,
        dataset: str | None = None,
        node: str | None = None,
        timeout: float = EVICT_TIMEOUT_S,
    ) -> list[str]:
        """Ask the node agents to evict one cache entry (``key``) or every entry of a Dataset; wait for their answer.

        ``dataset`` is ``namespace/name``, or a name in ``default``. An entry a job uses is refused here, from the
        agent's report, and again by the agent, which checks its pins as it evicts. Returns ``node: key`` of each
        entry evicted.

        Raises:
            OperationError: nothing matched; an entry is in use (naming the jobs); an agent did not answer.
        """
        try:
            targets = entries_to_evict(self.cache_views(node), key, dataset)
        except ValueError as error:
            raise OperationError(str(error)) from None
        requests: dict[str, list[str]] = {}
        problems: list[str] = []
        for view, entry in targets:
            if entry.pinned_by or entry.state != "ready":
                problems.append(in_use_sentence(entry.key, entry.dataset, f"node {view.node}", entry.pinned_by))
            else:
                requests.setdefault(view.node, []).append(entry.key)
        for name, keys in requests.items():
            self._request_eviction(name, keys)
        evicted: list[str] = []
        deadline = self.clock.monotonic() + timeout
        for name, keys in requests.items():
            report = self._eviction_answer(name, deadline)
            if report is None:
                problems.append(
                    f"node {name}'s agent did not answer in {timeout:.0f} s (is phalanx-node-agent running there "
                    f"with --dataset-store?); the request stays on the node ({EVICT_ANNOTATION}) until it does"
                )
                continue
            for wanted_key in keys:
                if wanted_key in report.held:
                    problems.append(report.refused.get(wanted_key) or f"node {name} kept {wanted_key}")
                else:
                    evicted.append(f"{name}: {wanted_key}")
        failure = eviction_failure(problems, evicted)
        if failure is not None:
            raise OperationError(failure)
        return evicted

    def _request_eviction(self, node: str, keys: list[str]) -> None:
        """Add ``keys`` to the Node's eviction request (a merge patch on the version read, retried on conflict)."""
        for _ in range(10):
            with self.calling("get", NODES):
                obj = self.api.get(NODES, node)
            pending = eviction_request(obj) or []
            value = json.dumps(sorted({*pending, *keys}))
            patch = {
                "metadata": {
                    "resourceVersion": obj["metadata"]["resourceVersion"],
                    "annotations": {EVICT_ANNOTATION: value},
                }
            }
            try:
                with self.calling("patch", NODES):
                    self.api.patch(NODES, node, patch)
                return
            except ConflictError:
                continue
        raise OperationError(f"node {node} kept changing; try `phalanx cache evict` again")

    def _eviction_answer(self, node: str, deadline: float) -> CacheReport | None:
        """The node's report once its agent has carried out the request (removed it); None at the deadline."""
        while True:
            with self.calling("get", NODES):
                obj = self.api.get(NODES, node)
            if eviction_request(obj) is None:
                return cache_report(obj) or CacheReport(directory="")
            if self.clock.monotonic() >= deadline:
                return None
            self.clock.sleep(0.2)  # a CLI waiting for another process; a watch would cost more than it saves here

    def pods_of(self, job: TrainingJob) -> list[dict[str, Any]]:
        """The job's Pods (of this incarnation of its name), by name."""
        return self.job_pods(job.metadata.namespace, job.metadata.name, job.metadata.uid)

    def job_pods(self, namespace: str, name: str, uid: str | None) -> list[dict[str, Any]]:
        """The Pods labelled with the job's name whose job uid (annotation) is ``uid``, by name."""
        with self.calling("list", PODS, namespace):
            pods, _ = self.api.list(PODS, namespace, label_selector=f"{LABEL_JOB}={name}")
        mine = [
            pod
            for pod in pods
            if uid is None or ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_JOB_UID, uid) == uid
        ]
        return sorted(mine, key=lambda p: str(p["metadata"].get("name")))

    def replicas_of(self, job: TrainingJob) -> list[Replica]:
        """The job's Pods as ``Replica`` objects."""
        return [replica_from_pod(pod, job) for pod in self.pods_of(job)]

    def events_of(self, job: TrainingJob) -> list[Event]:
        """Events about the job (its uid), oldest first."""
        if not job.metadata.uid:
            return []
        namespace = job.metadata.namespace
        with self.calling("list", EVENTS, namespace):
            objects, _ = self.api.list(EVENTS, namespace, field_selector=f"involvedObject.uid={job.metadata.uid}")
        return sorted((event_from_object(obj) for obj in objects), key=lambda e: e.time)

    def describe(self, namespace: str, name: str) -> JobDescription:
        """The job, its Pods (as replicas) and its events."""
        job = self.get_job(namespace, name)
        return JobDescription(job=job, replicas=self.replicas_of(job), events=self.events_of(job))

    def explain(self, namespace: str, name: str) -> str:
        """One sentence: why the job is where it is (why it waits, when it waits)."""
        job = self.get_job(namespace, name)
        phase = Phase(job.status.phase)
        if phase == Phase.PENDING:
            return (
                "Pending: accepted, waiting for the phalanx-operator to queue it (if it stays Pending, check that "
                "the operator runs: kubectl -n phalanx-system get pods)."
            )
        if phase == Phase.QUEUED:
            return f"Queued: {job.status.message or job.status.reason or 'waiting for the next scheduling cycle'}"
        detail = job.status.message or job.status.reason
        return f"{phase}: {detail}" if detail else str(phase)

    def logs(self, namespace: str, name: str, replica: str | None = None) -> list[ReplicaLog]:
        """The log of each replica's Pod (or of one replica), in name order.

        Raises:
            OperationError: no such job, or ``replica`` names no Pod of it.
        """
        job = self.get_job(namespace, name)
        found = []
        for pod in self.pods_of(job):
            meta = pod["metadata"]
            pod_name = str(meta.get("name"))
            short = pod_name.removeprefix(f"{name}-")
            if replica is not None and replica not in (pod_name, short):
                continue
            found.append(self.pod_log(pod, short))
        if replica is not None and not found:
            known = ", ".join(f"{role}-{i}" for role, spec in job.spec.replicas.items() for i in range(spec.count))
            raise OperationError(f"replica {replica!r} of job {name} has no Pod yet; replicas: {known}")
        return found

    def pod_log(self, pod: Mapping[str, Any], short: str) -> ReplicaLog:
        """One Pod's log; a Pod that has not started has an empty log, a log that cannot be read says why."""
        meta = pod.get("metadata") or {}
        namespace, pod_name = str(meta.get("namespace")), str(meta.get("name"))
        phase = str((pod.get("status") or {}).get("phase") or "Pending")
        attempt = max(0, _int((meta.get("labels") or {}).get(LABEL_ATTEMPT)))
        text, problem = "", ""
        if (pod.get("spec") or {}).get("nodeName"):
            try:
                text = self.api.logs(namespace, pod_name, container=CONTAINER_NAME)
            except KubeApiError as error:
                if error.status == 403:
                    problem = str(self.error(error, "get", Resource("Pod", "pods/log"), namespace))
                elif not (error.status == 400 and phase == "Pending"):  # 400 while the container is being created
                    problem = f"the log of pod {pod_name} cannot be read: {error.message}"
        return ReplicaLog(short, pod_name, attempt, phase, text, problem)

    # -- writing -------------------------------------------------------------------------------------------------

    def validate(
        self, documents: Sequence[dict[str, Any]], *, source: str | None = None, namespace: str | None = None
    ) -> list[Any]:
        """Validate every document as the embedded runtime does (JobTypes: built-ins and the cluster's).

        With ``namespace``, jobs and Datasets are moved there first (JobTypes and Queues are cluster-scoped) and
        validated in it.

        Raises:
            SpecError: every problem in every document, each with its field path.
        """
        return validate_documents(
            documents, self.jobtypes(), source=source, namespace=namespace, namespaced_kinds=CLUSTER_NAMESPACED_KINDS
        )

    def submit(
        self,
        documents: Sequence[dict[str, Any]],
        *,
        namespace: str | None = None,
        replace_finished: bool = False,
        source: str | None = None,
    ) -> list[Submitted]:
        """Validate everything first, then create the objects (JobTypes before jobs).

        Args:
            documents: TrainingJobs and JobTypes.
            namespace: put every job in this namespace (None: the documents' own, else ``default``).
            replace_finished: a job of the same name that finished (Succeeded or Failed) is deleted first, as
                ``phalanx run`` does on the embedded runtime.
            source: the file the documents came from, for error messages.

        Raises:
            SpecError: invalid documents (nothing is created).
            OperationError: a job of that name exists (nothing is created), or the API refused a request.
        """
        objects = self.validate(documents, source=source, namespace=namespace or None)
        jobs = [o for o in objects if isinstance(o, TrainingJob)]
        jobtypes = [o for o in objects if isinstance(o, JobType)]
        queues = [o for o in objects if isinstance(o, Queue)]
        datasets = [o for o in objects if isinstance(o, Dataset)]
        # Every name is checked before anything is created: a job in the way leaves the cluster as it was.
        replaced: dict[str, dict[str, Any]] = {}
        for job in jobs:
            existing = self._existing_job(job.metadata.namespace, job.metadata.name)
            if existing is None:
                continue
            phase = Phase(job_status(existing).phase)
            if not replace_finished or phase in ACTIVE_PHASES:
                raise _exists_error(job, phase)
            replaced[job.key] = existing
        for key, existing in replaced.items():
            self._delete_and_wait(existing, key)
        created: list[Submitted] = []
        for queue in queues:
            configured = self._apply_queue(queue)
            created.append(Submitted("Queue", "", queue.metadata.name, configured=configured))
        for jobtype in jobtypes:
            self._apply_jobtype(jobtype)
            created.append(Submitted("JobType", "", jobtype.metadata.name))
        for dataset in datasets:
            configured = self._apply(DATASETS, dataset_body(dataset), dataset.metadata.namespace)
            created.append(
                Submitted("Dataset", dataset.metadata.namespace, dataset.metadata.name, configured=configured)
            )
        for job in jobs:
            with self.calling("create", TRAININGJOBS, job.metadata.namespace):
                try:
                    self.api.create(TRAININGJOBS, job_body(job), job.metadata.namespace)
                except ConflictError as error:
                    if error.already_exists:
                        raise _exists_error(job, None) from None
                    raise
                except NotFoundError as error:
                    self._require_installed()
                    raise OperationError(
                        f"cannot create trainingjob {job.key}: {error.message} (create the namespace first: "
                        f"kubectl create namespace {job.metadata.namespace})"
                    ) from None
            created.append(
                Submitted("TrainingJob", job.metadata.namespace, job.metadata.name, replaced=job.key in replaced)
            )
        return created

    def _existing_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self.calling("get", TRAININGJOBS, namespace):
            try:
                return self.api.get(TRAININGJOBS, name, namespace)
            except NotFoundError:
                self._require_installed()
                return None

    def _delete_and_wait(self, existing: Mapping[str, Any], key: str) -> None:
        meta = existing.get("metadata") or {}
        namespace, name, uid = str(meta.get("namespace")), str(meta.get("name")), meta.get("uid")
        # NotFound: gone already; Conflict: a newer job of that name exists (then creating it says so).
        with self.calling("delete", TRAININGJOBS, namespace), contextlib.suppress(NotFoundError, ConflictError):
            self.api.delete(TRAININGJOBS, name, namespace, uid=uid)
        deadline = self.clock.monotonic() + DELETE_WAIT_SECONDS
        while self.clock.monotonic() < deadline:
            with self.calling("get", TRAININGJOBS, namespace):
                try:
                    current = self.api.get(TRAININGJOBS, name, namespace)
                except NotFoundError:
                    return
            if (current.get("metadata") or {}).get("uid") != uid:
                return
            self.clock.sleep(self.poll_seconds)
        raise OperationError(f"job {key} is still being deleted; try again in a moment")

    def _apply_jobtype(self, jobtype: JobType) -> None:
        body = jobtype_body(jobtype)
        name = jobtype.metadata.name
        with self.calling("create", JOBTYPES):
            try:
                self.api.create(JOBTYPES, body)
                return
            except ConflictError as error:
                if not error.already_exists:
                    raise
        for _ in range(MAX_CONFLICT_RETRIES):
            with self.calling("update", JOBTYPES):
                current = self.api.get(JOBTYPES, name)
                if current.get("spec") == body["spec"]:
                    return
                updated = {**current, "spec": body["spec"]}
                try:
                    self.api.replace(JOBTYPES, updated)
                    return
                except ConflictError:
                    continue
        raise OperationError(f"jobtype {name} kept changing; try again")

    def _apply_queue(self, queue: Queue) -> bool:
        """Create the Queue or replace the spec of the existing one (``kubectl apply``); True when it existed."""
        return self._apply(QUEUES, queue_body(queue), None)

    def _apply(self, resource: Resource, body: dict[str, Any], namespace: str | None) -> bool:
        """Create the object or replace the spec (and labels, annotations) of the existing one; True when it existed."""
        name = body["metadata"]["name"]
        with self.calling("create", resource, namespace):
            try:
                self.api.create(resource, body, namespace)
                return False
            except ConflictError as error:
                if not error.already_exists:
                    raise
            except NotFoundError:
                self._require_installed()
                raise
        for _ in range(MAX_CONFLICT_RETRIES):
            with self.calling("update", resource, namespace):
                current = self.api.get(resource, name, namespace)
                metadata = dict(current.get("metadata") or {})
                for key in ("labels", "annotations"):
                    if key in body["metadata"]:
                        metadata[key] = body["metadata"][key]
                updated = {**current, "metadata": metadata, "spec": body["spec"]}
                if updated == current:
                    return True
                try:
                    self.api.replace(resource, updated)
                    return True
                except ConflictError:
                    continue
        raise OperationError(f"{resource.kind.lower()} {name} kept changing; try again")

    def set_suspended(self, namespace: str, name: str, suspend: bool) -> TrainingJob:
        """Halt (suspend) or resume a job; level-triggered: the operator does the rest.

        Raises:
            OperationError: no such job, or the job is finished.
        """
        jobtypes = self.jobtypes()
        for _ in range(MAX_CONFLICT_RETRIES):
            obj = self.job_object(namespace, name)
            job = self.to_job(obj, jobtypes)
            if Phase(job.status.phase) not in ACTIVE_PHASES:
                raise OperationError(f"job {job.key} is {job.status.phase}; it cannot be halted or resumed")
            if job.spec.run_policy.suspend == suspend:
                return job
            patch = {
                "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                "spec": {"runPolicy": {"suspend": suspend}},
            }
            with self.calling("patch", TRAININGJOBS, namespace):
                try:
                    updated = self.api.patch(TRAININGJOBS, name, patch, namespace)
                except ConflictError:
                    continue
            return self.to_job(updated, jobtypes)
        raise OperationError(f"job {namespace}/{name} kept changing; try again")

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete a job; its Pods, Service and ConfigMap are garbage-collected with it.

        Raises:
            OperationError: no such job.
        """
        obj = self.job_object(namespace, name)
        with self.calling("delete", TRAININGJOBS, namespace), contextlib.suppress(NotFoundError):
            self.api.delete(TRAININGJOBS, name, namespace, uid=(obj.get("metadata") or {}).get("uid"))


def _exists_error(job: TrainingJob, phase: Phase | None) -> JobExistsError:
    flag = "" if job.metadata.namespace == "default" else f" -n {job.metadata.namespace}"
    phase_name = None if phase is None else str(phase)
    return JobExistsError(
        exists_message(f"trainingjob {job.key}", job.metadata.name, flag, phase_name),
        namespace=job.metadata.namespace,
        name=job.metadata.name,
        phase=phase_name,
    )
