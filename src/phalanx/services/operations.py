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
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from phalanx.adapters.sweeps.algorithms import algorithm_available, check_settings
from phalanx.core.delegation import conflicts, placing_scheduler
from phalanx.core.lifecycle import ACTIVE_PHASES
from phalanx.core.pipelines.components import sample_step_jobs, step_sweeps
from phalanx.core.pipelines.kfp_ir import pipelines_from_ir
from phalanx.core.pipelines.validation import bind_run, validate_pipeline, validate_run
from phalanx.core.stand_ins import FLAG, apply_stand_ins, check_stand_ins
from phalanx.core.sweeps.katib import validate_experiment
from phalanx.core.sweeps.substitute import SWEEP_LABEL, sample_trial, validate_sweep
from phalanx.model.base import validated_copy
from phalanx.model.datasets import Dataset
from phalanx.model.errors import FieldError, SpecError, short
from phalanx.model.events import Event
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.katib import API_VERSION as KATIB_API_VERSION
from phalanx.model.katib import KIND as KATIB_KIND
from phalanx.model.katib import is_experiment
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
from phalanx.model.pipelines import PIPELINERUN_LABEL, Pipeline, PipelineRun, PipelineSpec, RunPhase
from phalanx.model.pods import refused_pod_fields
from phalanx.model.queues import Queue
from phalanx.model.replicas import Replica
from phalanx.model.sweeps import AlgorithmName, Sweep
from phalanx.model.validation import validate_job, with_namespace
from phalanx.services.dataset_views import (
    DatasetDescription,
    NodeCacheView,
    entries_to_evict,
    eviction_failure,
    readers,
)
from phalanx.services.pipeline_files import inline_component_files
from phalanx.services.port import (
    AlreadyExistsError,
    ConflictError,
    NotFoundError,
    OperationsBackend,
    Readable,
    Stored,
)
from phalanx.services.queue_views import (
    QUEUE_COUNTED_PHASES,
    QueueDescription,
    QueueView,
    describe_queue,
    queue_views,
    unique_queues,
)

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
    unchanged: bool = False  # an existing object the submission left as it was (``configured`` is True too)
    # The object as stored, in its wire form, where the backend's create returned it (``port.create``).
    stored: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    # What the submission may not do as meant, said at once (a role with no image on a cluster).
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def verb(self) -> str:
        """What became of it, in kubectl's words: created, replaced, configured or unchanged."""
        if self.replaced:
            return "replaced"
        if self.unchanged:
            return "unchanged"
        return "configured" if self.configured else "created"


@dataclass(frozen=True)
class PipelineRunDescription:
    """What `describe pipelinerun` shows: the run, the pipeline it runs (None when that is gone), its Events."""

    run: PipelineRun
    spec: PipelineSpec | None
    events: list[Event]


@dataclass
class JobDescription:
    """Everything `describe` shows about a job."""

    job: TrainingJob
    replicas: list[Replica] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


#: The kinds ``submit -n`` moves to its namespace on the embedded runtime (Queues are cluster-scoped).
NAMESPACED_KINDS = frozenset({"TrainingJob", "JobType", "Dataset", "Sweep", "Pipeline", "PipelineRun"})
#: The kinds of issue 17, each validated whole at the door and stored as it is.
SWEEP_KINDS = ("Sweep", "Pipeline", "PipelineRun")


