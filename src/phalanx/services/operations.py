"""The operations users call — submit, validate, get, describe, explain, halt, resume, delete — written once.

``Operations`` runs every operation over a backend port (``services.port.OperationsBackend``): the SQLite store
of a state directory (``services.embedded.operations``) or a cluster's API server (``services.kubernetes.
operations``). Both raise these errors, return these results and validate every submission with
``validate_documents``, so the CLI and the SDK say the same thing on both; ``JobOperations`` is what the SDK's
verbs (``entrypoints.job_verbs``) need of them. What only one backend has (logs, quarantine) is a method of its
subclass.

Submitting validates every document first (nothing is created when one is wrong), checks that every job's name
is free (or, with ``replace_finished``, held by a finished job, removed first) and that the Datasets its jobs
read exist, then creates or configures Queues, then JobTypes, then Datasets, then jobs: each object exists before
the objects that name it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from phalanx.core.delegation import conflicts, placing_scheduler
from phalanx.core.lifecycle import ACTIVE_PHASES
from phalanx.core.pipelines.kfp_ir import pipelines_from_ir
from phalanx.core.stand_ins import FLAG, apply_stand_ins, check_stand_ins
from phalanx.model.base import validated_copy
from phalanx.model.datasets import Dataset
from phalanx.model.errors import FieldError, SpecError, short
from phalanx.model.events import Event
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.kubeflow import KINDS as KUBEFLOW_KINDS
from phalanx.model.kubeflow import (
    TRAINJOB,
    Conversion,
    check_runtime,
    is_runtime,
    kubeflow_kind,
    moves_with_jobs,
    runtimes_in,
    validate_kubeflow,
    validate_trainjob,
)
from phalanx.model.kubeflow.convert import WORKER_SSHD
from phalanx.model.loading import builtin_jobtypes, check_documents, parse_dataset, parse_jobtype, parse_queue
from phalanx.model.names import MAX_NAME_LENGTH, check_dns_label
from phalanx.model.nodes import Node
from phalanx.model.pods import refused_pod_fields
from phalanx.model.queues import Queue
from phalanx.model.replicas import Replica
from phalanx.model.validation import validate_job, with_namespace
from phalanx.services.dataset_views import (
    DatasetDescription,
    NodeCacheView,
    entries_to_evict,
    eviction_failure,
    readers,
)
from phalanx.services.port import AlreadyExistsError, ConflictError, NotFoundError, OperationsBackend, Stored
from phalanx.services.queue_views import QueueDescription, QueueView, describe_queue, queue_views, unique_queues

MAX_CONFLICT_RETRIES = 20


class OperationError(Exception):
    """An operation that cannot be done, with a message that says what to do instead."""


def no_replica_logs(job: TrainingJob, replica: str, not_yet: str) -> OperationError:
    """Why `logs --replica` found nothing: the job has no such replica, or it has ``not_yet`` (no logs, no Pod)."""
    known = [f"{role}-{i}" for role, spec in job.spec.replicas.items() for i in range(spec.count)]
    if replica.removeprefix(f"{job.metadata.name}-") not in known:  # a typo must not read as "wait for it"
        return OperationError(f"job {job.metadata.name} has no replica {replica!r}; its replicas: {', '.join(known)}")
    return OperationError(f"replica {replica!r} of job {job.metadata.name} has {not_yet}; replicas: {', '.join(known)}")


class JobExistsError(OperationError):
    """A submitted job's name is taken by a stored job; ``phase`` is that job's (None: created meanwhile)."""

    def __init__(self, message: str, *, namespace: str, name: str, phase: str | None) -> None:
        super().__init__(message)
        self.namespace = namespace
        self.name = name
        self.phase = phase


@dataclass(frozen=True)
class Submitted:
    """What a submission created."""

    kind: str
    namespace: str
    name: str
    replaced: bool = False
    configured: bool = False  # an existing object (a Queue, a JobType) whose spec was replaced, as kubectl apply


@dataclass
class JobDescription:
    """Everything `describe` shows about a job."""

    job: TrainingJob
    replicas: list[Replica] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


#: The kinds ``submit -n`` moves to its namespace on the embedded runtime (Queues are cluster-scoped).
NAMESPACED_KINDS = frozenset({"TrainingJob", "JobType", "Dataset"})


def validate_documents(
    documents: Sequence[dict[str, Any]],
    jobtypes: Mapping[str, JobType],
    *,
    source: str | None = None,
    namespace: str | None = None,
    namespaced_kinds: frozenset[str] = NAMESPACED_KINDS,
    pod_field_refusals: Mapping[str, str] | None = None,
    stand_ins: Mapping[str, Sequence[str]] | None = None,
    cluster_scheduling: bool | None = None,
    own_scheduler: str | None = None,
) -> list[Any]:
    """Validate TrainingJobs, JobTypes, Queues and Datasets; jobs against ``jobtypes`` (and the submission's).

    Kubeflow jobs (PyTorchJob, TFJob, XGBoostJob, JAXJob, PaddleJob, MPIJob) are accepted as they are: each becomes
    a TrainingJob (and, for some MPIJobs, a JobType of its own) through ``model.kubeflow``, validated as one, with
    every problem named at its path in the upstream document.

    The one validation of every backend: the embedded runtime and the Kubernetes backend call it with their own
    JobTypes, so a spec fails with the same field paths in both. Every object a submission stores comes out of
    here, validated whole: a namespace override (``submit -n``) is written into the documents first and
    validated with them, never patched onto the parsed objects.

    Args:
        documents: the raw documents.
        jobtypes: the JobTypes jobs may name.
        source: the file, for messages.
        namespace: put the documents of ``namespaced_kinds`` in this namespace (None: their own).
        namespaced_kinds: the kinds the override applies to.
        pod_field_refusals: pod fields the backend cannot honour, with why (``OperationsBackend``); a job
            setting one is refused naming the field.
        stand_ins: image -> the words of a local program that plays it (``core.stand_ins``), applied to every
            job before the backend's refusals; one that no replica's image matches is refused.
        cluster_scheduling: whether the backend has a cluster scheduler a job may name (``schedulerName``);
            None: not checked (``refuse_scheduler``).
        own_scheduler: the name of Phalanx's own scheduler there.

    Raises:
        SpecError: every problem in every document, each with its field path; a bad ``namespace`` alone.
    """
    # Documents posted as JSON or handed over by the SDK meet a file's limits before anything walks them.
    check_documents(documents, source=source)
    # A compiled Kubeflow Pipelines v2 file (pipelineInfo + root) is the Pipeline it becomes, checked as one.
    documents = pipelines_from_ir(documents, source=source)
    if namespace is not None:
        try:
            check_dns_label(namespace, "namespace")
        except ValueError as err:
            raise SpecError([FieldError("", str(err))], source=source) from None
        # A Kubeflow job becomes a TrainingJob: it moves with the jobs (a TrainJob with its TrainingRuntime).
        documents = [
            with_namespace(doc, namespace)
            if str(doc.get("kind", "TrainingJob")) in namespaced_kinds
            or (moves_with_jobs(doc) and "TrainingJob" in namespaced_kinds)
            else doc
            for doc in documents
        ]
    jobtypes = dict(jobtypes)
    # A TrainJob names a runtime of the same file (before or after it) or one Phalanx ships.
    runtimes = runtimes_in(documents)
    # JobTypes in the same submission may be used by jobs in it.
    parsed: list[Any] = []
    errors: list[FieldError] = []
    # The images of the jobs that got as far as their stand-ins, and those a stand-in played.
    images: set[str] = set()
    played: set[str] = set()
    jobs_in_file = sum(
        1
        for doc in documents
        if doc.get("kind", "TrainingJob") in ("TrainingJob", TRAINJOB) or kubeflow_kind(doc) is not None
    )
    reached = 0
    for position, doc in enumerate(documents):
        kind = doc.get("kind", "TrainingJob")
        prefix = f"document {position + 1}: " if len(documents) > 1 else ""
        try:
            if kind == "JobType":
                jobtype = parse_jobtype(doc)
                jobtypes[jobtype.metadata.name] = jobtype
                parsed.append(jobtype)
            elif kind == "TrainingJob":
                job = _stand_in(validate_job(doc, jobtypes), stand_ins, images, played)
                reached += 1
                _refuse_pod_fields(job, pod_field_refusals, None)
                refuse_scheduler(job, cluster_scheduling, own_scheduler, None)
                parsed.append(job)
            elif kind == "Queue":
                parsed.append(parse_queue(doc))
            elif kind == "Dataset":
                parsed.append(parse_dataset(doc))
            elif is_runtime(doc):
                # Used by the TrainJobs that name it; not stored (Phalanx has no such kind).
                if problems := check_runtime(doc):
                    raise SpecError(problems)
            elif kind == TRAINJOB or kubeflow_kind(doc) is not None:
                if kind == TRAINJOB:  # on an MPI runtime, it may make a JobType too
                    made, job, conversion = validate_trainjob(doc, runtimes, jobtypes)
                else:
                    made, job, conversion = validate_kubeflow(doc, jobtypes)
                job = _stand_in(job, stand_ins, images, played)
                reached += 1
                _refuse_pod_fields(job, pod_field_refusals, conversion)
                refuse_scheduler(job, cluster_scheduling, own_scheduler, conversion)
                for jobtype in made:
                    # Jobs alike share the JobType their conversion makes: store it once per submission.
                    if jobtypes.get(jobtype.metadata.name) != jobtype:
                        jobtypes[jobtype.metadata.name] = jobtype
                        parsed.append(jobtype)
                parsed.append(job)
            else:
                kubeflow = ", ".join([*KUBEFLOW_KINDS, TRAINJOB, "TrainingRuntime", "ClusterTrainingRuntime"])
                kinds = f"TrainingJob, JobType, Queue, Dataset or a Kubeflow kind ({kubeflow})"
                errors.append(FieldError("kind", f"{prefix}unknown kind {short(kind)}; use {kinds}"))
        except SpecError as err:
            if kind in ("Queue", "Dataset"):
                # Name the Queue too: a file of queues and jobs has many documents.
                name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
                # A name past its limit is refused anyway: quote no more of it than a valid one can hold.
                what = f"{kind.lower()}/{str(name)[:MAX_NAME_LENGTH]}" if name else kind.lower()
                prefix = f"document {position + 1} ({what}): " if len(documents) > 1 else f"{what}: "
            errors.extend(FieldError(e.path, prefix + e.message) for e in err.errors)
    if stand_ins and reached == jobs_in_file:  # else a job that did not validate might have used a stand-in
        errors += _unplayed(stand_ins, images, played)
    if errors:
        raise SpecError(errors, source=source)
    return parsed


def _unplayed(stand_ins: Mapping[str, Sequence[str]], images: set[str], played: set[str]) -> list[FieldError]:
    """A stand-in no replica's image matches is refused: a misspelt image would leave its replicas unplayed."""
    named = sorted(images)
    known = f"the replicas' images: {', '.join(named)}" if named else "no replica names an image"
    return [
        FieldError(f"{FLAG} {image}", f"no replica runs this image ({known}); fix the image or leave the stand-in out")
        for image in sorted(set(stand_ins) - played)
    ]


def _stand_in(
    job: TrainingJob, stand_ins: Mapping[str, Sequence[str]] | None, images: set[str], played: set[str]
) -> TrainingJob:
    """``job`` with its images played by ``stand_ins`` (``core.stand_ins``).

    ``images`` gets the job's images and ``played`` those a stand-in played.
    """
    images |= {r.template.image for r in job.spec.replicas.values() if r.template.image}
    if not stand_ins:
        return job
    try:
        job, used = apply_stand_ins(job, stand_ins)
    except ValueError as err:
        raise SpecError([FieldError(FLAG, str(err))]) from None
    played |= used
    return job


@dataclass(frozen=True)
class BackendRules:
    """What a backend cannot honour, as the validation door reads it from ``OperationsBackend``."""

    pod_field_refusals: Mapping[str, str]
    cluster_scheduling: bool
    own_scheduler: str | None

    @classmethod
    def of(cls, backend: type[Any]) -> BackendRules:
        """The rules a backend class declares (its class attributes: no connection is made)."""
        return cls(backend.pod_field_refusals, backend.cluster_scheduling, backend.own_scheduler)


def refuse_scheduler(
    job: TrainingJob, cluster_scheduling: bool | None, own: str | None, conversion: Conversion | None
) -> None:
    """Refuse a ``schedulerName`` the backend cannot honour, or what the scheduler it names rules out.

    Where Phalanx places every job (``cluster_scheduling`` false) the field itself is refused. On a cluster, a
    job naming another scheduler than Phalanx's own (``own``) is refused the fields only Phalanx's scheduler
    honours (``core.delegation.conflicts``): the operator would refuse it when it renders the Pods, and saying
    it at submit keeps a job that cannot run out of the cluster. The cluster-wide default scheduler is the
    operator's setting, unknown here: a job naming no scheduler is checked by the operator only. None for
    ``cluster_scheduling``: nothing is checked. A Kubeflow job's refusals are named where its author wrote them.
    """
    name = job.spec.scheduling.scheduler_name
    if cluster_scheduling is None or name is None:
        return
    refused: list[FieldError] = []
    if not cluster_scheduling:
        refused.append(
            FieldError(
                "spec.scheduling.schedulerName",
                f"names the Kubernetes scheduler {name!r}, and this runtime has none: it places jobs itself; "
                "remove schedulerName (it applies on a Kubernetes cluster)",
            )
        )
    else:
        scheduler = placing_scheduler(job, own=own or "")
        if scheduler is not None:
            refused = conflicts(job, scheduler)
    if refused and conversion is not None:
        refused = [FieldError(conversion.upstream_path(error.path), error.message) for error in refused]
    if refused:
        raise SpecError(refused)


def _refuse_pod_fields(job: TrainingJob, refusals: Mapping[str, str] | None, conversion: Conversion | None) -> None:
    """Raise the pod fields of ``job`` the backend refuses, at their path in the document as written."""
    refused = refused_pod_fields(job, refusals or {})
    if conversion is not None and refusals and "command" in refusals:
        # Upstream's default command (an MPIJob worker's sshd) stands where the author wrote none: a backend that
        # runs no images must not start it on its machine. A stand-in that played the image changed it.
        for role in conversion.defaulted_commands:
            template = job.spec.replicas[role].template
            if tuple(template.command) == WORKER_SSHD:
                image = template.image or "its image"
                refused.append(
                    FieldError(
                        f"spec.replicas.{role}.template.command",
                        f"none given, so upstream's {' '.join(WORKER_SSHD)} would run, which the embedded "
                        f"runtime does not start on this machine: give the container a command, or play {image} "
                        f"with a local program: phalanx run --stand-in {image}=PROGRAM",
                    )
                )
    if refused and conversion is not None:  # a Kubeflow job: named where its author wrote it
        refused = [FieldError(conversion.upstream_path(error.path), error.message) for error in refused]
    if refused:
        raise SpecError(refused)


def convert_documents(
    documents: Sequence[dict[str, Any]],
    jobtypes: Mapping[str, JobType],
    *,
    source: str | None = None,
    backend: BackendRules | None = None,
) -> list[dict[str, Any]]:
    """The documents with every Kubeflow job replaced by the JobTypes and TrainingJob it becomes (``convert``).

    A TrainJob becomes its TrainingJob; the (Cluster)TrainingRuntimes of the file, used up by it, are left out.

    Everything is validated first, by ``validate_documents`` with the rules of ``backend`` when given, so what
    comes out is what ``submit`` to that backend would accept; other documents come out as they went in. A
    JobType made by a conversion is written once.

    Raises:
        SpecError: every problem in every document, each with its field path.
    """
    # A compiled KFP v2 pipeline comes out as the Pipeline it becomes (validated as one below).
    documents = pipelines_from_ir(documents, source=source)
    validate_documents(
        documents,
        jobtypes,
        source=source,
        pod_field_refusals=backend.pod_field_refusals if backend else None,
        cluster_scheduling=backend.cluster_scheduling if backend else None,
        own_scheduler=backend.own_scheduler if backend else None,
    )
    known = dict(jobtypes)
    runtimes = runtimes_in(documents)
    converted: list[dict[str, Any]] = []
    for doc in documents:
        if is_runtime(doc):
            continue  # what it says is in the TrainingJobs of the TrainJobs that name it
        if doc.get("kind") != TRAINJOB and kubeflow_kind(doc) is None:
            converted.append(doc)
            if doc.get("kind") == "JobType":
                jobtype = parse_jobtype(doc)
                known[jobtype.metadata.name] = jobtype
            continue
        if doc.get("kind") == TRAINJOB:
            made, _, conversion = validate_trainjob(doc, runtimes, known)
        else:
            made, _, conversion = validate_kubeflow(doc, known)
        for jobtype, raw in zip(made, conversion.jobtypes, strict=True):
            if known.get(jobtype.metadata.name) != jobtype:
                known[jobtype.metadata.name] = jobtype
                converted.append(raw)
        converted.append(conversion.job)
    return converted


def exists_message(what: str, name: str, flag: str, phase: str | None) -> str:
    """What to do about a job name that is taken, for the CLI and the SDK alike, by the phase of the job there.

    ``flag``: the ``-n NAMESPACE`` the CLI commands need, if any. ``phase`` None: created meanwhile.
    """
    if phase is None:
        return f"{what} already exists (created meanwhile); choose another metadata.name"
    if Phase(phase) in ACTIVE_PHASES:
        fix = (
            f"wait until it finishes, delete it (`phalanx delete job {name}{flag}`; client.delete({name!r}) in Python)"
        )
    else:
        fix = (
            f"replace it (`phalanx run` does; submit(..., replace_finished=True) in Python), delete it "
            f"(`phalanx delete job {name}{flag}`; client.delete({name!r}) in Python)"
        )
    return f"{what} already exists (it is {phase}); {fix}, or choose another metadata.name"


def not_found_message(kind: str, namespace: str, name: str, others: Sequence[Dataset]) -> str:
    """``dataset default/x not found; datasets in default: a, b`` (or that the namespace has none)."""
    names = ", ".join(o.metadata.name for o in others[:20])
    known = f"{kind}s in {namespace}: {names}" if names else f"{namespace} has no {kind}s"
    return f"{kind} {namespace}/{name} not found; {known}"


def check_no_readers(dataset: Dataset, jobs: Sequence[TrainingJob]) -> None:
    """Refuse to delete a Dataset that unfinished jobs read.

    Raises:
        OperationError: naming the jobs and what to do.
    """
    using = readers(dataset, jobs, active_only=True)
    if using:
        names = ", ".join(f"{j.metadata.name} ({j.status.phase})" for j in using)
        raise OperationError(
            f"dataset {dataset.metadata.namespace}/{dataset.metadata.name} is read by unfinished jobs: {names}; "
            "delete them or wait for them to finish, then delete the dataset"
        )


class JobOperations(Protocol):
    """What the SDK's verbs (``entrypoints.job_verbs``) need of the operations; ``Operations`` offers it."""

    def get_job(self, namespace: str, name: str) -> TrainingJob: ...  # noqa: D102
    def list_jobs(self, namespace: str | None = None) -> list[TrainingJob]: ...  # noqa: D102
    def describe(self, namespace: str, name: str) -> JobDescription: ...  # noqa: D102
    def explain(self, namespace: str, name: str) -> str: ...  # noqa: D102
    def set_suspended(self, namespace: str, name: str, suspend: bool) -> TrainingJob: ...  # noqa: D102
    def delete_job(self, namespace: str, name: str) -> None: ...  # noqa: D102
    def list_queues(self) -> list[Queue]: ...  # noqa: D102
    def get_queue(self, name: str) -> Queue: ...  # noqa: D102
    def queue_views(self) -> list[QueueView]: ...  # noqa: D102
    def describe_queue(self, name: str) -> QueueDescription: ...  # noqa: D102
    def delete_queue(self, name: str) -> QueueView: ...  # noqa: D102
    def list_datasets(self, namespace: str | None = None) -> list[Dataset]: ...  # noqa: D102
    def get_dataset(self, namespace: str, name: str) -> Dataset: ...  # noqa: D102
    def describe_dataset(self, namespace: str, name: str) -> DatasetDescription: ...  # noqa: D102
    def delete_dataset(self, namespace: str, name: str) -> Dataset: ...  # noqa: D102
    def cache_views(self, node: str | None = None) -> list[NodeCacheView]: ...  # noqa: D102
    def evict(  # noqa: D102
        self, *, key: str | None = None, dataset: str | None = None, node: str | None = None
    ) -> list[str]: ...


def _by_creation(jobs: Sequence[TrainingJob]) -> list[TrainingJob]:
    return sorted(
        jobs,
        key=lambda j: (
            j.metadata.creation_timestamp.timestamp() if j.metadata.creation_timestamp else 0.0,
            j.metadata.name,
        ),
    )


def _no_queue_message(name: str, names: Sequence[str]) -> str:
    known = f"queues: {', '.join(names[:20])}" if names else "there are no queues; create one with `phalanx submit -f`"
    return f"queue {name} not found; {known}"


class Operations:
    """The user's operations over one backend (a state directory, a cluster)."""

    def __init__(self, backend: OperationsBackend) -> None:
        self.backend = backend

    # -- reading -------------------------------------------------------------------------------------------

    def jobtypes(self) -> dict[str, JobType]:
        """Every JobType by name: the built-ins (even before a control plane first ran) and the stored ones."""
        found = dict(builtin_jobtypes())
        for jobtype in self.backend.list(JobType):
            found[jobtype.metadata.name] = jobtype
        return found

    def get_job(self, namespace: str, name: str) -> TrainingJob:
        """One job.

        Raises:
            OperationError: no such job, with the names of existing ones.
        """
        job = self.backend.get(TrainingJob, namespace, name)
        if job is None:
            raise self.no_job(namespace, name)
        return job

    def no_job(self, namespace: str, name: str) -> OperationError:
        """That the job is not found, naming the jobs of its namespace."""
        names = sorted(j.metadata.name for j in self.backend.list(TrainingJob, namespace))
        hint = f"; jobs in {namespace}: {', '.join(names[:10])}" if names else f"; {namespace} has no jobs"
        return OperationError(f"job {namespace}/{name} not found{hint}")

    def list_jobs(self, namespace: str | None = None) -> list[TrainingJob]:
        """Jobs of a namespace (None: every namespace), newest last."""
        return _by_creation(self.backend.list(TrainingJob, namespace))

    def _all_jobs(self) -> list[TrainingJob] | None:
        """Every job of every namespace, or None when the user may not list them cluster-wide."""
        try:
            return self.list_jobs(None)
        except OperationError as err:
            if "forbidden" in str(err):
                return None
            raise

    def list_nodes(self) -> list[Node]:
        """The nodes, by name, as the scheduler sees them (CPUs, memory, GPUs, topology)."""
        return sorted(self.backend.list(Node), key=lambda n: n.metadata.name)

    def replicas_of(self, job: TrainingJob) -> list[Replica]:
        """The job's current replicas (its Pods on a cluster)."""
        return self.backend.replicas_of(job)

    def describe(self, namespace: str, name: str) -> JobDescription:
        """The job, its replicas and its events."""
        job = self.get_job(namespace, name)
        return JobDescription(job=job, replicas=self.backend.replicas_of(job), events=self.backend.events_of(job))

    def explain(self, namespace: str, name: str) -> str:
        """One sentence: why the job is where it is (why it waits, when it waits)."""
        job = self.get_job(namespace, name)
        phase = Phase(job.status.phase)
        if phase == Phase.PENDING:
            return self.backend.pending_explanation()
        if phase == Phase.QUEUED:
            return f"Queued: {job.status.message or job.status.reason or 'waiting for the next scheduling cycle'}"
        detail = job.status.message or job.status.reason
        return f"{phase}: {detail}" if detail else str(phase)

    # -- queues --------------------------------------------------------------------------------------------

    def list_queues(self) -> list[Queue]:
        """Every Queue, one per name, sorted by name (Queues are cluster-scoped: ``-n`` does not apply)."""
        return unique_queues(self.backend.list(Queue))

    def get_queue(self, name: str) -> Queue:
        """One Queue.

        Raises:
            OperationError: no such queue (with the names of existing ones), or it cannot be read.
        """
        queue = self.backend.get(Queue, "", name)
        if queue is None:
            raise OperationError(_no_queue_message(name, [q.metadata.name for q in self.list_queues()]))
        return queue

    def queue_views(self) -> list[QueueView]:
        """Every Queue with what its jobs hold now (from its status when the jobs cannot be listed)."""
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
        assert described is not None  # the queue is among them
        return described

    def delete_queue(self, name: str) -> QueueView:
        """Delete a Queue; its jobs keep running, and are no longer limited by any quota.

        Returns:
            The queue as it was, with its admitted jobs (the CLI warns that they keep running).

        Raises:
            OperationError: no such queue.
        """
        view = self.describe_queue(name).view
        meta = view.queue.metadata
        with contextlib.suppress(NotFoundError):  # deleted meanwhile: the outcome is the same
            self.backend.delete(Queue, meta.namespace, name, uid=meta.uid)
        return view

    # -- writing -------------------------------------------------------------------------------------------

    def validate(
        self,
        documents: Sequence[dict[str, Any]],
        *,
        source: str | None = None,
        namespace: str | None = None,
        stand_ins: Mapping[str, Sequence[str]] | None = None,
    ) -> list[Any]:
        """Validate every document (moved to ``namespace`` when given); nothing is created.

        ``stand_ins``: image -> the words of a local program that plays it, on a backend that runs no images
        (``core.stand_ins``); refused where images run.

        Raises:
            SpecError: every problem in every document, each with its field path.
        """
        if stand_ins:
            problems = check_stand_ins(stand_ins)
            if self.backend.runs_images:
                images = ", ".join(sorted(stand_ins))
                problems = [
                    f"{FLAG} {images}: on Kubernetes every replica runs its image, so nothing plays one; leave "
                    f"{FLAG} out (it is for the embedded runtime, which runs no images)"
                ]
            if problems:
                raise SpecError(
                    [FieldError(FLAG, problem.removeprefix(f"{FLAG} ")) for problem in problems], source=source
                )
        parsed = validate_documents(
            documents,
            self.jobtypes(),
            source=source,
            namespace=namespace,
            namespaced_kinds=self.backend.namespaced_kinds,
            pod_field_refusals=self.backend.pod_field_refusals,
            stand_ins=stand_ins,
            cluster_scheduling=self.backend.cluster_scheduling,
            own_scheduler=self.backend.own_scheduler,
        )
        return parsed

    def submit(
        self,
        documents: Sequence[dict[str, Any]],
        *,
        namespace: str | None = None,
        replace_finished: bool = False,
        source: str | None = None,
        annotations: Mapping[str, str] | None = None,
        stand_ins: Mapping[str, Sequence[str]] | None = None,
    ) -> list[Submitted]:
        """Validate everything first, then create the objects (Queues, JobTypes, Datasets, then jobs).

        An existing Queue, JobType or Dataset gets the submitted spec (``configured``, as ``kubectl apply``); a
        job of an existing name is an error unless ``replace_finished`` and it finished.

        Args:
            documents: TrainingJobs, JobTypes, Queues and Datasets.
            namespace: put the namespaced documents in this namespace (None: their own, else ``default``).
            replace_finished: a job of the same name that finished is removed first, as ``phalanx run`` does.
            source: the file the documents came from, for error messages.
            annotations: added to every job and Dataset (e.g. the directory relative paths start from).
            stand_ins: image -> the words of a local program that plays it (``validate``).

        Raises:
            SpecError: invalid documents, or a job reads a Dataset that does not exist (nothing is created).
            JobExistsError: a job of that name exists (and is active, or replacing was not asked for).
            OperationError: the backend refused a write.
        """
        objects = self.validate(documents, source=source, namespace=namespace, stand_ins=stand_ins)
        if annotations:
            objects = [_annotated(o, annotations) if isinstance(o, TrainingJob | Dataset) else o for o in objects]
        self._check_datasets_exist(objects)
        # Every name is checked before anything is changed: a job in the way leaves everything as it was.
        replaced: dict[str, TrainingJob] = {}
        for job in (o for o in objects if isinstance(o, TrainingJob)):
            existing = self.backend.get(TrainingJob, job.metadata.namespace, job.metadata.name)
            if existing is None:
                continue
            if not replace_finished or Phase(existing.status.phase) in ACTIVE_PHASES:
                raise self._exists_error(job, str(existing.status.phase))
            replaced[job.key] = existing
        for existing in replaced.values():
            self.backend.remove_finished(existing)
        created: list[Submitted] = []
        order: dict[type, int] = {Queue: 0, JobType: 1, Dataset: 2}
        for obj in sorted(objects, key=lambda o: order.get(type(o), 3)):
            kind = type(obj).__name__
            namespace_shown = obj.metadata.namespace if kind in self.backend.namespaced_kinds else ""
            if not isinstance(obj, TrainingJob):
                configured = self.apply(obj)
                # A JobType is reported created either way, as it always was.
                created.append(
                    Submitted(kind, namespace_shown, obj.metadata.name, configured=configured and kind != "JobType")
                )
                continue
            try:
                self.backend.create(obj)
            except AlreadyExistsError:
                raise self._exists_error(obj, None) from None
            created.append(Submitted(kind, obj.metadata.namespace, obj.metadata.name, replaced=obj.key in replaced))
        return created

    def _exists_error(self, job: TrainingJob, phase: str | None) -> JobExistsError:
        namespace = job.metadata.namespace
        flag = "" if namespace == "default" else f" -n {namespace}"
        return JobExistsError(
            exists_message(f"{self.backend.job_noun} {job.key}", job.metadata.name, flag, phase),
            namespace=namespace,
            name=job.metadata.name,
            phase=phase,
        )

    def _check_datasets_exist(self, objects: Sequence[Any]) -> None:
        """Refuse jobs that read a Dataset neither stored nor in this submission (nothing is created)."""
        submitted = {(o.metadata.namespace, o.metadata.name) for o in objects if isinstance(o, Dataset)}
        errors = []
        for obj in objects:
            if not isinstance(obj, TrainingJob):
                continue
            for position, mount in enumerate(obj.spec.datasets):
                key = (obj.metadata.namespace, mount.dataset_name)
                if key in submitted or self.backend.get(Dataset, *key) is not None:
                    continue
                field_name = "dataset" if mount.dataset else "name"
                errors.append(
                    FieldError(
                        f"spec.datasets[{position}].{field_name}",
                        f"job {obj.metadata.name}: dataset {mount.dataset_name} does not exist in namespace "
                        f"{obj.metadata.namespace}; create it first (phalanx dataset create -f dataset.yaml), put "
                        "it in the same file, or fix the name",
                    )
                )
        if errors:
            raise SpecError(errors)

    def apply(self, obj: Queue | JobType | Dataset) -> bool:
        """Create the object, or give the existing one the submitted spec (``kubectl apply``); True when it existed.

        Labels and annotations are replaced when the submission has some; the status stays (a changed Dataset
        is materialised again).
        """
        kind, meta = type(obj), obj.metadata
        for _ in range(MAX_CONFLICT_RETRIES):
            existing: Any = self.backend.get(kind, meta.namespace, meta.name)  # a Queue, JobType or Dataset
            if existing is None:
                try:
                    self.backend.create(obj)
                    return False
                except AlreadyExistsError:
                    continue
            metadata = validated_copy(
                existing.metadata,
                labels=meta.labels or existing.metadata.labels,
                annotations=meta.annotations or existing.metadata.annotations,
            )
            updated = validated_copy(existing, metadata=metadata, spec=obj.spec)
            if updated == existing:
                return True
            try:
                self.backend.replace(updated)
                return True
            except (ConflictError, NotFoundError):
                continue
        namespaced = kind.__name__ in self.backend.namespaced_kinds
        where = f"{meta.namespace}/{meta.name}" if namespaced else meta.name
        raise OperationError(f"{kind.__name__.lower()} {where} kept changing; try again")

    def set_suspended(self, namespace: str, name: str, suspend: bool) -> TrainingJob:
        """Halt (suspend) or resume a job, on the version read; level-triggered: the controller does the rest.

        Raises:
            OperationError: no such job, or the job is finished.
        """
        for _ in range(MAX_CONFLICT_RETRIES):
            job = self.get_job(namespace, name)
            if Phase(job.status.phase) not in ACTIVE_PHASES:
                raise OperationError(f"job {job.key} is {job.status.phase}; it cannot be halted or resumed")
            if job.spec.run_policy.suspend == suspend:
                return job
            try:
                return self.backend.set_suspend(job, suspend)
            except ConflictError:
                continue
        raise OperationError(f"job {namespace}/{name} kept changing; try again")

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete a job; its replicas are stopped (the backend's way) and removed with it.

        Raises:
            OperationError: no such job.
        """
        try:
            self.backend.delete_job(namespace, name)
        except NotFoundError:
            self.get_job(namespace, name)  # says it is not found, naming the others

    # -- datasets and node caches ---------------------------------------------------------------------------

    def list_datasets(self, namespace: str | None = None) -> list[Dataset]:
        """Datasets of the namespace (every namespace when None), by namespace and name."""
        return sorted(self.backend.list(Dataset, namespace), key=lambda d: (d.metadata.namespace, d.metadata.name))

    def get_dataset(self, namespace: str, name: str) -> Dataset:
        """One Dataset.

        Raises:
            OperationError: no such Dataset (with the names of the others), or it cannot be read.
        """
        dataset = self.backend.get(Dataset, namespace, name)
        if dataset is None:
            raise OperationError(not_found_message("dataset", namespace, name, self.list_datasets(namespace)))
        return dataset

    def describe_dataset(self, namespace: str, name: str) -> DatasetDescription:
        """The Dataset, the jobs that read it and its events."""
        dataset = self.get_dataset(namespace, name)
        jobs = readers(dataset, self.list_jobs(namespace))
        return DatasetDescription(dataset=dataset, jobs=jobs, events=self.backend.events_of(dataset))

    def delete_dataset(self, namespace: str, name: str) -> Dataset:
        """Delete a Dataset no unfinished job reads; the dataset manager then removes its materialised copies.

        Raises:
            OperationError: no such Dataset, or unfinished jobs read it (named).
        """
        dataset = self.get_dataset(namespace, name)
        check_no_readers(dataset, self.list_jobs(namespace))
        with contextlib.suppress(NotFoundError):
            self.backend.delete(Dataset, namespace, name, uid=dataset.metadata.uid)
        return dataset

    def cache_views(self, node: str | None = None) -> list[NodeCacheView]:
        """Every node's dataset cache (or one node's), with entries, pins and counters."""
        return self.backend.cache_views(node)

    def evict(self, *, key: str | None = None, dataset: str | None = None, node: str | None = None) -> list[str]:
        """Evict one cache entry (``key``) or every entry of a Dataset, on one node or on all.

        ``dataset`` is ``namespace/name``, or a name in ``default``. Returns ``node: key`` of each entry evicted.

        Raises:
            OperationError: nothing matched, or an entry is in use (naming the jobs); nothing in use is evicted.
        """
        try:
            targets = entries_to_evict(self.cache_views(node), key, dataset)
        except ValueError as error:
            raise OperationError(str(error)) from None
        evicted, problems = self.backend.evict_entries(targets)
        failure = eviction_failure(problems, evicted)
        if failure is not None:
            raise OperationError(failure)
        return evicted


def _annotated(obj: Stored, annotations: Mapping[str, str]) -> Any:
    metadata = validated_copy(obj.metadata, annotations={**obj.metadata.annotations, **annotations})
    return validated_copy(obj, metadata=metadata)
