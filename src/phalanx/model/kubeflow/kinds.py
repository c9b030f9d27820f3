"""The Kubeflow job kinds Phalanx accepts, as data: which replica types become which roles of which JobType.

One table entry per kind. A kind's replica specs live under one field (``pytorchReplicaSpecs``...), each
upstream replica type maps to a role of a built-in JobType, and each kind has the default restartPolicy its
upstream operator applies to a replica that names none (training-operator 1.9 for the ``kubeflow.org/v1``
kinds, mpi-operator's ``v2beta1`` for MPIJob). What else a kind's spec may hold is listed with it; the
conversion (``kubeflow.convert``) handles those fields by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

KUBEFLOW_V1 = "kubeflow.org/v1"
MPI_OPERATOR_V2BETA1 = "kubeflow.org/v2beta1"


@dataclass(frozen=True)
class KubeflowKind:
    """How one Kubeflow kind becomes a TrainingJob."""

    kind: str
    api_version: str
    replicas_field: str
    jobtype: str
    #: upstream replica type → Phalanx role
    roles: Mapping[str, str]
    #: the restartPolicy upstream gives a replica that names none, by replica type (``*``: every other type)
    default_restart: Mapping[str, str]
    #: other fields of the kind's spec, besides runPolicy and the replica specs
    spec_fields: frozenset[str] = field(default_factory=frozenset)
    #: the value of runPolicy.managedBy that means "the upstream operator runs it" (accepted: Phalanx runs it)
    controller: str = "kubeflow.org/training-operator"
    #: environment the upstream operator gives every replica besides the rendezvous, kept where nothing is set
    extra_env: Mapping[str, str] = field(default_factory=dict)


KINDS: dict[str, KubeflowKind] = {
    kind.kind: kind
    for kind in (
        KubeflowKind(
            kind="PyTorchJob",
            api_version=KUBEFLOW_V1,
            replicas_field="pytorchReplicaSpecs",
            jobtype="pytorch",
            roles={"Master": "master", "Worker": "worker"},
            default_restart={"*": "OnFailure"},
            spec_fields=frozenset({"elasticPolicy", "nprocPerNode"}),
            extra_env={"PYTHONUNBUFFERED": "1"},
        ),
        KubeflowKind(
            kind="TFJob",
            api_version=KUBEFLOW_V1,
            replicas_field="tfReplicaSpecs",
            jobtype="tensorflow",
            # Master is the old name of Chief (the two are one role upstream too).
            roles={"Chief": "chief", "Master": "chief", "Worker": "worker", "PS": "ps", "Evaluator": "evaluator"},
            default_restart={"*": "Never"},
            spec_fields=frozenset({"successPolicy", "enableDynamicWorker"}),
        ),
        KubeflowKind(
            kind="XGBoostJob",
            api_version=KUBEFLOW_V1,
            replicas_field="xgbReplicaSpecs",
            jobtype="xgboost",
            roles={"Master": "master", "Worker": "worker"},
            default_restart={"*": "Never"},
        ),
        KubeflowKind(
            kind="JAXJob",
            api_version=KUBEFLOW_V1,
            replicas_field="jaxReplicaSpecs",
            jobtype="jax",
            roles={"Worker": "worker"},
            default_restart={"*": "Never"},
        ),
        KubeflowKind(
            kind="PaddleJob",
            api_version=KUBEFLOW_V1,
            replicas_field="paddleReplicaSpecs",
            jobtype="paddle",
            roles={"Master": "master", "Worker": "worker"},
            default_restart={"*": "OnFailure"},
            spec_fields=frozenset({"elasticPolicy"}),
            extra_env={"PYTHONUNBUFFERED": "1"},
        ),
        KubeflowKind(
            kind="MPIJob",
            api_version=MPI_OPERATOR_V2BETA1,
            replicas_field="mpiReplicaSpecs",
            jobtype="mpi",
            roles={"Launcher": "launcher", "Worker": "worker"},
            # Upstream restarts the launcher OnFailure and leaves a worker Never; the launcher's decides here
            # (a worker that names none follows it), see kubeflow.convert.
            default_restart={"Launcher": "OnFailure"},
            spec_fields=frozenset(
                {
                    "slotsPerWorker",
                    "runLauncherAsWorker",
                    "sshAuthMountPath",
                    "launcherCreationPolicy",
                    "mpiImplementation",
                }
            ),
            controller="kubeflow.org/mpi-operator",
        ),
    )
}


def kubeflow_kind(document: Mapping[str, object]) -> KubeflowKind | None:
    """The table entry for a document's kind, or None when it is not a Kubeflow kind."""
    return KINDS.get(str(document.get("kind")))
