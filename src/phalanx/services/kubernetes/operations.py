"""The Kubernetes backend of the operations: the port over a cluster's API server (``KubeBackend``).

``KubeOperations`` is the one ``services.operations.Operations`` over ``KubeBackend``, plus the Pods' logs. The
CLI's kubernetes backend and ``phalanx.Client.kubernetes`` call it; the phalanx-operator and phalanx-scheduler do
the rest, as the embedded control plane does for the embedded runtime. What this backend does its own way:

- **Objects** are read and written as the API server keeps them (``adapters.kubernetes.objects`` translates);
  a replacement keeps what kubectl or the controllers set in the stored metadata.
- **Halt and resume** are a merge patch of ``spec.runPolicy.suspend``, conditional on the resourceVersion that
  was read, exactly the embedded runtime's update of the same field; the operator moves the phases.
- **Delete** removes the TrainingJob (``run`` waits until a finished one it replaces is gone); its Pods, Service
  and ConfigMap are garbage-collected through their ownerReferences.
- **Watch** is the API server's own watch of the kind, from the resourceVersion given (its bookmarks passed on, a
  410 Gone an ``ExpiredError``); a deletion carries the object as it was last.
- **Replicas** are the job's Pods (``<job>-<role>-<index>``, labelled ``phalanx.dev/job``), **events** the
  core/v1 Events whose ``involvedObject.uid`` is the job's, and **logs** the Pods' logs (a Pod of an earlier
  attempt is deleted before the next is created, so the Pod that exists is the latest attempt).

Every failure of the API becomes an ``OperationError`` that says what to do: an unreachable server, Phalanx not
installed (its API group is not served), a missing permission (the verb and the resource).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.datacache import in_use_sentence
from phalanx.adapters.kubernetes.api import (
    DATASETS,
    EVENTS,
    JOBTYPES,
    NODES,
    PIPELINERUNS,
    PIPELINES,
    PODS,
    QUEUES,
    SWEEPS,
    TRAININGJOBS,
    ConflictError,
    GoneError,
    KubeApi,
    KubeApiError,
    KubeConfigError,
    NotFoundError,
    Resource,
)
from phalanx.adapters.kubernetes.cache_report import EVICT_ANNOTATION, CacheReport, cache_report, eviction_request
from phalanx.adapters.kubernetes.informer import Informer
from phalanx.adapters.kubernetes.manifests import USER_CLUSTER_ROLE, USER_EDIT_ROLE
from phalanx.adapters.kubernetes.objects import (
    LABEL_ATTEMPT,
    LABEL_JOB,
    dataset_from_object,
    event_from_object,
    job_document,
    job_from_object,
    job_status,
    jobtype_from_object,
    node_from_object,
    object_body,
    pipeline_from_object,
    pipeline_run_from_object,
    queue_from_object,
    replica_from_pod,
    status_body,
    sweep_from_object,
)
from phalanx.adapters.kubernetes.rendering import ANNOTATION_JOB_UID, CONTAINER_NAME, DEFAULT_SCHEDULER_NAME
from phalanx.core.pipelines.step_files import StepFiles
from phalanx.model.base import API_GROUP, in_phases
from phalanx.model.datasets import Dataset
from phalanx.model.errors import SpecError
from phalanx.model.events import Event
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.masking import mask_url
from phalanx.model.nodes import Node
from phalanx.model.pipelines import Pipeline, PipelineRun
from phalanx.model.queues import Queue
from phalanx.model.replicas import Replica
from phalanx.model.sweeps import Sweep
from phalanx.model.validation import parse_job
from phalanx.services import port
from phalanx.services.dataset_views import CacheEntryView, NodeCacheView, cache_view_from_labels
from phalanx.services.kubernetes.apply import event_body
from phalanx.services.operations import OperationError, Operations, no_replica_logs
from phalanx.services.port import Readable, Stored, WithStatus, Written

log = logging.getLogger(__name__)

INSTALL_HINT = "phalanx install --print | kubectl apply -f -"
NOT_INSTALLED = f"Phalanx is not installed on this cluster: {INSTALL_HINT}"
DELETE_WAIT_SECONDS = 60.0
EVICT_TIMEOUT_S = 30.0  # how long `phalanx cache evict` waits for the node agents to answer
#: The resource of each kind the port reads or writes.
RESOURCES: dict[type, Resource] = {
    TrainingJob: TRAININGJOBS,
    JobType: JOBTYPES,
    Queue: QUEUES,
    Dataset: DATASETS,
    Node: NODES,
    Sweep: SWEEPS,
    Pipeline: PIPELINES,
    PipelineRun: PIPELINERUNS,
}
_READERS: dict[type, Callable[[Mapping[str, Any]], Any]] = {
    JobType: jobtype_from_object,
    Queue: queue_from_object,
    Dataset: dataset_from_object,
    Node: node_from_object,
    Sweep: sweep_from_object,
    Pipeline: pipeline_from_object,
    PipelineRun: pipeline_run_from_object,
}


#: Lines of a Pod's log that ``read_log`` asks for at most (the API server cuts by lines, not by size).
LOG_TAIL_LINES = 20_000

#: The kinds ``submit -n`` moves on a cluster: JobTypes and Queues are cluster-scoped there.
CLUSTER_NAMESPACED_KINDS = frozenset({"TrainingJob", "Dataset", "Sweep", "Pipeline", "PipelineRun"})


@dataclass(frozen=True)
class ReplicaLog:
    """The log of one replica's Pod (its latest attempt)."""

    replica: str  # e.g. worker-0
    pod: str
    attempt: int
    phase: str
    text: str
    error: str = ""  # why the log could not be read, when it could not


