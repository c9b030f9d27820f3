"""The operator's Kubeflow kinds: ``kubectl apply`` of a PyTorchJob, MPIJob, TrainJob... runs it as a TrainingJob.

On a cluster installed with ``--kubeflow-kinds`` (``adapters/kubernetes/kubeflow_crds.py``) the operator, started
with ``--kubeflow-kinds``, watches those kinds and, for each object:

1. converts it with the validation door ``submit`` uses (``services.operations.validate_documents``), against
   the cluster's JobTypes and, for a TrainJob, the (Cluster)TrainingRuntime it names (or a shipped one);
2. refused: writes a ``Failed`` condition whose message names every field path, and a Warning Event; nothing
   else is created. A refusal is not final: once the object is fixed (``kubectl apply`` again) it is converted;
3. accepted: creates the JobTypes the conversion made that the cluster lacks, and the TrainingJob of the same
   name and namespace, owned by the object (``ownerReferences``, controller): deleting the object deletes the
   TrainingJob, and with it its Pods, Service and ConfigMap (the garbage collector);
4. writes the object's status from the TrainingJob's, in upstream's shape (``model.kubeflow.status``), and
   copies a change of ``runPolicy.suspend`` (a TrainJob's ``spec.suspend``) to the TrainingJob.

Level-triggered: each pass reads the caches only, and the result depends on them alone (conditions keep their
transition times while they hold), so a restarted operator writes nothing new. A TrainingJob of that name that
the object does not own is never touched: the object is refused, naming ``metadata.name``.

A CRD of one of these names without Phalanx's label belongs to another installation (a real Kubeflow): the
operator leaves that kind alone and says so in its log at start. The shipped ClusterTrainingRuntimes
(``torch-distributed``...) are created at start when the cluster lacks them, as the built-in JobTypes are.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Mapping
from typing import Any

from phalanx.adapters.clock import Clock
from phalanx.adapters.kubernetes.api import (
    CRDS,
    EVENTS,
    JOBTYPES,
    TRAININGJOBS,
    ConflictError,
    KubeApi,
    KubeApiError,
)
from phalanx.adapters.kubernetes.informer import Informer, Signal, start_synced
from phalanx.adapters.kubernetes.kubeflow_crds import KUBEFLOW_CRDS, KubeflowCrd, foreign, kubeflow_crd
from phalanx.adapters.kubernetes.objects import object_body
from phalanx.model.errors import SpecError
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.kubeflow import TRAINJOB, kubeflow_kind, runtime_key, shipped_runtimes
from phalanx.model.kubeflow.status import is_finished, refused_status, upstream_status
from phalanx.services.kubernetes.apply import event_body
from phalanx.services.kubernetes.operations import CLUSTER_NAMESPACED_KINDS
from phalanx.services.operations import validate_documents

log = logging.getLogger(__name__)
Key = tuple[str, str, str]  # (kind, namespace, name)
#: Every object is looked at again this often even when nothing changes (the level-triggered safety net).
RESYNC_S = 30.0
RETRY_S = 1.0
_GROUPS = frozenset(crd.group for crd in KUBEFLOW_CRDS)
# Annotations kubectl keeps for itself (the whole last-applied file): not copied onto the TrainingJob.
_KUBECTL_PREFIX = "kubectl.kubernetes.io/"
#: On a TrainingJob: the owner's suspend as last copied, so that only a change of it is copied again (a
#: ``phalanx halt`` of the TrainingJob itself is not undone).
OWNER_SUSPEND = "phalanx.dev/owner-suspend"


def owner_reference(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The ownerReference that makes a TrainingJob belong to an upstream object (deleting it deletes the job)."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owner_of(job: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, uid) of the upstream object that controls a TrainingJob, or None."""
    for reference in (job.get("metadata") or {}).get("ownerReferences") or []:
        group = str(reference.get("apiVersion") or "").split("/")[0]
        if reference.get("controller") and group in _GROUPS:
            return str(reference.get("kind")), str(reference.get("uid"))
    return None


def as_written(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as a user's file says it: what the converter reads (no status, no server-set metadata)."""
    meta = obj.get("metadata") or {}
    metadata: dict[str, Any] = {"name": meta.get("name")}
    if meta.get("namespace"):
        metadata["namespace"] = meta["namespace"]
    if meta.get("labels"):
        metadata["labels"] = dict(meta["labels"])
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith(_KUBECTL_PREFIX)}
    if annotations:
        metadata["annotations"] = annotations
    document = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": metadata}
    if "spec" in obj:
        document["spec"] = obj["spec"]
    return document


