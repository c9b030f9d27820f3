"""``phalanx install``: the manifests that install Phalanx on Kubernetes (CRDs, RBAC, operator, scheduler, agent)."""

from __future__ import annotations

import dataclasses
import sys
from typing import Annotated

import typer

from phalanx.entrypoints.cli.output import fail


def install(
    print_yaml: Annotated[
        bool, typer.Option("--print", help="Print the manifests as YAML, e.g. for `| kubectl apply -f -`.")
    ] = False,
    crds_only: Annotated[
        bool,
        typer.Option(
            "--crds-only",
            help="Only the CustomResourceDefinitions (TrainingJob, JobType, Queue, Dataset, Sweep, Pipeline, "
            "PipelineRun).",
        ),
    ] = False,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Namespace of the components (default: phalanx-system).")
    ] = None,
    image: Annotated[str | None, typer.Option(help="Image the components run (default: phalanx:<version>).")] = None,
    default_job_scheduler: Annotated[
        str,
        typer.Option(
            help="The cluster's scheduler for jobs naming none in spec.scheduling.schedulerName, e.g. "
            "default-scheduler (kube-scheduler's gang scheduling; default: phalanx-scheduler)."
        ),
    ] = "",
    kubeflow_kinds: Annotated[
        bool,
        typer.Option(
            "--kubeflow-kinds",
            help="Also serve the Kubeflow kinds (PyTorchJob, TFJob, XGBoostJob, JAXJob, PaddleJob, MPIJob, TrainJob "
            "and its runtimes) and let the operator run them, so `kubectl apply -f` of one works (docs/kubeflow.md). "
            "Not on a cluster where Kubeflow's operators run.",
        ),
    ] = False,
    kubelet_config: Annotated[
        str,
        typer.Option(
            "--kubelet-config",
            help="The kubelet's configuration file on every node, e.g. /var/lib/kubelet/config.yaml: mounted into "
            "the node agents, which report whether NUMA alignment is enforced there (docs/kubernetes.md, CPU "
            "pinning). The install namespace then enforces the privileged Pod Security level (a hostPath).",
        ),
    ] = "",
    gpu_allocation: Annotated[
        str,
        typer.Option(
            "--gpu-allocation",
            help="How replicas get their GPUs: dra (a ResourceClaim phalanx-scheduler allocates exactly the GPUs it "
            "chose, which the node's DRA driver prepares) or device-plugin (nvidia.com/gpu: the node picks them). "
            "docs/kubernetes.md, GPUs through Dynamic Resource Allocation.",
        ),
    ] = "device-plugin",
    resource_slices: Annotated[
        bool,
        typer.Option(
            "--resource-slices",
            help="The node agents publish their node's GPUs as ResourceSlices, for --gpu-allocation dra on nodes "
            "where no DRA driver (NVIDIA's) does.",
        ),
    ] = False,
    no_workloads: Annotated[
        bool,
        typer.Option(
            "--no-workloads",
            help="Leave out the components' Deployments and DaemonSet, to run the operator, scheduler and node "
            "agents as processes (docs/kubernetes.md, running the components as processes).",
        ),
    ] = False,
) -> None:
    """Install Phalanx on Kubernetes: CRDs, RBAC, operator, scheduler and node agent."""
    if not print_yaml:
        fail(
            "nothing is applied by phalanx itself yet; print the manifests and apply them with kubectl: "
            "phalanx install --print | kubectl apply -f -",
            2,
        )
    try:
        from phalanx.services.kubernetes.install import InstallRequest, render_install
    except ModuleNotFoundError as err:  # the manifests are made with the Kubernetes adapter's types
        fail(
            f"phalanx install needs the kubernetes extra ({err.name} is not installed): pip install "
            "'phalanx[kubernetes]' (in a clone: pip install -e '.[kubernetes]')",
            2,
        )

    request = InstallRequest(
        image=image,
        crds_only=crds_only,
        default_job_scheduler=default_job_scheduler,
        kubeflow_kinds=kubeflow_kinds,
        workloads=not no_workloads,
        kubelet_config=kubelet_config,
        gpu_allocation=gpu_allocation,
        resource_slices=resource_slices,
    )
    if namespace is not None:
        request = dataclasses.replace(request, namespace=namespace)
    try:
        text = render_install(request)
    except ValueError as err:
        fail(str(err), 2)
    sys.stdout.write(text)
