"""CustomResourceDefinitions (apiextensions.k8s.io/v1) for Phalanx's API objects, generated from the models.

Each kind is one ``CrdKind`` entry in ``KINDS``: its model, plural, scope, short names and printer columns.
The schema comes from the model (``schemas.openapi_schema``), with the root made Kubernetes-shaped: ``metadata``
is left to Kubernetes (``type: object`` only), ``apiVersion`` and ``kind`` are plain strings. A kind whose
model has a ``status`` gets the status subresource, so spec and status are written separately (users and
``kubectl apply`` write spec; the operator and scheduler write status) and ``metadata.generation`` moves only
when the spec changes, as in the embedded store. Every generated schema is checked with
``structural.check_structural`` and every printer column's path with ``structural.schema_at``: a model change
that Kubernetes would refuse fails here, at generation, not on a cluster.

Scopes (docs/kubernetes.md says why): TrainingJob is namespaced, like a Pod; JobType and Queue are
cluster-scoped. Jobs in every namespace name a JobType by bare name (``spec.type``) and a JobType decides the
commands and environment replicas get, so it is the administrator's, like Kubeflow Trainer's
ClusterTrainingRuntime; the embedded runtime, too, keeps one set of JobTypes for every namespace. Quota is
the administrator's to hand out, so a Queue is cluster-scoped like Kueue's ClusterQueue and Volcano's Queue,
and says in ``spec.namespaces`` whose jobs may use it.

Sweep, Pipeline and PipelineRun are namespaced, like the TrainingJobs they make (a Sweep's trials and a run's
steps are TrainingJobs in its namespace). The parts of them that Phalanx holds raw — a Sweep's trial spec, a
step's TrainingJob or Sweep spec and inline component, fan-out items, recorded outputs — are kept as written
(``x-kubernetes-preserve-unknown-fields``, see ``schemas``): they are checked by the model, with references such
as ``${params.count}`` standing where a number goes, which no OpenAPI schema could say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from phalanx.adapters.kubernetes.schemas import openapi_schema
from phalanx.adapters.kubernetes.structural import check_structural, schema_at
from phalanx.model.base import API_GROUP, ApiModel
from phalanx.model.datasets import Dataset
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.pipelines import Pipeline, PipelineRun
from phalanx.model.queues import Queue
from phalanx.model.sweeps import Sweep

VERSION = "v1alpha1"
CATEGORY = "phalanx"
PART_OF_LABELS = {"app.kubernetes.io/part-of": "phalanx"}


class CrdError(ValueError):
    """A generated CRD that Kubernetes would refuse; lists every problem."""


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    """A column of ``kubectl get``: a name and a simple JSONPath into the object."""

    name: str
    json_path: str
    type: Literal["string", "integer", "number", "boolean", "date"] = "string"
    description: str = ""
    priority: int = 0  # 0: always shown; 1: only with -o wide

    def to_dict(self) -> dict[str, Any]:
        """The ``additionalPrinterColumns`` entry."""
        column: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            column["description"] = self.description
        if self.priority:
            column["priority"] = self.priority
        return column


AGE = PrinterColumn("Age", ".metadata.creationTimestamp", "date", "time since the object was created")


@dataclass(frozen=True, slots=True)
class CrdKind:
    """How one API object is served by Kubernetes."""

    model: type[ApiModel]
    plural: str
    scope: Literal["Namespaced", "Cluster"]
    short_names: tuple[str, ...]
    columns: tuple[PrinterColumn, ...]

    @property
    def kind(self) -> str:
        """The kind, from the model's ``kind`` field (``TrainingJob``)."""
        return str(self.model.model_fields["kind"].default)

    @property
    def name(self) -> str:
        """The CRD's name: ``<plural>.<group>``."""
        return f"{self.plural}.{API_GROUP}"

    @property
    def has_status(self) -> bool:
        """Whether the model has a status, and so the CRD the status subresource."""
        return "status" in self.model.model_fields