#: Why a KFP component file (no kind; name, inputs, outputs, implementation) is not submitted on its own.
_COMPONENT_FILE = (
    "this is a Kubeflow Pipelines component file (name, inputs, outputs, implementation), not an object to run "
    "on its own: use it as a step of a Pipeline, `steps: [{name: STEP, component: {path: FILE}, arguments: "
    "{...}}]`, and run that with a PipelineRun (docs/pipelines.md)"
)


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
    component_dir: Path | None = None,
    algorithms_here: bool = False,
) -> list[Any]:
    """Validate TrainingJobs, JobTypes, Queues, Datasets, Sweeps, Pipelines and PipelineRuns against ``jobtypes``.

    Kubeflow jobs (PyTorchJob, TFJob, XGBoostJob, JAXJob, PaddleJob, MPIJob) are accepted as they are: each becomes
    a TrainingJob (and, for some MPIJobs, a JobType of its own) through ``model.kubeflow``, validated as one, with
    every problem named at its path in the upstream document. A Katib ``kubeflow.org/v1beta1`` Experiment becomes
    the Sweep it converts to (``core.sweeps.katib``), its problems named at their Experiment path.

    A Sweep is checked with its trial template as a TrainingJob (``core.sweeps.substitute.validate_sweep``); a
    Pipeline whole (``core.pipelines.validation``), its component files read from ``component_dir`` and stored
    inline (``services.pipeline_files``); a PipelineRun with its arguments bound to its pipeline when that is
    inline or in the same submission (``Operations.validate`` binds those naming a stored one).

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
        component_dir: where a Pipeline's component paths start (the pipeline file's directory); None: a
            component path is refused (the documents came from no file).
        algorithms_here: a Sweep's search algorithm runs with this process's installation
            (``OperationsBackend.algorithms_here``): one whose libraries are missing is refused. Its settings are
            checked either way.

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
            or (is_experiment(doc) and "Sweep" in namespaced_kinds)  # it becomes a Sweep
            else doc
            for doc in documents
        ]
    # A pipeline's component files are read first, so what is validated (and stored) holds them inline.
    documents, unread = inline_component_files(documents, component_dir)
    jobtypes = dict(jobtypes)
    # A TrainJob names a runtime of the same file (before or after it) or one Phalanx ships.
    runtimes = runtimes_in(documents)
    # JobTypes in the same submission may be used by jobs in it.
    parsed: list[Any] = []
    errors: list[FieldError] = []
    # The images of the jobs that got as far as their stand-ins, and those a stand-in played.
    images: set[str] = set()
    played: set[str] = set()
    runs: list[tuple[int, PipelineRun]] = []
    # A sweep's trials and a pipeline's job steps meet the backend's refusals too, where their templates are written.
    rules = _TemplateRules(pod_field_refusals, cluster_scheduling, own_scheduler, algorithms_here)
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
            if position in unread:
                raise SpecError(_with_unread(doc, jobtypes, unread[position]))
            if kind == "JobType":
                jobtype = parse_jobtype(doc)
                jobtypes[jobtype.metadata.name] = jobtype
                parsed.append(jobtype)
            elif kind == "TrainingJob":
                if "kind" not in doc and "implementation" in doc:
                    raise SpecError([FieldError("implementation", _COMPONENT_FILE)])
                job = _stand_in(validate_job(doc, jobtypes), stand_ins, images, played)
                reached += 1
                _refuse_pod_fields(job, pod_field_refusals, None)
                refuse_scheduler(job, cluster_scheduling, own_scheduler, None)
                parsed.append(job)
            elif kind == "Queue":
                parsed.append(parse_queue(doc))
            elif kind == "Dataset":
                parsed.append(parse_dataset(doc))
            elif kind == "Sweep":
                sweep = validate_sweep(doc, jobtypes)
                rules.check_algorithm(sweep)
                rules.refuse([("spec.trial", sample_trial(sweep, jobtypes))])
                parsed.append(sweep)
            elif is_experiment(doc):
                made_types, sweep, experiment = validate_experiment(doc, jobtypes)
                rules.check_algorithm(sweep, experiment.upstream_path)
                trial = sample_trial(sweep, {**jobtypes, **{t.metadata.name: t for t in made_types}})
                rules.refuse([("spec.trial", trial)], experiment.upstream_path)
                _add_made(made_types, jobtypes, parsed)
                parsed.append(sweep)
            elif kind == "Pipeline":
                pipeline = validate_pipeline(doc, jobtypes)
                rules.steps(pipeline.spec, jobtypes, ("spec",), pipeline.metadata.namespace)
                parsed.append(pipeline)
            elif kind == "PipelineRun":
                run = validate_run(doc, jobtypes)
                if run.spec.pipeline_spec is not None:
                    rules.steps(run.spec.pipeline_spec, jobtypes, ("spec", "pipelineSpec"), run.metadata.namespace)
                runs.append((position, run))
                parsed.append(run)
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
                _add_made(made, jobtypes, parsed)
                parsed.append(job)
            else:
                kubeflow = ", ".join([*KUBEFLOW_KINDS, TRAINJOB, "TrainingRuntime", "ClusterTrainingRuntime"])
                kinds = (
                    f"TrainingJob, JobType, Queue, Dataset, Sweep, Pipeline, PipelineRun, a Katib Experiment "
                    f"({KATIB_API_VERSION}) or a Kubeflow kind ({kubeflow})"
                )
                errors.append(FieldError("kind", f"{prefix}unknown kind {short(kind)}; use {kinds}"))
        except SpecError as err:
            if kind in ("Queue", "Dataset", *SWEEP_KINDS, KATIB_KIND):
                # Name the Queue too: a file of queues and jobs has many documents.
                name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
                # A name past its limit is refused anyway: quote no more of it than a valid one can hold.
                what = f"{kind.lower()}/{str(name)[:MAX_NAME_LENGTH]}" if name else kind.lower()
                prefix = f"document {position + 1} ({what}): " if len(documents) > 1 else f"{what}: "
            errors.extend(FieldError(e.path, prefix + e.message) for e in err.errors)
    if stand_ins and reached == jobs_in_file:  # else a job that did not validate might have used a stand-in
        errors += _unplayed(stand_ins, images, played)
    errors += _bind_runs_in(runs, parsed, len(documents))
    if errors:
        raise SpecError(errors, source=source)
    return parsed


@dataclass(frozen=True)
class _TemplateRules:
    """The backend's refusals, applied to the sample jobs of templates (a sweep's trial, a pipeline's job steps)."""

    pod_field_refusals: Mapping[str, str] | None
    cluster_scheduling: bool | None
    own_scheduler: str | None
    algorithms_here: bool = False

    def check_algorithm(self, sweep: Sweep, upstream: Callable[[str], str] | None = None) -> None:
        """Refuse a sweep algorithm's unknown or out-of-range settings, and one that cannot run here (its libraries)."""
        found = check_settings(AlgorithmName(sweep.spec.algorithm.name), sweep.spec.algorithm.settings)
        missing = algorithm_available(sweep.spec.algorithm.name) if self.algorithms_here else None
        if missing is not None:
            found.insert(0, FieldError("spec.algorithm.name", missing))
        if found:
            raise SpecError([FieldError(upstream(e.path) if upstream else e.path, e.message) for e in found])

    def steps(self, spec: PipelineSpec, jobtypes: Mapping[str, JobType], at: Sequence[str], namespace: str) -> None:
        """Refuse what the backend refuses of a pipeline's steps: its sweep steps' algorithms, its jobs' fields."""
        errors: list[FieldError] = []
        for where, sweep in step_sweeps(spec, jobtypes, prefix=at, namespace=namespace):
            try:
                self.check_algorithm(sweep, functools.partial(_under_path, where))
            except SpecError as err:
                errors += err.errors
        try:
            self.refuse(sample_step_jobs(spec, jobtypes, prefix=at, namespace=namespace))
        except SpecError as err:
            errors += err.errors
        if errors:
            raise SpecError(errors)

    def refuse(self, jobs: Sequence[tuple[str, TrainingJob]], upstream: Callable[[str], str] | None = None) -> None:
        """Raise what the backend refuses of each job, at ``PATH.spec...`` for a job given as ``(PATH, job)``.

        ``upstream``: the path in the document as its author wrote it (a Katib Experiment's), of a Sweep path.
        """
        errors: list[FieldError] = []
        for at, job in jobs:
            refused: list[FieldError] = []
            try:
                _refuse_pod_fields(job, self.pod_field_refusals, None)
            except SpecError as err:
                refused += err.errors
            try:
                refuse_scheduler(job, self.cluster_scheduling, self.own_scheduler, None)
            except SpecError as err:
                refused += err.errors
            for error in refused:
                path = f"{at}.{error.path}"
                errors.append(FieldError(upstream(path) if upstream else path, error.message))
        if errors:
            raise SpecError(errors)