class KubeflowBridge:
    """Watches the Kubeflow kinds, creates their TrainingJobs and writes their status; one thread."""

    def __init__(
        self,
        api: KubeApi,
        jobs: Informer,
        jobtypes: Any,  # () -> dict[str, JobType]: the cluster's JobTypes
        clock: Clock,
        *,
        component: str = "phalanx-operator",
        identity: str = "phalanx-operator",
        own_scheduler: str = "phalanx-scheduler",
    ) -> None:
        self.api = api
        self.jobs = jobs
        self.jobtypes = jobtypes
        self.clock = clock
        self.component = component
        self.identity = identity
        self.own_scheduler = own_scheduler
        self.signal = Signal()
        self.informers: dict[str, Informer] = {}
        self._dirty: set[Key] = set()
        self._lock = threading.Lock()
        self._all = True  # the first pass looks at every object

    # -- start ---------------------------------------------------------------------------------------------------

    def served(self) -> list[KubeflowCrd]:
        """The kinds this cluster serves with Phalanx's CRDs; the others are logged and left alone."""
        served = []
        for crd in KUBEFLOW_CRDS:
            try:
                found = self.api.get(CRDS, crd.name)
            except KubeApiError as error:
                log.warning(
                    "%s is not served (%s): install with --kubeflow-kinds to run %ss", crd.name, error, crd.kind
                )
                continue
            if foreign(found):
                log.error(
                    "%s belongs to another installation (no app.kubernetes.io/part-of=phalanx label): Phalanx "
                    "leaves %ss to it; run them with `phalanx submit` instead, or remove that installation first",
                    crd.name,
                    crd.kind,
                )
                continue
            served.append(crd)
        return served

    def start(self, timeout: float, stop: threading.Event | None = None) -> bool:
        """Find the kinds to run, fill their caches, create the shipped ClusterTrainingRuntimes the cluster lacks.

        Returns:
            False when ``stop`` was set first.
        """
        for crd in self.served():
            self.informers[crd.kind] = Informer(
                self.api, crd.resource, signal=self.signal, on_change=self._changed, watch_timeout_s=60
            )
        if not start_synced(list(self.informers.values()), timeout, stop):
            return False
        self.seed_runtimes()
        log.info("running the Kubeflow kinds %s", ", ".join(self.informers) or "(none served)")
        return True

    def seed_runtimes(self) -> None:
        """Create the shipped ClusterTrainingRuntimes this cluster lacks (one of that name is left as it is)."""
        informer = self.informers.get("ClusterTrainingRuntime")
        if informer is None:
            return
        for key, document in shipped_runtimes().items():
            if informer.get(None, key.name) is not None:
                continue
            body = {**document, "metadata": {**document["metadata"]}}
            labels = {**(body["metadata"].get("labels") or {}), "app.kubernetes.io/part-of": "phalanx"}
            body["metadata"]["labels"] = labels
            try:
                informer.observe(self.api.create(informer.resource, body))
                log.info("created the ClusterTrainingRuntime %s", key.name)
            except ConflictError:
                continue
            except KubeApiError as error:
                log.warning("cannot create the ClusterTrainingRuntime %s: %s", key.name, error)

    # -- what changed --------------------------------------------------------------------------------------------

    def _changed(self, event: str, obj: dict[str, Any]) -> None:
        kind = str(obj.get("kind") or "")
        if kind in ("TrainingRuntime", "ClusterTrainingRuntime"):
            self.mark_kind(TRAINJOB)  # a TrainJob waiting for it may now convert
            return
        meta = obj.get("metadata") or {}
        self.mark((kind, str(meta.get("namespace") or ""), str(meta.get("name") or "")))

    def job_changed(self, obj: dict[str, Any]) -> None:
        """A TrainingJob changed: its owner's status may have to follow."""
        owner = owner_of(obj)
        if owner is not None:
            meta = obj.get("metadata") or {}
            self.mark((owner[0], str(meta.get("namespace") or ""), str(meta.get("name") or "")))

    def mark(self, key: Key) -> None:
        """Look at one object on the next pass."""
        with self._lock:
            self._dirty.add(key)
        self.signal.set()

    def mark_kind(self, kind: str) -> None:
        """Look at every object of a kind on the next pass."""
        informer = self.informers.get(kind)
        for obj in informer.items() if informer is not None else []:
            meta = obj.get("metadata") or {}
            with self._lock:
                self._dirty.add((kind, str(meta.get("namespace") or ""), str(meta.get("name") or "")))
        self.signal.set()

    # -- the loop ------------------------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Reconcile marked objects until ``stop``; every object again each ``RESYNC_S``."""
        next_resync = self.clock.monotonic() + RESYNC_S
        try:
            while not stop.is_set():
                if self.clock.monotonic() >= next_resync:
                    self._all = True
                    next_resync = self.clock.monotonic() + RESYNC_S
                wait = RESYNC_S
                try:
                    if not self.sync():
                        wait = RETRY_S
                except Exception:
                    log.exception("a Kubeflow pass failed; retrying")
                    wait = RETRY_S
                if stop.is_set():
                    break
                self.signal.wait(min(wait, max(0.0, next_resync - self.clock.monotonic())))
        finally:
            for informer in self.informers.values():
                informer.stop()

    def sync(self) -> bool:
        """One pass over the marked objects; False when one must be retried soon."""
        with self._lock:
            keys, self._dirty = self._dirty, set()
            everything, self._all = self._all, False
        if everything:
            for kind, cache in self.informers.items():
                if kubeflow_crd(kind).is_job:
                    keys |= {(kind, *_key(obj)) for obj in cache.items()}
        ok = True
        for key in sorted(keys):
            informer = self.informers.get(key[0])
            obj = informer.get(key[1] or None, key[2]) if informer is not None else None
            if obj is None:
                continue
            try:
                self.reconcile(obj)
            except KubeApiError as error:
                log.warning("%s %s/%s: %s; retrying", key[0], key[1], key[2], error)
                self.mark(key)
                ok = False
            except Exception:
                # One object's unexpected failure must not hold back the others of the pass.
                log.exception("%s %s/%s failed; retrying", *key)
                self.mark(key)
                ok = False
        return ok

    # -- one object ----------------------------------------------------------------------------------------------

    def reconcile(self, obj: dict[str, Any]) -> None:
        """Create the object's TrainingJob, or refuse the object, and bring its status up to date."""
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return  # its TrainingJob goes with it
        kind, namespace, name = str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name"))
        current: dict[str, Any] = obj["status"] if isinstance(obj.get("status"), dict) else {}
        job = self.jobs.get(namespace, name)
        if job is not None and owner_of(job) != (kind, str(meta.get("uid"))):
            self.refuse(
                obj,
                f"metadata.name: a TrainingJob named {name} already exists in namespace {namespace} and is not this "
                f"{kind}'s; rename the {kind} or delete that TrainingJob",
            )
            return
        if job is None:
            if is_finished(kind, current):
                return  # it ran and ended, and its TrainingJob was deleted (ttlSecondsAfterFinished): done
            job = self.create(obj)
            if job is None:
                return
        self.follow_suspend(obj, job)
        status = upstream_status(kind, name, job.get("status") or {}, self.replica_types(obj, job), current, self.now())
        self.write_status(obj, status)

    def convert(self, obj: dict[str, Any]) -> list[Any]:
        """The JobTypes and the TrainingJob the object becomes, through the door ``submit`` uses.

        Raises:
            SpecError: every problem, at its path in the object (or in its runtime).
        """
        documents = [as_written(obj)]
        if obj.get("kind") == TRAINJOB:
            runtime = self.runtime_of(obj)
            if runtime is not None:
                documents.insert(0, as_written(runtime))
        # What a cluster scheduler the job names cannot honour is refused before anything exists, as submit does.
        return validate_documents(
            documents,
            self.jobtypes(),
            namespaced_kinds=CLUSTER_NAMESPACED_KINDS,
            cluster_scheduling=True,
            own_scheduler=self.own_scheduler,
        )

    def runtime_of(self, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        """The cluster's runtime a TrainJob names (None: the converter looks among the shipped ones)."""
        spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
        ref = spec.get("runtimeRef") if isinstance(spec, Mapping) else None
        if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str):
            return None
        kind = str(ref.get("kind") or "ClusterTrainingRuntime")
        informer = self.informers.get(kind)
        if informer is None:
            return None
        namespace = None if kind == "ClusterTrainingRuntime" else str((obj.get("metadata") or {}).get("namespace"))
        found = informer.get(namespace, ref["name"])
        # A cluster's copy of a shipped runtime reads the same; one of another name is the user's own.
        return found if found is not None and runtime_key(found) is not None else None

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Convert and create; the TrainingJob created, or None (refused, or created meanwhile: next pass)."""
        try:
            parsed = self.convert(obj)
        except SpecError as error:
            self.refuse(obj, "; ".join(str(problem) for problem in error.errors))
            return None
        for item in parsed:
            if isinstance(item, JobType):
                with contextlib.suppress(ConflictError):  # the same conversion made it for another job
                    self.api.create(JOBTYPES, object_body(item, namespaced=False))
        [job] = [item for item in parsed if isinstance(item, TrainingJob)]
        body = object_body(job, namespaced=True)
        body["metadata"]["ownerReferences"] = [owner_reference(obj)]
        annotations = body["metadata"].setdefault("annotations", {})
        annotations[OWNER_SUSPEND] = str(suspend_of(obj)).lower()
        try:
            created = self.api.create(TRAININGJOBS, body, job.metadata.namespace)
        except ConflictError as error:
            if error.already_exists:
                self.mark((str(obj.get("kind")), job.metadata.namespace, job.metadata.name))
                return None
            raise
        self.jobs.observe(created)
        meta = obj.get("metadata") or {}
        self.record(
            obj,
            "Created",
            f"Created TrainingJob {meta.get('name')} (kubectl get trainingjob -n "
            f"{meta.get('namespace')} {meta.get('name')})",
            warning=False,
        )
        return created

    def refuse(self, obj: dict[str, Any], message: str) -> None:
        """Failed with why; a Warning Event when the refusal is new (a restart records none again)."""
        current: dict[str, Any] = obj["status"] if isinstance(obj.get("status"), dict) else {}
        status = refused_status(str(obj.get("kind")), current, message, self.now())
        if self.write_status(obj, status):
            self.record(obj, "Refused", message, warning=True)

    def follow_suspend(self, obj: Mapping[str, Any], job: Mapping[str, Any]) -> None:
        """Copy a change of the object's suspend to its TrainingJob (``kubectl patch pytorchjob … suspend``).

        Only a change: the value last copied is kept on the TrainingJob (``OWNER_SUSPEND``), so a TrainingJob
        halted or resumed by itself (``phalanx halt``) stays so until the owner's suspend changes.
        """
        wanted = suspend_of(obj)
        meta = job.get("metadata") or {}
        if (meta.get("annotations") or {}).get(OWNER_SUSPEND) == str(wanted).lower():
            return
        patch = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "annotations": {OWNER_SUSPEND: str(wanted).lower()},
            },
            "spec": {"runPolicy": {"suspend": wanted}},
        }
        self.jobs.observe(self.api.patch(TRAININGJOBS, str(meta.get("name")), patch, str(meta.get("namespace"))))

    def replica_types(self, obj: Mapping[str, Any], job: Mapping[str, Any]) -> dict[str, str]:
        """The TrainingJob's roles -> the upstream replica types they came from (a TrainJob: the roles)."""
        roles = list(((job.get("spec") or {}).get("replicas") or {}).keys())
        kind = kubeflow_kind(obj)
        spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
        if kind is None or not isinstance(spec, Mapping):
            return {role: role for role in roles}
        written = spec.get(kind.replicas_field) if isinstance(spec.get(kind.replicas_field), Mapping) else {}
        types = {kind.roles[str(t)]: str(t) for t in written or {} if str(t) in kind.roles}
        return {role: types.get(role, role) for role in roles}

    # -- writing -------------------------------------------------------------------------------------------------

    def write_status(self, obj: dict[str, Any], status: dict[str, Any]) -> bool:
        """PUT the status subresource when it differs; True when written (a conflict is retried next pass)."""
        if status == obj.get("status"):
            return False
        crd = kubeflow_crd(str(obj.get("kind")))
        meta = obj.get("metadata") or {}
        identity = {key: meta[key] for key in ("name", "namespace", "resourceVersion") if meta.get(key)}
        body = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": identity, "status": status}
        try:
            written = self.api.replace_status(crd.resource, body)
        except ConflictError:
            self.mark((crd.kind, str(meta.get("namespace") or ""), str(meta.get("name"))))
            return False
        self.informers[crd.kind].observe(written)
        return True

    def record(self, obj: dict[str, Any], reason: str, message: str, *, warning: bool) -> None:
        """An Event about the object, as ``kubectl describe`` shows them (a lost one is logged)."""
        body = event_body(
            obj,
            reason,
            message,
            warning=warning,
            now=self.clock.now(),
            component=self.component,
            instance=self.identity,
            kind=str(obj.get("kind")),
        )
        try:
            self.api.create(EVENTS, body, (obj.get("metadata") or {}).get("namespace"))
        except KubeApiError as error:
            log.debug("event %s on %s not recorded: %s", reason, (obj.get("metadata") or {}).get("name"), error)

    def now(self) -> str:
        """The time of a condition that changes, RFC 3339."""
        return self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")


def suspend_of(obj: Mapping[str, Any]) -> bool:
    """The suspend an upstream object asks for: ``runPolicy.suspend`` (a TrainJob's ``spec.suspend``)."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return False
    run_policy = spec.get("runPolicy")
    wanted = (
        spec.get("suspend")
        if obj.get("kind") == TRAINJOB
        else (run_policy.get("suspend") if isinstance(run_policy, Mapping) else None)
    )
    return wanted is True


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")
