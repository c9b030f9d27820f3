"""``phalanx-operator``: parse options, connect, run ``services.kubernetes.operator`` until SIGTERM or SIGINT.

Besides the options every component takes (``common.py``): ``--scheduler-name`` (``$PHALANX_SCHEDULER_NAME``),
the scheduler that binds the Pods it creates, ``--image`` (``$PHALANX_DEFAULT_IMAGE``), the image of replicas
whose job and JobType name none, ``--dataset-store`` (``$PHALANX_DATASET_STORE``), the directory Datasets are
materialised into and node agents stage from (without it Datasets are left alone and ``spec.datasets`` is not
staged), ``--dataset-mount-path``, where replicas see the cache entries they read, and what Dataset sources it
reads: local paths under ``--allow-path-under`` directories only, scripts only with ``--allow-script-sources``;
``--kubeflow-kinds`` (``$PHALANX_KUBEFLOW_KINDS``): also run PyTorchJobs, MPIJobs, TrainJobs... applied with kubectl.
Sweeps and PipelineRuns are run too (``services.kubernetes.flows``): ``--sweep-storage`` (``$PHALANX_SWEEP_STORAGE``),
the Optuna storage URL of the studies, and ``--artifact-store`` (``$PHALANX_ARTIFACT_STORE``), the pipelines'
artifact store and step cache, default to a SQLite file and a directory in ``--state-dir`` (``$PHALANX_STATE_DIR``);
``--artifact-volume-claim`` (``$PHALANX_ARTIFACT_VOLUME_CLAIM``) names the PersistentVolumeClaim that directory is
on, which every pipeline step job then mounts at the same path (docs/pipelines.md, "On Kubernetes").
``--gpu-allocation dra`` (``$PHALANX_GPU_ALLOCATION``): replicas claim their GPUs through Dynamic Resource
Allocation (``--dra-driver``, ``--dra-device-class``), so the node prepares exactly the GPUs Phalanx chose.
``--history-url`` (``$PHALANX_HISTORY_URL``): keep every job that ends or is deleted in this job history
(``postgresql://…`` or ``sqlite:///file``; docs/server.md, "History over the API"); none: no history is kept.
Exits 0 after a signal, 1 when it cannot reach the API server or fill its caches (the Deployment restarts it).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from phalanx.adapters.kubernetes import dra
from phalanx.adapters.kubernetes.api import KubeApiError
from phalanx.adapters.kubernetes.cache_report import DEFAULT_CACHE_DIR
from phalanx.adapters.kubernetes.manifests import GPU_ALLOCATION_ENV, GPU_ALLOCATIONS, KUBEFLOW_KINDS_ENV
from phalanx.adapters.kubernetes.rendering import DEFAULT_SCHEDULER_NAME
from phalanx.entrypoints.kubernetes.common import (
    StartError,
    add_common_options,
    add_dataset_store_option,
    add_job_scheduler_option,
    common_options,
    metrics_guard,
    parse,
    refuse_start,
    serve_health,
    setup,
)
from phalanx.services.kubernetes.datasets import SourcePolicy
from phalanx.services.kubernetes.flows import DEFAULT_STATE_DIR, FlowSettings
from phalanx.services.kubernetes.operations import KubeBackend
from phalanx.services.kubernetes.operator import KubeOperator
from phalanx.services.kubernetes.reconcile import OperatorSettings
from phalanx.services.metrics import state_registry

log = logging.getLogger("phalanx.operator")


def build_parser() -> argparse.ArgumentParser:
    """The operator's command line."""
    parser = argparse.ArgumentParser(
        prog="phalanx-operator",
        description="Reconcile Phalanx TrainingJobs into Pods, a headless Service and a hostfile ConfigMap.",
    )
    add_common_options(parser, "operator")
    parser.add_argument(
        "--scheduler-name",
        default=os.environ.get("PHALANX_SCHEDULER_NAME") or DEFAULT_SCHEDULER_NAME,
        help="schedulerName of the Pods it creates (default: $PHALANX_SCHEDULER_NAME, else phalanx-scheduler)",
    )
    parser.add_argument(
        "--image",
        default=os.environ.get("PHALANX_DEFAULT_IMAGE") or None,
        help="image for replicas whose job and JobType name none (default: $PHALANX_DEFAULT_IMAGE; none)",
    )
    add_job_scheduler_option(parser)
    add_dataset_store_option(parser, "without it Datasets are neither materialised nor staged")
    parser.add_argument(
        "--dataset-mount-path",
        default=DEFAULT_CACHE_DIR,
        help=f"where replicas see the dataset cache entries they read (default {DEFAULT_CACHE_DIR})",
    )
    parser.add_argument(
        "--allow-path-under",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="a directory whose files Datasets may name as spec.source.path (or file:// URL, SQLite file); "
        "repeatable; default none: local sources are refused",
    )
    parser.add_argument(
        "--allow-script-sources",
        action="store_true",
        help="run Datasets' spec.source.script commands in the operator (they run with its identity)",
    )
    parser.add_argument(
        "--kubeflow-kinds",
        action="store_true",
        default=os.environ.get(KUBEFLOW_KINDS_ENV, "").lower() == "true",
        help="run the Kubeflow kinds (PyTorchJob... MPIJob, TrainJob) applied with kubectl, on a cluster installed "
        f"with `phalanx install --kubeflow-kinds` (default: ${KUBEFLOW_KINDS_ENV} == true)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(os.environ.get("PHALANX_STATE_DIR") or DEFAULT_STATE_DIR),
        help=f"the operator's own directory, where the defaults of the two below live (default: $PHALANX_STATE_DIR, "
        f"else {DEFAULT_STATE_DIR})",
    )
    parser.add_argument(
        "--sweep-storage",
        default=os.environ.get("PHALANX_SWEEP_STORAGE") or None,
        metavar="URL",
        help="the Optuna storage URL of the sweeps' studies, e.g. postgresql+psycopg://user@host/db (default: "
        "$PHALANX_SWEEP_STORAGE, else sqlite:///STATE_DIR/sweeps.db)",
    )
    parser.add_argument(
        "--artifact-store",
        default=os.environ.get("PHALANX_ARTIFACT_STORE") or None,
        metavar="URL",
        help="the pipelines' artifact store and step cache: a directory or an fsspec URL such as s3://bucket/prefix "
        "(default: $PHALANX_ARTIFACT_STORE, else STATE_DIR/artifacts)",
    )
    parser.add_argument(
        "--artifact-volume-claim",
        default=os.environ.get("PHALANX_ARTIFACT_VOLUME_CLAIM") or None,
        metavar="NAME",
        help="the PersistentVolumeClaim the artifact store's directory is on, mounted here at that directory: every "
        "pipeline step job mounts it at the same path, so steps read their inputs and write their outputs there "
        "(default: $PHALANX_ARTIFACT_VOLUME_CLAIM; none: steps with file inputs or outputs fail, saying so)",
    )
    parser.add_argument(
        "--history-url",
        default=os.environ.get("PHALANX_HISTORY_URL") or None,
        metavar="URL",
        help="keep every job that ends or is deleted in this job history: postgresql://user@host/db or "
        "sqlite:///file.db (default: $PHALANX_HISTORY_URL; none: no history is kept)",
    )
    parser.add_argument(
        "--gpu-allocation",
        choices=GPU_ALLOCATIONS,
        default=os.environ.get(GPU_ALLOCATION_ENV) or "device-plugin",
        help="how replicas get their GPUs: dra: a ResourceClaim whose devices phalanx-scheduler allocates, so the "
        "node prepares exactly the GPUs Phalanx chose; device-plugin: nvidia.com/gpu, the node's device plugin "
        "picks them (default: $PHALANX_GPU_ALLOCATION, else device-plugin)",
    )
    parser.add_argument(
        "--dra-driver",
        default=os.environ.get("PHALANX_DRA_DRIVER") or dra.DEFAULT_DRIVER,
        help=f"with --gpu-allocation dra: the DRA driver whose devices the claims get (default: $PHALANX_DRA_DRIVER, "
        f"else {dra.DEFAULT_DRIVER})",
    )
    parser.add_argument(
        "--dra-device-class",
        default=os.environ.get("PHALANX_DRA_DEVICE_CLASS") or dra.DEFAULT_DEVICE_CLASS,
        help="with --gpu-allocation dra: the DeviceClass the claims ask for (default: $PHALANX_DRA_DEVICE_CLASS, "
        f"else {dra.DEFAULT_DEVICE_CLASS})",
    )
    parser.add_argument("--workers", type=int, default=8, help="concurrent API writes within one job's reconcile")
    parser.add_argument("--job-workers", type=int, default=8, help="jobs reconciled at once")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the operator until SIGTERM or SIGINT; the exit code."""
    args = parse(build_parser(), argv)
    options = common_options(args)
    try:
        api = setup(options, "phalanx-operator")
    except KubeApiError as error:
        logging.getLogger(__name__).error("%s", error)
        return 1
    # Every request at DEBUG would bury the operator's own lines.
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    operator = KubeOperator(
        api,
        OperatorSettings(
            scheduler_name=args.scheduler_name,
            image=args.image,
            job_scheduler=args.default_job_scheduler,
            identity=options.identity,
            workers=args.workers,
            job_workers=args.job_workers,
            dataset_store=args.dataset_store,
            dataset_mount_path=args.dataset_mount_path,
            dataset_sources=SourcePolicy(tuple(args.allow_path_under), args.allow_script_sources),
            kubeflow_kinds=args.kubeflow_kinds,
            flows=FlowSettings(
                state_dir=args.state_dir,
                sweep_storage=args.sweep_storage,
                artifact_store=args.artifact_store,
                artifact_volume_claim=args.artifact_volume_claim,
            ),
            history_url=args.history_url,
            dra_driver=args.dra_driver if args.gpu_allocation == "dra" else None,
            dra_device_class=args.dra_device_class,
        ),
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        operator.signal.set()  # end the loop's wait at once

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # The jobs, GPUs and node caches as the cluster's objects say, read when Prometheus scrapes (services.metrics).
    registry = state_registry(KubeBackend(api))
    try:
        server = serve_health(
            options.health_port, operator.ready.is_set, "operator", registry, guard=metrics_guard(options, api)
        )
    except StartError as error:
        api.close()
        return refuse_start(error)
    try:
        operator.start(stop=stop)
        log.info("operator %s running (scheduler %s)", options.identity, args.scheduler_name)
        operator.run(stop)
    except KubeApiError as error:
        log.error("operator stopped: %s", error)
        return 1
    finally:
        if server is not None:
            server.shutdown()
        api.close()
    log.info("operator %s stopped", options.identity)
    return 0


if __name__ == "__main__":
    sys.exit(main())
