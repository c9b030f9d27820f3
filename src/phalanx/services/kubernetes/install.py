"""Installing Phalanx on Kubernetes: the YAML ``phalanx install --print`` prints and ``deploy/`` holds.

``deploy/`` is generated, never edited: ``scripts/generate-deploy`` calls ``write_deploy``, and a unit test
regenerates the files and fails when the committed ones differ, so they never drift from the models.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from phalanx.adapters.kubernetes.crds import KINDS, custom_resource_definition, custom_resource_definitions
from phalanx.adapters.kubernetes.kubeflow_crds import KUBEFLOW_CRDS, kubeflow_custom_resource_definitions
from phalanx.adapters.kubernetes.manifests import (
    DEFAULT_NAMESPACE,
    GPU_ALLOCATIONS,
    InstallParameters,
    install_manifests,
    render_yaml,
)
from phalanx.model.base import API_GROUP
from phalanx.model.meta import check_dns_label
from phalanx.model.names import check_dns_subdomain

GENERATED_NOTE = "Generated from the Phalanx models by scripts/generate-deploy; do not edit."


def phalanx_version() -> str:
    """The installed Phalanx version, e.g. ``0.1.0``."""
    return metadata.version("phalanx")


def default_image() -> str:
    """The image the install runs unless told otherwise: ``phalanx:<version>``, a placeholder to build or retag."""
    return f"phalanx:{phalanx_version()}"


@dataclass(frozen=True, slots=True)
class InstallRequest:
    """What to print.

    Attributes:
        namespace: where the components run.
        image: the image they run; None for ``default_image()``.
        crds_only: only the CustomResourceDefinitions (cluster-wide; no namespace, RBAC or workloads).
        default_job_scheduler: the cluster's scheduler for jobs naming none (empty: phalanx-scheduler).
        kubeflow_kinds: also the CRDs of the Kubeflow kinds and the operator's rights on them, so that
            ``kubectl apply`` of a PyTorchJob, MPIJob, TrainJob... runs it (docs/kubeflow.md).
        workloads: the operator's and scheduler's Deployments and the node agents' DaemonSet; without them, the
            components run as processes elsewhere (docs/kubernetes.md, running the components as processes).
        kubelet_config: the kubelet's configuration file on every node, mounted into the node agents ('': not).
        gpu_allocation: ``dra`` (ResourceClaims phalanx-scheduler allocates) or ``device-plugin``.
        resource_slices: the node agents publish their node's GPUs as ResourceSlices (no DRA driver there).
    """

    namespace: str = DEFAULT_NAMESPACE
    image: str | None = None
    crds_only: bool = False
    default_job_scheduler: str = ""
    kubeflow_kinds: bool = False
    workloads: bool = True
    kubelet_config: str = ""
    gpu_allocation: str = "device-plugin"
    resource_slices: bool = False


#: What ``--no-workloads`` leaves out: the components' Deployments and DaemonSet.
WORKLOAD_KINDS = frozenset({"Deployment", "DaemonSet"})


def render_install(request: InstallRequest) -> str:
    """The install as multi-document YAML, ready for ``kubectl apply -f -``.

    Raises:
        ValueError: the namespace is not a DNS-1123 label, the image name is empty or has spaces, or the default
            job scheduler is not a DNS-1123 subdomain.
    """
    if request.crds_only:
        kubeflow = kubeflow_custom_resource_definitions() if request.kubeflow_kinds else []
        return render_yaml([*custom_resource_definitions(), *kubeflow], header=_crds_header(request.kubeflow_kinds))
    check_dns_label(request.namespace, "namespace")
    image = request.image if request.image is not None else default_image()
    if not image or any(character.isspace() for character in image):
        raise ValueError(
            f"image {image!r} is not an image reference; use e.g. phalanx:0.1.0 or my-registry/phalanx:0.1.0"
        )
    if request.default_job_scheduler:
        check_dns_subdomain(request.default_job_scheduler, "--default-job-scheduler")
    if request.kubelet_config and not request.kubelet_config.startswith("/"):
        raise ValueError(
            f"--kubelet-config {request.kubelet_config!r} must be the file's absolute path on the nodes, e.g. "
            "/var/lib/kubelet/config.yaml"
        )
    if request.gpu_allocation not in GPU_ALLOCATIONS:
        raise ValueError(
            f"--gpu-allocation {request.gpu_allocation!r}: choose one of {', '.join(GPU_ALLOCATIONS)} "
            "(docs/kubernetes.md#gpus-through-dynamic-resource-allocation)"
        )
    where = {
        "--gpu-allocation": "phalanx-operator --gpu-allocation dra",
        "--resource-slices": "phalanx-node-agent --resource-slices",
        "--kubelet-config": "phalanx-node-agent --kubelet-config FILE",
    }
    ignored = [
        flag
        for flag, given in (
            ("--gpu-allocation", request.gpu_allocation != "device-plugin"),
            ("--resource-slices", request.resource_slices),
            ("--kubelet-config", bool(request.kubelet_config)),
        )
        if given
    ]
    if ignored and not request.workloads:
        verb = "configures" if len(ignored) == 1 else "configure"
        raise ValueError(
            f"{', '.join(ignored)} {verb} the components' Deployments and DaemonSet, which --no-workloads leaves "
            f"out: give the processes {'; '.join(where[flag] for flag in ignored)} instead "
            "(docs/kubernetes.md#running-the-components-as-processes)"
        )
    parameters = InstallParameters(
        image=image,
        namespace=request.namespace,
        default_job_scheduler=request.default_job_scheduler,
        kubeflow_kinds=request.kubeflow_kinds,
        kubelet_config=request.kubelet_config or None,
        gpu_allocation=request.gpu_allocation,
        resource_slices=request.resource_slices,
    )
    documents = install_manifests(parameters)
    if not request.workloads:
        documents = [document for document in documents if document["kind"] not in WORKLOAD_KINDS]
    return render_yaml(documents, header=_install_header(request.workloads))


def deploy_files() -> dict[str, str]:
    """The contents of ``deploy/`` by relative path: one file per CRD and the whole install."""
    files = {
        f"crds/{API_GROUP}_{kind.plural}.yaml": render_yaml(
            [custom_resource_definition(kind)], header=f"CustomResourceDefinition of {kind.kind}.\n{GENERATED_NOTE}"
        )
        for kind in KINDS
    }
    files["install.yaml"] = render_install(InstallRequest())
    return files


def write_deploy(directory: Path) -> list[Path]:
    """Write ``deploy_files()`` under ``directory``, removing generated CRD files of kinds that are gone.

    Returns:
        The files written.
    """
    files = deploy_files()
    crds = directory / "crds"
    if crds.is_dir():
        for stale in crds.glob("*.yaml"):
            if f"crds/{stale.name}" not in files:
                stale.unlink()
    return write_files(directory, files)


def write_files(directory: Path, files: dict[str, str]) -> list[Path]:
    """Write generated ``files`` (relative path -> text) under ``directory``; the paths written."""
    written = []
    for relative, text in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def _crds_header(kubeflow: bool = False) -> str:
    kinds = [kind.kind for kind in KINDS] + ([crd.kind for crd in KUBEFLOW_CRDS] if kubeflow else [])
    return f"Phalanx CustomResourceDefinitions ({', '.join(kinds)}).\n{GENERATED_NOTE}"


def _install_header(workloads: bool = True) -> str:
    if not workloads:
        return (
            f"Phalanx {phalanx_version()} on Kubernetes, without its workloads: namespace, CRDs, RBAC, admission "
            "policies, scheduler configuration; the components run as processes.\n"
            f"{GENERATED_NOTE}\n"
            "Apply with: phalanx install --print --no-workloads | kubectl apply -f -   (docs/kubernetes.md)"
        )
    return (
        f"Phalanx {phalanx_version()} on Kubernetes: namespace, CRDs, RBAC, operator, scheduler, node agent.\n"
        f"{GENERATED_NOTE}\n"
        "Apply with: phalanx install --print | kubectl apply -f -   (docs/kubernetes.md)"
    )