KINDS: tuple[CrdKind, ...] = (
    CrdKind(
        model=TrainingJob,
        plural="trainingjobs",
        scope="Namespaced",
        short_names=("tj",),
        columns=(
            PrinterColumn("Type", ".spec.type", description="the JobType"),
            PrinterColumn("Phase", ".status.phase", description="where the job is in its life"),
            PrinterColumn("Reason", ".status.reason", description="why it is in that phase, in one word"),
            PrinterColumn("Queue", ".spec.scheduling.queue", priority=1),
            PrinterColumn("Restarts", ".status.restarts", "integer", priority=1),
            PrinterColumn("Message", ".status.message", description="why, in one sentence", priority=1),
            AGE,
        ),
    ),
    CrdKind(
        model=JobType,
        plural="jobtypes",
        scope="Cluster",
        short_names=("jt",),
        columns=(
            PrinterColumn("Port", ".spec.port", "integer", "rendezvous port of every replica on Kubernetes"),
            PrinterColumn("Description", ".spec.description", priority=1),  # built-ins have a paragraph
            AGE,
        ),
    ),
    CrdKind(
        model=Queue,
        plural="queues",
        scope="Cluster",
        short_names=("pq",),
        columns=(
            PrinterColumn("Cohort", ".spec.cohort", description="queues that lend each other idle quota"),
            PrinterColumn("Weight", ".spec.weight", "number", "fair-share weight"),
            PrinterColumn("Admitted", ".status.admitted", "integer", "jobs holding resources"),
            PrinterColumn("Pending", ".status.pending", "integer", "jobs waiting"),
            AGE,
        ),
    ),
    CrdKind(
        model=Dataset,
        plural="datasets",
        scope="Namespaced",
        short_names=("pds",),  # "ds" is kubectl's DaemonSet
        columns=(
            PrinterColumn("Distribution", ".spec.distribution", description="replicate or shard"),
            PrinterColumn("Phase", ".status.phase", description="Pending, Materializing, Ready or Failed"),
            PrinterColumn("Bytes", ".status.bytes", "integer", "size of the materialised version"),
            PrinterColumn("Version", ".status.version", description="content hash", priority=1),
            AGE,
        ),
    ),
    CrdKind(
        model=Sweep,
        plural="sweeps",
        scope="Namespaced",
        short_names=("sw",),
        columns=(
            PrinterColumn("Phase", ".status.phase", description="Pending, Running, Succeeded or Failed"),
            PrinterColumn("Trials", ".status.trials.created", "integer", "trials created so far"),
            PrinterColumn("Best", ".status.bestTrial.value", "number", "the objective of the best trial so far"),
            PrinterColumn("Message", ".status.message", description="why, in one sentence", priority=1),
            AGE,
        ),
    ),
    CrdKind(
        model=Pipeline,
        plural="pipelines",
        scope="Namespaced",
        short_names=("pl",),
        columns=(AGE,),
    ),
    CrdKind(
        model=PipelineRun,
        plural="pipelineruns",
        scope="Namespaced",
        short_names=("plr",),
        columns=(
            PrinterColumn("Pipeline", ".spec.pipelineRef.name", description="the Pipeline it runs (none: inline)"),
            PrinterColumn("Phase", ".status.phase", description="Pending, Running, Succeeded or Failed"),
            PrinterColumn("Message", ".status.message", description="why, in one sentence", priority=1),
            AGE,
        ),
    ),
)


def crd_kind(kind: str) -> CrdKind:
    """The entry of ``KINDS`` for a kind name such as ``TrainingJob``.

    Raises:
        KeyError: no CRD serves that kind.
    """
    for entry in KINDS:
        if entry.kind == kind:
            return entry
    raise KeyError(f"no CRD for kind {kind!r}; known: {', '.join(k.kind for k in KINDS)}")


def resource_schema(kind: CrdKind) -> dict[str, Any]:
    """The checked ``openAPIV3Schema`` of one kind.

    Raises:
        CrdError: the schema is not structural, or a printer column points outside it.
    """
    schema = openapi_schema(kind.model)
    properties = schema.setdefault("properties", {})
    properties["apiVersion"] = {
        "type": "string",
        "description": f"{API_GROUP}/{VERSION}: the versioned schema of this representation of an object",
    }
    properties["kind"] = {"type": "string", "description": f"{kind.kind}: the REST resource this object represents"}
    properties["metadata"] = {"type": "object"}
    required = [name for name in schema.get("required", []) if name not in ("apiVersion", "kind", "metadata")]
    if required:
        schema["required"] = required
    else:
        schema.pop("required", None)
    problems = check_structural(schema)
    for column in kind.columns:
        if not column.json_path.startswith(".metadata.") and schema_at(schema, column.json_path) is None:
            problems.append(f"printer column {column.name}: {column.json_path} is not in the schema")
    if problems:
        raise CrdError(f"{kind.name}: " + "; ".join(problems))
    return schema


def custom_resource_definition(kind: CrdKind) -> dict[str, Any]:
    """The CustomResourceDefinition manifest of one kind."""
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": resource_schema(kind)},
    }
    if kind.has_status:
        version["subresources"] = {"status": {}}
    version["additionalPrinterColumns"] = [column.to_dict() for column in kind.columns]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.name, "labels": dict(PART_OF_LABELS)},
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.kind.lower(),
                "shortNames": list(kind.short_names),
                "categories": [CATEGORY],
            },
            "scope": kind.scope,
            "versions": [version],
        },
    }


def custom_resource_definitions() -> list[dict[str, Any]]:
    """Every Phalanx CRD, in ``KINDS`` order."""
    return [custom_resource_definition(kind) for kind in KINDS]