def stamp_key(stamp: str) -> str:
    """A log line's RFC 3339 time as UTC text that sorts as the time does (``""`` when it is no such time).

    The kubelet writes a line's time with nanoseconds, in the node's zone (``Z`` or ``+02:00``), and Go's
    RFC3339Nano drops a fraction's trailing zeros (``...:05Z``, ``...:05.25Z``): here always
    ``YYYY-MM-DDTHH:MM:SS.nnnnnnnnn`` in UTC, whose first 19 characters are a ``sinceTime``.
    """
    base, rest = stamp[:19], stamp[19:]
    digits = ""
    if rest.startswith("."):  # the fraction's digits, then the zone
        end = 1
        while end < len(rest) and rest[end].isdigit():
            end += 1
        digits, rest = rest[1:end], rest[end:]
    try:
        when = datetime.fromisoformat(base + ("+00:00" if rest in ("Z", "z", "") else rest)).astimezone(UTC)
    except ValueError:
        return ""
    return f"{when:%Y-%m-%dT%H:%M:%S}.{digits[:9]:0<9}"


def stamped_lines_after(text: str, source: str, since: port.LogCursor | None) -> port.LogChunk:
    """The complete lines of a timestamped log (``timestamps=true``) past ``since``, without their times.

    A line whose time cannot be read is taken to have the time of the line before it.
    """
    *lines, partial = text.split("\n")
    stamp, count = (since.stamp, since.offset) if since is not None else ("", 0)
    skip, previous = count, ""
    kept: builtins.list[str] = []
    for line in lines:
        time, _, body = line.partition(" ")
        key = previous = stamp_key(time) or previous
        if since is not None and (key < since.stamp or (key == since.stamp and skip > 0)):
            skip -= key == since.stamp
            continue  # read before
        kept.append(body + "\n")
        stamp, count = (stamp, count + 1) if key == stamp else (key, 1)
    return port.LogChunk("".join(kept), port.LogCursor(source, count, stamp), partial.partition(" ")[2])


def _identity(obj: WithStatus) -> dict[str, Any]:
    """What a status write and an Event carry of the object: its kind and identity, as the API names them."""
    meta = obj.metadata.model_dump(include={"name", "namespace", "uid", "resource_version"}, by_alias=True)
    return {"apiVersion": obj.api_version, "kind": obj.kind, "metadata": meta}


#: The cluster-scoped resources users read, which the ClusterRole ``phalanx-cluster-view`` grants.
_CLUSTER_VIEWED = frozenset({f"queues.{API_GROUP}", f"jobtypes.{API_GROUP}", "nodes"})


def resource_name(resource: Resource) -> str:
    """``trainingjobs.phalanx.dev``, ``pods``: how kubectl and RBAC name a resource."""
    return f"{resource.plural}.{resource.group}" if resource.group else resource.plural


def _count(value: Any) -> int:
    try:
        return max(0, int(str(value)))
    except (TypeError, ValueError):
        return 0


