"""What the operations of both backends share: their errors, results and the one validation of submissions.

``services.embedded.operations`` (a state directory) and ``services.kubernetes.operations`` (a cluster) raise
these errors, return these results and validate every submission with ``validate_documents``, so the CLI and the
SDK say the same thing on both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.core.lifecycle import ACTIVE_PHASES
from phalanx.model.datasets import Dataset
from phalanx.model.errors import FieldError, SpecError, short
from phalanx.model.events import Event
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import check_documents, parse_dataset, parse_jobtype, parse_queue
from phalanx.model.names import MAX_NAME_LENGTH, check_dns_label
from phalanx.model.replicas import Replica
from phalanx.model.validation import validate_job, with_namespace
from phalanx.services.dataset_views import readers

MAX_CONFLICT_RETRIES = 20


class OperationError(Exception):
    """An operation that cannot be done, with a message that says what to do instead."""


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
) -> list[Any]:
    """Validate TrainingJobs, JobTypes, Queues and Datasets; jobs against ``jobtypes`` (and the submission's).

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

    Raises:
        SpecError: every problem in every document, each with its field path; a bad ``namespace`` alone.
    """
    # Documents posted as JSON or handed over by the SDK meet a file's limits before anything walks them.
    check_documents(documents, source=source)
    if namespace is not None:
        try:
            check_dns_label(namespace, "namespace")
        except ValueError as err:
            raise SpecError([FieldError("", str(err))], source=source) from None
        documents = [
            with_namespace(doc, namespace) if str(doc.get("kind", "TrainingJob")) in namespaced_kinds else doc
            for doc in documents
        ]
    jobtypes = dict(jobtypes)
    # JobTypes in the same submission may be used by jobs in it.
    parsed: list[Any] = []
    errors: list[FieldError] = []
    for position, doc in enumerate(documents):
        kind = doc.get("kind", "TrainingJob")
        prefix = f"document {position + 1}: " if len(documents) > 1 else ""
        try:
            if kind == "JobType":
                jobtype = parse_jobtype(doc)
                jobtypes[jobtype.metadata.name] = jobtype
                parsed.append(jobtype)
            elif kind == "TrainingJob":
                parsed.append(validate_job(doc, jobtypes))
            elif kind == "Queue":
                parsed.append(parse_queue(doc))
            elif kind == "Dataset":
                parsed.append(parse_dataset(doc))
            else:
                kinds = "TrainingJob, JobType, Queue or Dataset"
                errors.append(FieldError("kind", f"{prefix}unknown kind {short(kind)}; use {kinds}"))
        except SpecError as err:
            if kind in ("Queue", "Dataset"):
                # Name the Queue too: a file of queues and jobs has many documents.
                name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
                # A name past its limit is refused anyway: quote no more of it than a valid one can hold.
                what = f"{kind.lower()}/{str(name)[:MAX_NAME_LENGTH]}" if name else kind.lower()
                prefix = f"document {position + 1} ({what}): " if len(documents) > 1 else f"{what}: "
            errors.extend(FieldError(e.path, prefix + e.message) for e in err.errors)
    if errors:
        raise SpecError(errors, source=source)
    return parsed


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