def _under_path(prefix: str, path: str) -> str:
    """``path`` of a document embedded at ``prefix`` (a sweep step's Sweep), as a path of the outer document."""
    return f"{prefix}.{path}"


def _with_unread(doc: dict[str, Any], jobtypes: Mapping[str, JobType], problems: list[FieldError]) -> list[FieldError]:
    """A pipeline's (or run's) problems when some of its component files could not be read: those, then the rest.

    Its validation says each unread component "was not read" at the path the file's problem names: left out.
    """
    paths = {problem.path for problem in problems}
    if any(path.endswith(".steps") for path in paths):
        return list(problems)  # past a limit once its files are inline: not walked further
    try:
        validate_pipeline(doc, jobtypes) if doc.get("kind") == "Pipeline" else validate_run(doc, jobtypes)
    except SpecError as err:
        return [*problems, *(error for error in err.errors if error.path not in paths)]
    return list(problems)


def _add_made(made: Sequence[JobType], jobtypes: dict[str, JobType], parsed: list[Any]) -> None:
    """Add the JobTypes a conversion made; jobs alike share one, so it is stored once per submission."""
    for jobtype in made:
        if jobtypes.get(jobtype.metadata.name) != jobtype:
            jobtypes[jobtype.metadata.name] = jobtype
            parsed.append(jobtype)


