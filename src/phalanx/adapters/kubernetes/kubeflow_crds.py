"""CustomResourceDefinitions of the Kubeflow kinds, for a cluster where Phalanx runs them (opt-in).

With ``phalanx install --kubeflow-kinds`` (chart value ``kubeflowKinds.enabled``) the cluster serves the upstream
kinds Phalanx converts — ``kubeflow.org/v1`` PyTorchJob, TFJob, XGBoostJob, JAXJob, PaddleJob,
``kubeflow.org/v2beta1`` MPIJob, ``trainer.kubeflow.org/v1alpha1`` TrainJob, TrainingRuntime and
ClusterTrainingRuntime — so ``kubectl apply -f`` of an upstream file is stored as it is, and the operator turns
each job into a TrainingJob (``services/kubernetes/kubeflow.py``).

The schemas are open (``x-kubernetes-preserve-unknown-fields`` under ``spec`` and ``status``): the API server
stores any upstream file unchanged, and the one judge of what a field means is the converter the CLI uses, whose
refusals name the field's path in the object's status and an Event. The jobs have the status subresource (users
write spec, the operator status) and a ``State`` column, the type of the latest condition, as upstream prints it.

Every CRD carries ``app.kubernetes.io/part-of: phalanx``: a CRD of one of these names without that label belongs
to another installation (a real Kubeflow), and the operator then leaves that kind alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from phalanx.adapters.kubernetes.api import Resource
from phalanx.adapters.kubernetes.crds import AGE, PART_OF_LABELS, PrinterColumn
from phalanx.adapters.kubernetes.structural import check_structural
from phalanx.model.kubeflow.kinds import KINDS as JOB_KINDS
from phalanx.model.kubeflow.trainjobs import TRAINER_V1ALPHA1, TRAINJOB

CATEGORY = "kubeflow"
#: The label that says a CRD is Phalanx's (not a real Kubeflow's).
OWNED_BY = PART_OF_LABELS
STATE = PrinterColumn("State", ".status.conditions[-1:].type", description="the latest condition")


@dataclass(frozen=True, slots=True)
class KubeflowCrd:
    """One upstream kind as this cluster serves it."""

    kind: str
    api_version: str
    plural: str
    scope: Literal["Namespaced", "Cluster"] = "Namespaced"
    is_job: bool = True  # a job (converted, with a status) rather than a runtime

    @property
    def group(self) -> str:
        """``kubeflow.org`` or ``trainer.kubeflow.org``."""
        return self.api_version.split("/")[0]

    @property
    def version(self) -> str:
        """``v1``, ``v2beta1`` or ``v1alpha1``."""
        return self.api_version.split("/")[1]

    @property
    def name(self) -> str:
        """The CRD's name: ``<plural>.<group>``."""
        return f"{self.plural}.{self.group}"

    @property
    def resource(self) -> Resource:
        """Where the API serves it."""
        return Resource(self.kind, self.plural, self.group, self.version, namespaced=self.scope == "Namespaced")


KUBEFLOW_CRDS: tuple[KubeflowCrd, ...] = (
    *(KubeflowCrd(kind.kind, kind.api_version, f"{kind.kind.lower()}s") for kind in JOB_KINDS.values()),
    KubeflowCrd(TRAINJOB, TRAINER_V1ALPHA1, "trainjobs"),
    KubeflowCrd("TrainingRuntime", TRAINER_V1ALPHA1, "trainingruntimes", is_job=False),
    KubeflowCrd("ClusterTrainingRuntime", TRAINER_V1ALPHA1, "clustertrainingruntimes", "Cluster", is_job=False),
)
JOB_CRDS = tuple(crd for crd in KUBEFLOW_CRDS if crd.is_job)


def kubeflow_crd(kind: str) -> KubeflowCrd:
    """The entry of ``KUBEFLOW_CRDS`` for a kind name.

    Raises:
        KeyError: not one of the kinds.
    """
    for crd in KUBEFLOW_CRDS:
        if crd.kind == kind:
            return crd
    raise KeyError(kind)


def _open(description: str) -> dict[str, Any]:
    return {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "description": description}


def open_schema(crd: KubeflowCrd) -> dict[str, Any]:
    """The ``openAPIV3Schema``: any spec and status are stored as written; the operator's converter judges them."""
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": _open(f"the upstream {crd.kind} spec; what Phalanx honours: docs/kubeflow.md"),
    }
    if crd.is_job:
        properties["status"] = _open("conditions and replicaStatuses, written by phalanx-operator")
    schema = {"type": "object", "properties": properties}
    problems = check_structural(schema)
    assert not problems, problems
    return schema


def kubeflow_custom_resource_definition(crd: KubeflowCrd) -> dict[str, Any]:
    """The CustomResourceDefinition manifest of one upstream kind."""
    version: dict[str, Any] = {
        "name": crd.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": open_schema(crd)},
    }
    if crd.is_job:
        version["subresources"] = {"status": {}}
        version["additionalPrinterColumns"] = [STATE.to_dict(), AGE.to_dict()]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd.name, "labels": dict(OWNED_BY)},
        "spec": {
            "group": crd.group,
            "names": {
                "kind": crd.kind,
                "listKind": f"{crd.kind}List",
                "plural": crd.plural,
                "singular": crd.kind.lower(),
                "categories": [CATEGORY],
            },
            "scope": crd.scope,
            "versions": [version],
        },
    }


def kubeflow_custom_resource_definitions() -> list[dict[str, Any]]:
    """Every CRD of the Kubeflow kinds, in ``KUBEFLOW_CRDS`` order."""
    return [kubeflow_custom_resource_definition(crd) for crd in KUBEFLOW_CRDS]


def foreign(crd_object: dict[str, Any]) -> bool:
    """Whether a CRD read from the cluster belongs to another installation (it lacks Phalanx's label)."""
    labels = (crd_object.get("metadata") or {}).get("labels") or {}
    return any(labels.get(key) != value for key, value in OWNED_BY.items())