class KubeBackend:
    """The operations' port over one cluster (one kubeconfig context); every API failure says what to do."""

    job_noun = "trainingjob"
    namespaced_kinds = CLUSTER_NAMESPACED_KINDS
    pod_field_refusals: Mapping[str, str] = {}  # every pod field reaches the Pod
    cluster_scheduling = True
    runs_images = True
    own_scheduler: str | None = DEFAULT_SCHEDULER_NAME
    algorithms_here = False  # the operator's image runs them
    #: Pods see none of the operator's directories: only a PersistentVolumeClaim reaches them (``artifact_claim``).
    step_files = StepFiles(same_filesystem=False)

    def __init__(
        self,
        api: KubeApi,
        *,
        server: str = "",
        poll_seconds: float = 0.5,
        evict_timeout: float = EVICT_TIMEOUT_S,
        clock: Clock | None = None,
        component: str = "phalanx",
        instance: str | None = None,
        informers: Mapping[Any, Informer] | None = None,  # by model class
        artifact_claim: str | None = None,  # the claim the operator's artifact store is on (step jobs mount it)
    ) -> None:
        self.api = api
        self.step_files = StepFiles(same_filesystem=False, claim=artifact_claim)
        self.server = server
        self.poll_seconds = poll_seconds
        self.evict_timeout = evict_timeout
        self.clock = clock or SystemClock()
        self.component, self.instance = component, instance or component  # who the Events say reported them
        # A controller's caches, by kind: a status it writes is in its cache at once, for its next pass.
        self.informers = dict(informers or {})
        # Called with the object, its new status and the API's answer after each status write (a parse cache).
        self.on_written: Callable[[Any, Any, dict[str, Any]], None] | None = None
        self._served: frozenset[str] | None = None  # Phalanx's plurals the API server serves (discovery)

    # -- errors --------------------------------------------------------------------------------------------------

    def installed(self, resource: Resource = TRAININGJOBS) -> bool:
        """True when the API server serves Phalanx's ``resource`` (TrainingJobs: Phalanx is installed at all)."""
        if self._served is None:
            path = f"/apis/{TRAININGJOBS.group}/{TRAININGJOBS.version}"
            try:
                served = self.api.request("GET", path) or {}
            except NotFoundError:
                self._served = frozenset()
            except KubeApiError:
                return True  # cannot tell (e.g. discovery refused): let the request's own error speak
            else:
                self._served = frozenset(str(r.get("name")) for r in served.get("resources") or [])
        return resource.plural in self._served

    def not_installed(self, resource: Resource) -> OperationError | None:
        """Why ``resource`` is not served, when it is one of Phalanx's and it is not; None otherwise.

        Phalanx absent altogether, or an install older than this client (its CRDs lack a kind added since, such
        as Sweep): both are mended by applying the current install.
        """
        if resource.group != TRAININGJOBS.group or self.installed(resource):
            return None
        if resource is TRAININGJOBS or not self.installed():
            return OperationError(NOT_INSTALLED)
        return OperationError(
            f"this cluster's Phalanx install does not serve {resource_name(resource)} (it is older than this "
            f"client); update it: {INSTALL_HINT}"
        )

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
            # The install's ClusterRoles for people grant what users need (manifests.user_roles): name the one.
            role = (
                f"the ClusterRole {USER_EDIT_ROLE} (in Kubernetes' edit) in your namespace"
                if resource.namespaced and resource.group == API_GROUP
                else f"the ClusterRole {USER_CLUSTER_ROLE}, bound cluster-wide"
                if what in _CLUSTER_VIEWED
                else "that permission"
            )
            return OperationError(
                f"forbidden: you may not {verb} {what}{where} ({error.message}); ask a cluster administrator for {role}"
            )
        missing = self.not_installed(resource) if error.status == 404 else None
        if missing is not None:
            return missing
        return OperationError(f"cannot {verb} {what}{where}: {error.message}")

    @contextmanager
    def calling(self, verb: str, resource: Resource, namespace: str | None = None) -> Iterator[None]:
        """Turn any ``KubeApiError`` raised inside into an ``OperationError`` naming ``verb`` and ``resource``."""
        try:
            yield
        except KubeApiError as error:
            raise self.error(error, verb, resource, namespace) from None

    def _require_installed(self, resource: Resource = TRAININGJOBS) -> None:
        missing = self.not_installed(resource)
        if missing is not None:
            raise missing

    # -- reading -------------------------------------------------------------------------------------------------

    def raw(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object as the API server stores it; None when there is none."""
        namespace = namespace if resource.namespaced else None
        with self.calling("get", resource, namespace):
            try:
                return self.api.get(resource, name, namespace)
            except NotFoundError:
                self._require_installed(resource)
                return None

    def to_job(self, obj: Mapping[str, Any], jobtypes: Mapping[str, JobType] | None = None) -> TrainingJob:
        """The stored object as a validated, defaulted job; one the JobTypes reject is shown as stored.

        Raises:
            OperationError: the object is not a TrainingJob the model can read at all.
        """
        if jobtypes is None:
            jobtypes = {**builtin_jobtypes(), **{t.metadata.name: t for t in self.list(JobType)}}
        try:
            return job_from_object(obj, jobtypes)
        except SpecError:
            # E.g. its JobType was removed since, or the job came from kubectl: show it as stored, with the status
            # the operator wrote (which says what is wrong with it).
            try:
                job = parse_job(job_document(obj))
            except SpecError as err:
                meta = obj.get("metadata") or {}
                raise OperationError(f"job {meta.get('namespace')}/{meta.get('name')} cannot be read: {err}") from None
            return job.model_copy(update={"status": job_status(obj)})

    def get(self, kind: type[Readable], namespace: str, name: str) -> Readable | None:
        """One object; one that cannot be read (written past the schema) says so."""
        resource = RESOURCES[kind]
        obj = self.raw(resource, namespace, name)
        if obj is None:
            return None
        if kind is TrainingJob:
            return self.to_job(obj)  # type: ignore[return-value]
        try:
            return self.model_of(kind, obj)
        except (SpecError, ValueError) as err:
            where = f"{namespace}/{name}" if resource.namespaced else name
            raise OperationError(f"{kind.__name__.lower()} {where} cannot be read: {err}") from None

    def list(
        self,
        kind: type[Readable],
        namespace: str | None = None,
        *,
        labels: port.LabelSelector | None = None,
        phases: Collection[str] | None = None,
    ) -> builtins.list[Readable]:
        """The objects with ``labels`` and ``phases``; one that cannot be read is left out.

        The API server selects the labels; the phases are chosen here (a custom resource's status is no field
        the API server selects on).
        """
        resource = RESOURCES[kind]
        namespace = namespace if resource.namespaced else None
        selector = port.selector_text(labels) if labels else None
        try:
            objects, _ = self.api.list(resource, namespace, label_selector=selector)
        except KubeApiError as error:
            if kind is JobType and error.status == 403:
                return []  # may not list JobTypes: validate against the built-ins, the server checks the rest
            raise self.error(error, "list", resource, namespace) from None
        return in_phases(self._readable(kind, objects), phases)

    def count_jobs(self) -> dict[port.JobCount, int]:
        """The jobs listed (from the informers' cache where there is one) and counted."""
        return port.count_jobs_of(self.list(TrainingJob))

    def list_page(
        self,
        kind: type[Readable],
        namespaces: Collection[str] | None = None,
        *,
        labels: port.LabelSelector | None = None,
        limit: int = 0,
        cursor: str | None = None,
    ) -> port.ListPage[Readable]:
        """A page of the API server's own paging (``limit``/``continue``), namespace after namespace.

        The API server lists in its keys' order (namespace, then name), which is the port's. Every namespace
        (None) or one is a single paged list; several (a token reaching a few) are listed one after the other,
        the cursor saying which namespace the API server's continue token is of.

        Raises:
            CursorError: the cursor is not one of this backend's, or the API server no longer knows its token
                (410: the list it started from is too old).
        """
        resource = RESOURCES[kind]
        chosen: builtins.list[str | None] = [None]
        if namespaces is not None and resource.namespaced:
            wanted: builtins.list[str] = sorted(frozenset(namespaces))
            chosen = list(wanted)
        index, token = _read_kube_cursor(cursor, chosen)
        selector = port.selector_text(labels) if labels else None
        items: builtins.list[dict[str, Any]] = []
        remaining: int | None = 0
        for at in range(index, len(chosen)):
            want = limit - len(items) if limit > 0 else 0
            try:
                objects, token, remaining = self.api.list_page(
                    resource, chosen[at], label_selector=selector, limit=want, continue_token=token
                )
            except KubeApiError as error:
                if error.status in (400, 410) and token:
                    raise port.CursorError(port.CURSOR_REFUSAL) from None
                raise self.error(error, "list", resource, chosen[at]) from None
            items += objects
            if token is not None:  # this namespace goes on
                return port.ListPage(
                    self._readable(kind, items), _kube_cursor(chosen[at], token), _more(remaining, at, chosen)
                )
            if limit > 0 and len(items) >= limit and at + 1 < len(chosen):
                return port.ListPage(self._readable(kind, items), _kube_cursor(chosen[at + 1], ""), None)
        return port.ListPage(self._readable(kind, items), None, 0)

    def _readable(self, kind: type[Readable], objects: Sequence[Mapping[str, Any]]) -> builtins.list[Readable]:
        """The objects as the model's; one that cannot be read is left out."""
        if kind is TrainingJob:
            jobtypes = {**builtin_jobtypes(), **{t.metadata.name: t for t in self.list(JobType)}} if objects else {}
            found: builtins.list[Any] = []
            for obj in objects:
                with contextlib.suppress(OperationError):
                    found.append(self.to_job(obj, jobtypes))
            return found
        found = []
        for obj in objects:
            with contextlib.suppress(SpecError, ValueError):
                found.append(self.model_of(kind, obj))
        return found

    # -- the change side -----------------------------------------------------------------------------------------

    def resource_version(self, kind: type[Stored]) -> str:
        """The resourceVersion of a list of the kind: a watch after it sees every later change.

        A whole list (paged), read once when a server's feed of the kind starts: the port's lists take no limit.
        """
        resource = RESOURCES[kind]
        with self.calling("list", resource):
            _, version = self.api.list(resource)
        return version

    def watch(self, kind: type[Stored], resource_version: str, *, timeout: float) -> Iterator[port.WatchEvent]:
        """The API server's watch of the kind in every namespace, until its ``timeoutSeconds`` end it.

        An object the model cannot read (written by kubectl past the schema) is passed over, its resourceVersion
        kept as a bookmark: the reader's place moves on, and a later list shows the object as stored.
        """
        resource = RESOURCES[kind]
        jobtypes: dict[str, JobType] | None = None
        try:
            for change, obj in self.api.watch(resource, resource_version, None, timeout_seconds=max(1, int(timeout))):
                meta = obj.get("metadata") or {}
                version = str(meta.get("resourceVersion") or "")
                if change == "BOOKMARK":
                    yield port.WatchEvent("BOOKMARK", version)
                    continue
                if change not in ("ADDED", "MODIFIED", "DELETED"):
                    continue
                obj.setdefault("kind", resource.kind)
                obj.setdefault("apiVersion", resource.api_version)
                try:
                    if kind is TrainingJob:
                        if jobtypes is None:
                            jobtypes = {**builtin_jobtypes(), **{t.metadata.name: t for t in self.list(JobType)}}
                        model: Stored = self.to_job(obj, jobtypes)
                    else:
                        model = self.model_of(kind, obj)  # type: ignore[type-var]  # Stored kinds are Readable
                except (SpecError, ValueError, OperationError) as err:
                    log.warning(
                        "watch %s: %s/%s cannot be read: %s",
                        resource.plural,
                        meta.get("namespace"),
                        meta.get("name"),
                        err,
                    )
                    yield port.WatchEvent("BOOKMARK", version)
                    continue
                yield port.WatchEvent(
                    cast(port.WatchType, change),
                    version,
                    str(meta.get("namespace") or ""),
                    str(meta.get("name") or ""),
                    model,
                )
        except GoneError:
            raise port.ExpiredError(
                f"resourceVersion {resource_version} is older than the changes the API server keeps for "
                f"{resource.plural}; list again and watch from the list's metadata.resourceVersion"
            ) from None
        except KubeApiError as error:
            raise self.error(error, "watch", resource) from None

    @staticmethod
    def model_of(kind: type[Readable], obj: Mapping[str, Any]) -> Readable:
        """A stored object of a kind other than TrainingJob as its model.

        Raises:
            SpecError: it is not a valid object of its kind.
        """
        return _READERS[kind](obj)  # type: ignore[no-any-return]

    def job_pods(self, namespace: str, name: str, uid: str | None) -> builtins.list[dict[str, Any]]:
        """The Pods labelled with the job's name whose job uid (annotation) is ``uid``, by name."""
        with self.calling("list", PODS, namespace):
            pods, _ = self.api.list(PODS, namespace, label_selector=f"{LABEL_JOB}={name}")
        mine = [
            pod
            for pod in pods
            if uid is None or ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_JOB_UID, uid) == uid
        ]
        return sorted(mine, key=lambda p: str(p["metadata"].get("name")))

    def replicas_of(self, job: TrainingJob) -> builtins.list[Replica]:
        """The job's Pods (of this incarnation of its name) as ``Replica`` objects."""
        pods = self.job_pods(job.metadata.namespace, job.metadata.name, job.metadata.uid)
        return [replica_from_pod(pod, job) for pod in pods]

    def events_of(self, obj: WithStatus) -> builtins.list[Event]:
        """The core/v1 Events whose ``involvedObject.uid`` is the object's, oldest first."""
        if not obj.metadata.uid:
            return []
        namespace = obj.metadata.namespace
        with self.calling("list", EVENTS, namespace):
            objects, _ = self.api.list(EVENTS, namespace, field_selector=f"involvedObject.uid={obj.metadata.uid}")
        return sorted((event_from_object(o) for o in objects), key=lambda e: e.time)

    def read_log(self, job: TrainingJob, replica: str, cursor: port.LogCursor | None = None) -> port.LogChunk | None:
        """The replica's Pod log past the cursor: asked from the cursor's second on, its lines read before left out.

        The API reads a log by time, not by offset: lines come with their timestamps (``timestamps``) and the
        request starts at the second of the last line read (``sinceTime`` has no finer grain), so the lines of
        that second already read (``cursor.offset`` of them carry ``cursor.stamp``) are dropped again here. A Pod
        of another uid (the replica restarted) is read from its start. None when the Pod is not placed yet.
        """
        pod = next(
            (
                pod
                for pod in self.job_pods(job.metadata.namespace, job.metadata.name, job.metadata.uid)
                if str((pod.get("metadata") or {}).get("name")) == f"{job.metadata.name}-{replica}"
                and (pod.get("spec") or {}).get("nodeName")
            ),
            None,
        )
        if pod is None:
            return None
        meta = pod.get("metadata") or {}
        source = str(meta.get("uid") or meta.get("name"))
        since = cursor if cursor is not None and cursor.source == source and cursor.stamp else None
        try:
            text = self.api.logs(
                str(meta.get("namespace")),
                str(meta.get("name")),
                container=CONTAINER_NAME,
                tail_lines=LOG_TAIL_LINES,
                since_time=since.stamp[:19] + "Z" if since is not None else None,  # UTC, to the second
                timestamps=True,
            )
        except KubeApiError:
            return None  # being created, or gone: the next pass reads it again
        return stamped_lines_after(text, source, since)

    # -- writing -------------------------------------------------------------------------------------------------

    def create(self, obj: Stored) -> None:
        """POST the object (no status, only the metadata a user may set).

        None: the API server's answer carries fields the port's objects do not (managedFields), so a caller
        that wants the object reads it as the port shows it.
        """
        resource = RESOURCES[type(obj)]
        namespace = obj.metadata.namespace if resource.namespaced else None
        with self.calling("create", resource, namespace):
            try:
                self.created(
                    resource, self.api.create(resource, object_body(obj, namespaced=resource.namespaced), namespace)
                )
            except ConflictError as error:
                if error.already_exists:
                    raise port.AlreadyExistsError(error.message) from None
                raise
            except NotFoundError as error:
                self._require_installed(resource)
                if not resource.namespaced:
                    raise
                raise OperationError(
                    f"cannot create {resource.kind.lower()} {namespace}/{obj.metadata.name}: {error.message} "
                    f"(create the namespace first: kubectl create namespace {namespace})"
                ) from None

    def replace(self, obj: Stored) -> None:
        """PUT the stored object with ``obj``'s spec, labels and annotations, on the version ``obj`` was read at.

        The rest of the stored metadata (finalizers, owner references, managed fields) stays as it is.
        """
        resource = RESOURCES[type(obj)]
        namespace = obj.metadata.namespace if resource.namespaced else None
        current = self.raw(resource, namespace, obj.metadata.name)
        if current is None:
            raise port.NotFoundError(obj.metadata.name)
        metadata = dict(current.get("metadata") or {})
        if metadata.get("resourceVersion") != obj.metadata.resource_version:
            raise port.ConflictError(f"{obj.metadata.name} changed since it was read")
        wanted = object_body(obj, namespaced=resource.namespaced)["metadata"]
        for key in ("labels", "annotations"):
            if key in wanted:
                metadata[key] = wanted[key]
        with self.calling("update", resource, namespace):
            try:
                self.created(
                    resource,
                    self.api.replace(resource, {**current, "metadata": metadata, "spec": obj.to_dict().get("spec")}),
                )
            except ConflictError as error:
                raise port.ConflictError(error.message) from None

    def created(self, resource: Resource, answer: dict[str, Any]) -> None:
        """What the API answered to a create or replace (the object as stored); a cached backend keeps it."""

    def delete(self, kind: type[Stored], namespace: str, name: str, *, uid: str | None = None) -> None:
        """DELETE the object (only the incarnation ``uid``, when given)."""
        resource = RESOURCES[kind]
        namespace_used = namespace if resource.namespaced else None
        with self.calling("delete", resource, namespace_used):
            try:
                self.api.delete(resource, name, namespace_used, uid=uid)
            except (NotFoundError, ConflictError) as error:  # Conflict: a newer object of that name, not this one
                raise port.NotFoundError(error.message) from None

    def set_suspend(self, job: TrainingJob, suspend: bool) -> TrainingJob:
        """A merge patch of ``spec.runPolicy.suspend`` alone, conditional on the resourceVersion read.

        Only that field is sent: the stored spec may lack defaults the model filled in, and stays as it is.
        """
        patch = {
            "metadata": {"resourceVersion": job.metadata.resource_version},
            "spec": {"runPolicy": {"suspend": suspend}},
        }
        namespace = job.metadata.namespace
        with self.calling("patch", TRAININGJOBS, namespace):
            try:
                updated = self.api.patch(TRAININGJOBS, job.metadata.name, patch, namespace)
            except ConflictError as error:
                raise port.ConflictError(error.message) from None
        return self.to_job(updated)

    # -- the status side -------------------------------------------------------------------------------------

    def write_status(self, obj: WithStatus, changes: Mapping[str, Any]) -> Written:
        """PUT the status subresource on the resourceVersion read; another API failure is raised as it is.

        A PUT with only the object's identity and the new status: the API server applies it without the decode
        and merge of the stored object that a patch costs it (about a tenth of its CPU per one-Pod job).
        """
        status = obj.status.model_copy(update=dict(changes))
        if status == obj.status:
            return Written.UNCHANGED
        informer, meta = self.informers.get(type(obj)), obj.metadata
        try:
            written = self.api.replace_status(RESOURCES[type(obj)], status_body(_identity(obj), status))
        except (ConflictError, NotFoundError) as error:
            if informer is not None and isinstance(error, NotFoundError):
                informer.forget(meta.namespace, meta.name)
            return Written.LOST
        if informer is not None:
            informer.observe(written)
        if self.on_written is not None:
            self.on_written(obj, status, written)
        return Written.WROTE

    def record(self, obj: WithStatus, reason: str, message: str, *, warning: bool = False) -> None:
        """Create a core/v1 Event about the object (a lost one is logged)."""
        text, now = mask_url(message), self.clock.now()  # events are shown (kubectl describe): never a password
        who = {"component": self.component, "instance": self.instance, "kind": obj.kind}
        body = event_body(_identity(obj), reason, text, warning=warning, now=now, **who)
        try:
            self.api.create(EVENTS, body, obj.metadata.namespace)
        except KubeApiError as error:
            log.debug("event %s on %s %s not recorded: %s", reason, obj.kind, obj.metadata.name, error)

    def delete_job(self, namespace: str, name: str) -> None:
        """DELETE the TrainingJob; its Pods, Service and ConfigMap are garbage-collected with it."""
        obj = self.raw(TRAININGJOBS, namespace, name)
        if obj is None:
            raise port.NotFoundError(f"job {namespace}/{name}")
        with contextlib.suppress(port.NotFoundError):
            self.delete(TrainingJob, namespace, name, uid=(obj.get("metadata") or {}).get("uid"))

    def remove_finished(self, job: TrainingJob) -> None:
        """DELETE the finished job and wait until its name is free (its dependents are collected after it)."""
        namespace, name, uid = job.metadata.namespace, job.metadata.name, job.metadata.uid
        with contextlib.suppress(port.NotFoundError):
            self.delete(TrainingJob, namespace, name, uid=uid)
        deadline = self.clock.monotonic() + DELETE_WAIT_SECONDS
        while self.clock.monotonic() < deadline:
            current = self.raw(TRAININGJOBS, namespace, name)
            if current is None or (current.get("metadata") or {}).get("uid") != uid:
                return
            self.clock.sleep(self.poll_seconds)
        raise OperationError(f"job {job.key} is still being deleted; try again in a moment")

    def pending_explanation(self) -> str:
        """Pending: the operator has not queued it yet."""
        return (
            "Pending: accepted, waiting for the phalanx-operator to queue it (if it stays Pending, check that "
            "the operator runs: kubectl -n phalanx-system get pods)."
        )

    # -- node caches ---------------------------------------------------------------------------------------------

    def cache_views(self, node: str | None) -> builtins.list[NodeCacheView]:
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
                views.append(cache_view(report, str(meta["name"])))
            else:
                views.append(cache_view_from_labels(str(meta["name"]), dict(meta.get("labels") or {})))
        return views

    def evict_entries(
        self, targets: Sequence[tuple[NodeCacheView, CacheEntryView]]
    ) -> tuple[builtins.list[str], builtins.list[str]]:
        """Ask the node agents to evict the entries and wait for their answer.

        An entry a job uses is refused here, from the agent's report, and again by the agent, which checks its
        pins as it evicts.
        """
        requests: dict[str, builtins.list[str]] = {}
        problems: builtins.list[str] = []
        for view, entry in targets:
            if entry.pinned_by or entry.state != "ready":
                problems.append(in_use_sentence(entry.key, entry.dataset, f"node {view.node}", entry.pinned_by))
            else:
                requests.setdefault(view.node, []).append(entry.key)
        for name, keys in requests.items():
            self._request_eviction(name, keys)
        evicted: builtins.list[str] = []
        deadline = self.clock.monotonic() + self.evict_timeout
        for name, keys in requests.items():
            report = self._eviction_answer(name, deadline)
            if report is None:
                problems.append(
                    f"node {name}'s agent did not answer in {self.evict_timeout:.0f} s (is phalanx-node-agent running "
                    f"there with --dataset-store?); the request stays on the node ({EVICT_ANNOTATION}) until it does"
                )
                continue
            for wanted_key in keys:
                if wanted_key in report.held:
                    problems.append(report.refused.get(wanted_key) or f"node {name} kept {wanted_key}")
                else:
                    evicted.append(f"{name}: {wanted_key}")
        return evicted, problems

    def _request_eviction(self, node: str, keys: builtins.list[str]) -> None:
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


class KubeOperations(Operations):
    """The user's operations on one cluster (one kubeconfig context), with the Pods' logs."""

    backend: KubeBackend

    def __init__(
        self, api: KubeApi, *, server: str = "", poll_seconds: float = 0.5, clock: Clock | None = None
    ) -> None:
        super().__init__(KubeBackend(api, server=server, poll_seconds=poll_seconds, clock=clock))
        self.api = api
        self.server = server
        self.poll_seconds = poll_seconds

    def job_object(self, namespace: str, name: str) -> dict[str, Any]:
        """The job as the API server stores it.

        Raises:
            OperationError: no such job (with the names of existing ones), or the API failed.
        """
        obj = self.backend.raw(TRAININGJOBS, namespace, name)
        if obj is None:
            raise self.no_job(namespace, name)
        return obj

    def job_pods(self, namespace: str, name: str, uid: str | None) -> builtins.list[dict[str, Any]]:
        """The Pods labelled with the job's name whose job uid (annotation) is ``uid``, by name."""
        return self.backend.job_pods(namespace, name, uid)

    def logs(self, namespace: str, name: str, replica: str | None = None) -> builtins.list[ReplicaLog]:
        """The log of each replica's Pod (or of one replica), in name order.

        Raises:
            OperationError: no such job, or ``replica`` names no Pod of it.
        """
        job = self.get_job(namespace, name)
        found = []
        for pod in self.job_pods(namespace, name, job.metadata.uid):
            pod_name = str(pod["metadata"].get("name"))
            short = pod_name.removeprefix(f"{name}-")
            if replica is not None and replica not in (pod_name, short):
                continue
            found.append(self.pod_log(pod, short))
        if replica is not None and not found:
            raise no_replica_logs(job, replica, "no Pod yet")
        return found

    def pod_log(self, pod: Mapping[str, Any], short: str) -> ReplicaLog:
        """One Pod's log; a Pod that has not started has an empty log, a log that cannot be read says why."""
        meta = pod.get("metadata") or {}
        namespace, pod_name = str(meta.get("namespace")), str(meta.get("name"))
        phase = str((pod.get("status") or {}).get("phase") or "Pending")
        attempt = _count((meta.get("labels") or {}).get(LABEL_ATTEMPT))
        text, problem = "", ""
        if (pod.get("spec") or {}).get("nodeName"):
            try:
                text = self.api.logs(namespace, pod_name, container=CONTAINER_NAME)
            except KubeApiError as error:
                if error.status == 403:
                    problem = str(self.backend.error(error, "get", Resource("Pod", "pods/log"), namespace))
                elif not (error.status == 400 and phase == "Pending"):  # 400 while the container is being created
                    problem = f"the log of pod {pod_name} cannot be read: {error.message}"
        return ReplicaLog(short, pod_name, attempt, phase, text, problem)


def cache_view(report: CacheReport, node: str) -> NodeCacheView:
    """What ``phalanx cache ls`` shows of a node's cache report."""
    entries = [
        CacheEntryView(key, e.dataset, e.bytes, report.entries.get(key, "ready"), e.pinned_by)
        for key, e in sorted(report.held.items())
    ]
    return NodeCacheView(node, report.capacity, report.used, entries, dict(report.counters))


def _kube_cursor(namespace: str | None, token: str) -> str:
    """A ``list_page`` cursor: the namespace being listed (empty: every one) and the API server's token there."""
    return json.dumps({"n": namespace or "", "c": token}, separators=(",", ":"))


def _read_kube_cursor(cursor: str | None, chosen: Sequence[str | None]) -> tuple[int, str | None]:
    """Which of ``chosen`` a cursor goes on in, and the API server's token there (None: from its start).

    Raises:
        CursorError: not a cursor of ``_kube_cursor``, or one of a namespace not in ``chosen``.
    """
    if cursor is None:
        return 0, None
    try:
        document = json.loads(cursor)
    except ValueError:
        raise port.CursorError(port.CURSOR_REFUSAL) from None
    if (
        not isinstance(document, dict)
        or not isinstance(document.get("n"), str)
        or not isinstance(document.get("c"), str)
    ):
        raise port.CursorError(port.CURSOR_REFUSAL)
    namespace = document["n"] or None
    if namespace not in chosen:
        raise port.CursorError(port.CURSOR_REFUSAL)
    return chosen.index(namespace), document["c"] or None


def _more(remaining: int | None, at: int, chosen: Sequence[str | None]) -> int | None:
    """How many objects follow a page: the API server's count, when the namespace paged is the last one."""
    return remaining if at + 1 == len(chosen) else None