def _bind_runs_in(runs: Sequence[tuple[int, PipelineRun]], parsed: Sequence[Any], count: int) -> list[FieldError]:
    """Bind the arguments of the runs whose pipelineRef names a Pipeline of the same submission."""
    pipelines = {(p.metadata.namespace, p.metadata.name): p for p in parsed if isinstance(p, Pipeline)}
    errors = []
    for position, run in runs:
        ref = run.spec.pipeline_ref
        pipeline = pipelines.get((run.metadata.namespace, ref.name)) if ref is not None else None
        if pipeline is not None:
            prefix = f"document {position + 1} (pipelinerun/{run.metadata.name}): " if count > 1 else ""
            errors += [FieldError(e.path, prefix + e.message) for e in bind_run(run, pipeline.spec)]
    return errors


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

    A TrainJob becomes its TrainingJob; the (Cluster)TrainingRuntimes of the file, used up by it, are left out. A
    Katib Experiment becomes its Sweep (and the JobTypes its trial's conversion makes).

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
        component_dir=_file_dir(source),
    )
    known = dict(jobtypes)
    runtimes = runtimes_in(documents)
    converted: list[dict[str, Any]] = []
    for doc in documents:
        if is_runtime(doc):
            continue  # what it says is in the TrainingJobs of the TrainJobs that name it
        if is_experiment(doc):
            made, _, experiment = validate_experiment(doc, known)
            for jobtype, raw in zip(made, experiment.jobtypes, strict=True):
                if known.get(jobtype.metadata.name) != jobtype:
                    known[jobtype.metadata.name] = jobtype
                    converted.append(raw)
            converted.append(experiment.sweep)
            continue
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


def not_found_message(kind: str, namespace: str, name: str, others: Sequence[Stored | Node]) -> str:
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


def check_no_runs(pipeline: Pipeline, runs: Sequence[PipelineRun]) -> None:
    """Refuse to delete a Pipeline that PipelineRuns name.

    A run reads the pipeline's steps while it runs, and ``describe`` does afterwards.

    Raises:
        OperationError: naming the runs and what to do.
    """
    name = pipeline.metadata.name
    using = [r for r in runs if r.spec.pipeline_ref is not None and r.spec.pipeline_ref.name == name]
    if using:
        names = ", ".join(f"{r.metadata.name} ({r.status.phase})" for r in using[:20])
        more = f" and {len(using) - 20} more" if len(using) > 20 else ""
        unfinished = any(r.status.phase in (RunPhase.PENDING, RunPhase.RUNNING) for r in using)
        wait = " (or wait for the unfinished ones to finish, then delete them)" if unfinished else ""
        raise OperationError(
            f"pipeline {pipeline.metadata.namespace}/{name} is named by pipelineruns: {names}{more}; delete them "
            f"first with `phalanx delete pipelinerun NAME`{wait}, then delete the pipeline"
        )


