"""Kubeflow job kinds, accepted as they are: converted to TrainingJobs and validated like any job.

``kinds`` is the table of accepted kinds, ``pods`` turns a PodTemplateSpec into a replica template, ``convert``
turns a whole document into a TrainingJob document, ``trainjobs`` does the same for a Trainer v2 TrainJob and
the (Cluster)TrainingRuntime it names. ``validate_kubeflow`` is what the validation door
(``services.operations.validate_documents``) calls: it converts, then validates the result with the very same
``validate_job`` as a TrainingJob written by hand, and reports every problem at the path of the upstream
document. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from phalanx.model.errors import FieldError, SpecError
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.kubeflow.convert import CONVERTED_FROM, Conversion, convert
from phalanx.model.kubeflow.kinds import KINDS, KubeflowKind, kubeflow_kind
from phalanx.model.kubeflow.trainjobs import (
    RUNTIME_KINDS,
    TRAINJOB,
    RuntimeKey,
    check_runtime,
    convert_trainjob,
    is_runtime,
    runtime_key,
    shipped_runtimes,
)
from phalanx.model.loading import parse_jobtype
from phalanx.model.validation import validate_job

__all__ = [
    "CONVERTED_FROM",
    "KINDS",
    "RUNTIME_KINDS",
    "TRAINJOB",
    "Conversion",
    "KubeflowKind",
    "RuntimeKey",
    "check_runtime",
    "convert",
    "convert_kubeflow",
    "is_runtime",
    "kubeflow_kind",
    "moves_with_jobs",
    "runtime_key",
    "runtimes_in",
    "shipped_runtimes",
    "validate_kubeflow",
    "validate_trainjob",
    "with_made_jobtypes",
]


def runtimes_in(documents: Sequence[Mapping[str, Any]]) -> dict[RuntimeKey, Mapping[str, Any]]:
    """The runtimes TrainJobs of these documents may name: the shipped ones, then the documents' own (which win)."""
    found: dict[RuntimeKey, Mapping[str, Any]] = dict(shipped_runtimes())
    for document in documents:
        if is_runtime(document) and (key := runtime_key(document)) is not None:
            found[key] = document
    return found


def moves_with_jobs(document: Mapping[str, Any]) -> bool:
    """Whether a document is a Kubeflow job, TrainJob or TrainingRuntime: it goes where ``submit -n`` puts jobs."""
    kind = document.get("kind")
    return kubeflow_kind(document) is not None or kind in (TRAINJOB, "TrainingRuntime")


def convert_kubeflow(document: Mapping[str, Any], jobtypes: Mapping[str, JobType]) -> Conversion:
    """Convert a Kubeflow document; see ``convert.convert``.

    Raises:
        SpecError: the document is not a Kubeflow kind, or a field cannot be honoured (upstream paths).
    """
    kind = kubeflow_kind(document)
    if kind is None:
        raise SpecError([FieldError("kind", f"not a Kubeflow kind; use one of {', '.join(KINDS)}")])
    return convert(document, kind, jobtypes)


def validate_kubeflow(
    document: Mapping[str, Any], jobtypes: Mapping[str, JobType]
) -> tuple[list[JobType], TrainingJob, Conversion]:
    """The JobTypes and the validated, defaulted TrainingJob a Kubeflow document becomes.

    Args:
        document: the upstream document.
        jobtypes: the JobTypes known to the backend and the submission (the job's type is looked up there,
            after the conversion's own JobTypes are added).

    Returns:
        The JobTypes the conversion made (to be stored with the job), the job, and the conversion itself.

    Raises:
        SpecError: every problem, each at its path in the upstream document.
    """
    conversion = convert_kubeflow(document, jobtypes)
    return _validated(conversion, jobtypes)


def validate_trainjob(
    document: Mapping[str, Any], runtimes: Mapping[RuntimeKey, Mapping[str, Any]], jobtypes: Mapping[str, JobType]
) -> tuple[list[JobType], TrainingJob, Conversion]:
    """The validated, defaulted TrainingJob a TrainJob becomes with the runtime it names; see ``validate_kubeflow``.

    Raises:
        SpecError: every problem, each at its path in the TrainJob or in its runtime.
    """
    return _validated(convert_trainjob(document, runtimes, jobtypes), jobtypes)


def with_made_jobtypes(
    raws: Sequence[dict[str, Any]], jobtypes: Mapping[str, JobType]
) -> tuple[dict[str, JobType], list[JobType]]:
    """The JobTypes a conversion made, parsed, and ``jobtypes`` with them added (what its job may name)."""
    known = dict(jobtypes)
    made: list[JobType] = []
    for raw in raws:
        jobtype = parse_jobtype(raw)
        known[jobtype.metadata.name] = jobtype
        made.append(jobtype)
    return known, made


def _validated(
    conversion: Conversion, jobtypes: Mapping[str, JobType]
) -> tuple[list[JobType], TrainingJob, Conversion]:
    known, made = with_made_jobtypes(conversion.jobtypes, jobtypes)
    try:
        job = validate_job(conversion.job, known)
    except SpecError as err:
        raise SpecError(
            [FieldError(conversion.upstream_path(error.path), error.message) for error in err.errors]
        ) from None
    return made, job, conversion