def _by_name(objects: Sequence[Any]) -> list[Any]:
    return sorted(objects, key=lambda o: (o.metadata.namespace, o.metadata.name))


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

    def _queue_jobs(self) -> list[TrainingJob] | None:
        """The jobs of every namespace a queue counts, newest last; None when the user may not list them all.

        Only waiting and holding ones are read: the finished jobs, most of a long-lived store, count for none.
        """
        try:
            return _by_creation(self.backend.list(TrainingJob, phases=QUEUE_COUNTED_PHASES))
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
        said = f"{phase}: {detail}" if detail else str(phase)
        if phase in (Phase.ADMITTED, Phase.DOWNLOADING) and job.status.admitted_time is not None:
            # Placed but not started: what holds it back may be told only by an Event (on a cluster, a gang
            # whose GPU claims cannot be allocated), since its placement was written.
            since = job.status.admitted_time.replace(microsecond=0)  # Events are stamped to the second
            warnings = [e for e in self.backend.events_of(job) if e.type == "Warning" and e.time >= since]
            if warnings:
                latest = warnings[-1]
                said += f"; not started yet: {latest.reason}: {latest.message}"
        return said

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
        return queue_views(queues, self._queue_jobs() if queues else [])

    def describe_queue(self, name: str) -> QueueDescription:
        """The Queue, its usage, its admitted and pending jobs, and the other queues of its cohort.

        Raises:
            OperationError: no such queue.
        """
        queue = self.get_queue(name)
        queues = [q for q in self.list_queues() if q.metadata.name != name] + [queue]
        described = describe_queue(name, queues, self._queue_jobs())
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
        component_dir: Path | None = None,
    ) -> list[Any]:
        """Validate every document (moved to ``namespace`` when given); nothing is created.

        ``stand_ins``: image -> the words of a local program that plays it, on a backend that runs no images
        (``core.stand_ins``); refused where images run. ``component_dir``: where a Pipeline's component paths
        start (default: the directory of ``source``, when it names a file). A PipelineRun naming a Pipeline
        outside the submission is bound to the stored one (refused when there is none).

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
            component_dir=component_dir if component_dir is not None else _file_dir(source),
            algorithms_here=self.backend.algorithms_here,
        )
        self._bind_stored_pipelines(parsed, source)
        return parsed

    def _bind_stored_pipelines(self, objects: Sequence[Any], source: str | None) -> None:
        """Bind each run naming a Pipeline not in the submission to the stored one; refuse a missing one."""
        submitted = {(o.metadata.namespace, o.metadata.name) for o in objects if isinstance(o, Pipeline)}
        errors: list[FieldError] = []
        for run in objects:
            if not isinstance(run, PipelineRun) or run.spec.pipeline_ref is None:
                continue
            namespace = run.metadata.namespace
            if (namespace, run.spec.pipeline_ref.name) in submitted:
                continue  # bound by validate_documents
            stored = self.backend.get(Pipeline, namespace, run.spec.pipeline_ref.name)
            pipelines = {stored.metadata.name: stored} if stored is not None else {}
            if stored is None:
                pipelines = {p.metadata.name: p for p in self.backend.list(Pipeline, namespace)}
            problems = bind_run(run, pipelines)
            errors += [FieldError(p.path, f"pipelinerun/{run.metadata.name}: {p.message}") for p in problems]
        if errors:
            raise SpecError(errors, source=source)

    def submit(
        self,
        documents: Sequence[dict[str, Any]],
        *,
        namespace: str | None = None,
        replace_finished: bool = False,
        source: str | None = None,
        annotations: Mapping[str, str] | None = None,
        stand_ins: Mapping[str, Sequence[str]] | None = None,
        component_dir: Path | None = None,
    ) -> list[Submitted]:
        """Validate everything first, then create the objects.

        Queues, JobTypes, Datasets and Pipelines first, then jobs, Sweeps and PipelineRuns: each object exists
        before the objects that name it.

        An existing Queue, JobType, Dataset or Pipeline gets the submitted spec (``configured``, as ``kubectl
        apply``); a job of an existing name is an error unless ``replace_finished`` and it finished; a Sweep or
        PipelineRun of an existing name is an error.

        Args:
            documents: TrainingJobs, JobTypes, Queues and Datasets.
            namespace: put the namespaced documents in this namespace (None: their own, else ``default``).
            replace_finished: a job of the same name that finished is removed first, as ``phalanx run`` does.
            source: the file the documents came from, for error messages.
            annotations: added to every job and Dataset (e.g. the directory relative paths start from).
            stand_ins: image -> the words of a local program that plays it (``validate``).
            component_dir: where a Pipeline's component paths start (``validate``).

        Raises:
            SpecError: invalid documents, or a job reads a Dataset that does not exist (nothing is created).
            JobExistsError: a job of that name exists (and is active, or replacing was not asked for).
            OperationError: the backend refused a write.
        """
        objects = self.validate(
            documents, source=source, namespace=namespace, stand_ins=stand_ins, component_dir=component_dir
        )
        return self.submit_validated(objects, replace_finished=replace_finished, annotations=annotations)

    def submit_validated(
        self,
        objects: Sequence[Any],
        *,
        replace_finished: bool = False,
        annotations: Mapping[str, str] | None = None,
    ) -> list[Submitted]:
        """``submit`` of objects ``validate`` returned (a caller that looked at them first validates once).

        Raises:
            SpecError: a job reads a Dataset that does not exist (nothing is created).
            JobExistsError: a job of that name exists (and is active, or replacing was not asked for).
            OperationError: the backend refused a write.
        """
        if annotations:
            # A Sweep's trials and a run's steps are jobs too: their relative paths start where the file was.
            made_jobs = TrainingJob | Dataset | Sweep | Pipeline | PipelineRun
            objects = [_annotated(o, annotations) if isinstance(o, made_jobs) else o for o in objects]
        self._check_datasets_exist(objects)
        self._check_names_free(objects)
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
        order: dict[type, int] = {Queue: 0, JobType: 1, Dataset: 2, Pipeline: 3, TrainingJob: 4}
        for obj in sorted(objects, key=lambda o: order.get(type(o), 5)):
            kind = type(obj).__name__
            namespace_shown = obj.metadata.namespace if kind in self.backend.namespaced_kinds else ""
            if isinstance(obj, Sweep | PipelineRun):
                try:
                    stored = self.backend.create(obj)
                except AlreadyExistsError:
                    raise OperationError(self._taken_message(obj)) from None
                created.append(Submitted(kind, obj.metadata.namespace, obj.metadata.name, stored=stored))
                continue
            if not isinstance(obj, TrainingJob):
                applied = self.apply(obj)
                # A JobType is reported created either way, as it always was.
                configured = applied != "created" and kind != "JobType"
                unchanged = configured and applied == "unchanged"
                created.append(
                    Submitted(kind, namespace_shown, obj.metadata.name, configured=configured, unchanged=unchanged)
                )
                continue
            try:
                stored = self.backend.create(obj)
            except AlreadyExistsError:
                raise self._exists_error(obj, None) from None
            meta = obj.metadata
            warnings = self.image_warnings(obj)
            created.append(
                Submitted(
                    kind, meta.namespace, meta.name, replaced=obj.key in replaced, stored=stored, warnings=warnings
                )
            )
        return created

    def image_warnings(self, job: TrainingJob) -> tuple[str, ...]:
        """Where replicas run images (a cluster), a sentence for each role that names none, nor does its JobType.

        The operator may still have a default image (its ``--image``), which this side cannot know: so a warning
        at once rather than a refusal, instead of the job failing later with ``InvalidSpec``.
        """
        if not self.backend.runs_images:
            return ()
        jobtype = self.jobtypes().get(job.spec.type)
        found = []
        for role, replicas in job.spec.replicas.items():
            typed = jobtype.spec.roles.get(role) if jobtype is not None else None
            if replicas.template.image or (typed is not None and typed.template.image):
                continue
            found.append(
                f"{self.backend.job_noun} {job.key}: role {role} names no image (spec.replicas.{role}.template.image"
                f"{f', nor does JobType {job.spec.type}' if jobtype is not None else ''}); on a cluster every "
                "replica runs in a container, so the operator fails the job unless it has a default image "
                "(phalanx-operator --image)"
            )
        return tuple(found)

    def _check_names_free(self, objects: Sequence[Any]) -> None:
        """Refuse Sweeps and PipelineRuns whose name is taken (nothing is created)."""
        for obj in objects:
            existing: Sweep | PipelineRun | None = None
            if isinstance(obj, Sweep):
                existing = self.backend.get(Sweep, obj.metadata.namespace, obj.metadata.name)
            elif isinstance(obj, PipelineRun):
                existing = self.backend.get(PipelineRun, obj.metadata.namespace, obj.metadata.name)
            if existing is not None:
                raise OperationError(self._taken_message(existing))

    def _taken_message(self, obj: Sweep | PipelineRun) -> str:
        noun = obj.kind.lower()
        meta = obj.metadata
        flag = "" if meta.namespace == "default" else f" -n {meta.namespace}"
        phase = f" (it is {obj.status.phase})" if obj.metadata.uid else ""
        return (
            f"{noun} {meta.namespace}/{meta.name} already exists{phase}; delete it (`phalanx delete {noun} "
            f"{meta.name}{flag}`) or choose another metadata.name"
        )

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

    def apply(self, obj: Queue | JobType | Dataset | Pipeline) -> Literal["created", "configured", "unchanged"]:
        """Create the object, or give the existing one the submitted spec (``kubectl apply``); which it was.

        ``unchanged``: it existed with that spec, labels and annotations already, and nothing was written.

        Labels and annotations are replaced when the submission has some; the status stays (a changed Dataset
        is materialised again).
        """
        kind, meta = type(obj), obj.metadata
        for _ in range(MAX_CONFLICT_RETRIES):
            existing: Any = self.backend.get(kind, meta.namespace, meta.name)  # a Queue, JobType or Dataset
            if existing is None:
                try:
                    self.backend.create(obj)
                    return "created"
                except AlreadyExistsError:
                    continue
            metadata = validated_copy(
                existing.metadata,
                labels=meta.labels or existing.metadata.labels,
                annotations=meta.annotations or existing.metadata.annotations,
            )
            updated = validated_copy(existing, metadata=metadata, spec=obj.spec)
            if updated == existing:
                return "unchanged"
            try:
                self.backend.replace(updated)
                return "configured"
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

    # -- sweeps, pipelines and pipeline runs -----------------------------------------------------------------

    def list_sweeps(self, namespace: str | None = None) -> list[Sweep]:
        """Sweeps of the namespace (every namespace when None), by namespace and name."""
        return _by_name(self.backend.list(Sweep, namespace))

    def get_sweep(self, namespace: str, name: str) -> Sweep:
        """One Sweep.

        Raises:
            OperationError: no such Sweep (with the names of the others), or it cannot be read.
        """
        return self._get(Sweep, namespace, name)

    def delete_sweep(self, namespace: str, name: str) -> list[str]:
        """Delete a Sweep and its trial jobs (label ``phalanx.dev/sweep``); returns the trials deleted.

        The sweep goes first: a sweep controller's next pass finds no sweep to create trials for, and the trials
        are listed after that.

        Raises:
            OperationError: no such Sweep.
        """
        sweep = self.get_sweep(namespace, name)
        with contextlib.suppress(NotFoundError):
            self.backend.delete(Sweep, namespace, name, uid=sweep.metadata.uid)
        return self._delete_labelled_jobs(namespace, SWEEP_LABEL, name)

    def list_pipelines(self, namespace: str | None = None) -> list[Pipeline]:
        """Pipelines of the namespace (every namespace when None), by namespace and name."""
        return _by_name(self.backend.list(Pipeline, namespace))

    def get_pipeline(self, namespace: str, name: str) -> Pipeline:
        """One Pipeline.

        Raises:
            OperationError: no such Pipeline (with the names of the others), or it cannot be read.
        """
        return self._get(Pipeline, namespace, name)

    def delete_pipeline(self, namespace: str, name: str) -> Pipeline:
        """Delete a Pipeline no PipelineRun names.

        Raises:
            OperationError: no such Pipeline, or runs name it (named, with what to do).
        """
        pipeline = self.get_pipeline(namespace, name)
        check_no_runs(pipeline, self.list_pipelineruns(namespace))
        with contextlib.suppress(NotFoundError):
            self.backend.delete(Pipeline, namespace, name, uid=pipeline.metadata.uid)
        return pipeline

    def list_pipelineruns(self, namespace: str | None = None) -> list[PipelineRun]:
        """PipelineRuns of the namespace (every namespace when None), by namespace and name."""
        return _by_name(self.backend.list(PipelineRun, namespace))

    def get_pipelinerun(self, namespace: str, name: str) -> PipelineRun:
        """One PipelineRun.

        Raises:
            OperationError: no such PipelineRun (with the names of the others), or it cannot be read.
        """
        return self._get(PipelineRun, namespace, name)

    def describe_pipelinerun(self, namespace: str, name: str) -> PipelineRunDescription:
        """A PipelineRun with the pipeline it runs and its Events (the pipeline controller's).

        Raises:
            OperationError: no such PipelineRun.
        """
        run = self.get_pipelinerun(namespace, name)
        spec = run.spec.pipeline_spec
        if spec is None and run.spec.pipeline_ref is not None:
            stored = self.backend.get(Pipeline, namespace, run.spec.pipeline_ref.name)
            spec = stored.spec if stored is not None else None
        return PipelineRunDescription(run=run, spec=spec, events=self.backend.events_of(run))

    def delete_pipelinerun(self, namespace: str, name: str) -> list[str]:
        """Delete a PipelineRun with its step jobs and its sweep steps' Sweeps (label ``phalanx.dev/pipelinerun``).

        Returns:
            ``job/NAME`` and ``sweep/NAME`` of each object deleted with it.

        Raises:
            OperationError: no such PipelineRun.
        """
        run = self.get_pipelinerun(namespace, name)
        # The run goes first, as a sweep does (``delete_sweep``): no pass of its controller starts a step after.
        with contextlib.suppress(NotFoundError):
            self.backend.delete(PipelineRun, namespace, name, uid=run.metadata.uid)
        deleted: list[str] = []
        for sweep in self.backend.list(Sweep, namespace):  # its sweep steps, before their trials are listed
            if sweep.metadata.labels.get(PIPELINERUN_LABEL) == name:
                with contextlib.suppress(OperationError):  # deleted meanwhile
                    deleted += [f"trainingjob/{trial}" for trial in self.delete_sweep(namespace, sweep.metadata.name)]
                    deleted.append(f"sweep/{sweep.metadata.name}")
        deleted += [f"trainingjob/{job}" for job in self._delete_labelled_jobs(namespace, PIPELINERUN_LABEL, name)]
        return sorted(set(deleted))

    def _get(self, kind: type[Readable], namespace: str, name: str) -> Readable:
        found = self.backend.get(kind, namespace, name)
        if found is None:
            noun = kind.__name__.lower()
            raise OperationError(not_found_message(noun, namespace, name, self.backend.list(kind, namespace)))
        return found

    def _delete_labelled_jobs(self, namespace: str, label: str, value: str) -> list[str]:
        """Delete the jobs of ``namespace`` whose ``label`` is ``value`` (the backend's way); their names."""
        deleted = []
        for job in self.backend.list(TrainingJob, namespace):
            if job.metadata.labels.get(label) == value:
                with contextlib.suppress(NotFoundError):  # deleted meanwhile
                    self.backend.delete_job(namespace, job.metadata.name)
                deleted.append(job.metadata.name)
        return sorted(deleted)

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


def _file_dir(source: str | None) -> Path | None:
    """The directory of the file ``source`` names (relative to the working directory), or None when it names none."""
    if source is None:
        return None
    path = Path(source)
    return path.resolve().parent if path.is_file() else None


def _annotated(obj: Stored, annotations: Mapping[str, str]) -> Any:
    metadata = validated_copy(obj.metadata, annotations={**obj.metadata.annotations, **annotations})
    return validated_copy(obj, metadata=metadata)
