"""``phalanx-scheduler``: run the Phalanx scheduler against a cluster until SIGTERM.

Options beyond the common ones: ``--scheduler-name`` (the ``schedulerName`` of the Pods it binds),
``--lease-name`` and ``--lease-duration`` (leader election; one scheduler leads, others stand by), ``--config``
(a SchedulerConfiguration file, docs/scheduling.md; the install mounts it from a ConfigMap),
``--default-job-scheduler`` (jobs naming no scheduler are left to it, not admitted here; as the operator's).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Sequence
from pathlib import Path

from phalanx.adapters.kubernetes.api import KubeApiError
from phalanx.core.scheduling.config import DEFAULT_POLICY, from_configuration
from phalanx.entrypoints.kubernetes.common import (
    StartError,
    add_common_options,
    add_job_scheduler_option,
    common_options,
    metrics_guard,
    parse,
    refuse_start,
    serve_health,
    setup,
)
from phalanx.model.errors import SpecError
from phalanx.model.loading import read_scheduler_configuration
from phalanx.services.kubernetes.scheduler import KubeScheduler, SchedulerSettings

log = logging.getLogger("phalanx.scheduler")


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(prog="phalanx-scheduler", description="Gang-schedule Phalanx jobs on Kubernetes.")
    add_common_options(parser, "scheduler")
    parser.add_argument(
        "--scheduler-name",
        default=os.environ.get("PHALANX_SCHEDULER_NAME", "phalanx-scheduler"),
        help="bind Pods whose spec.schedulerName is this",
    )
    parser.add_argument(
        "--lease-name",
        default=os.environ.get("PHALANX_LEASE_NAME", "phalanx-scheduler"),
        help="the Lease (in --namespace) whose holder schedules",
    )
    parser.add_argument(
        "--lease-duration",
        type=float,
        default=15.0,
        help="seconds a silent leader keeps the Lease before another may take it",
    )
    add_job_scheduler_option(parser)
    parser.add_argument("--workers", type=int, default=8, help="concurrent API writes (admissions, bindings)")
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="a SchedulerConfiguration file: queue order, queueing strategy, placement, preemption, time slicing "
        "(default: every field's default)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run until SIGTERM or SIGINT; exit 0 on a clean stop, 1 when the API is unusable."""
    parser = build_parser()
    args = parse(parser, argv)
    options = common_options(args)
    policy = DEFAULT_POLICY
    if args.config is not None:
        try:
            policy = from_configuration(read_scheduler_configuration(args.config))
        except SpecError as error:
            parser.error(f"--config: {error}")  # exits 2, before anything touches the cluster
    try:
        api = setup(options, "scheduler")
    except KubeApiError as error:
        logging.getLogger(__name__).error("%s", error)
        return 1
    settings = SchedulerSettings(
        scheduler_name=args.scheduler_name,
        namespace=options.namespace,
        lease_name=args.lease_name,
        identity=options.identity,
        lease_duration_s=args.lease_duration,
        renew_interval_s=max(0.2, args.lease_duration / 5),
        workers=args.workers,
        policy=policy,
        job_scheduler=args.default_job_scheduler,
    )
    from prometheus_client import CollectorRegistry

    from phalanx.services.metrics import SchedulerMetrics

    registry = CollectorRegistry(auto_describe=True)
    scheduler = KubeScheduler(api, settings, metrics=SchedulerMetrics(registry))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        serve_health(
            options.health_port, scheduler.ready.is_set, "scheduler", registry, guard=metrics_guard(options, api)
        )
    except StartError as error:
        api.close()
        return refuse_start(error)
    try:
        scheduler.start()
    except KubeApiError as error:
        log.error("cannot start: %s", error)
        return 1
    log.info("scheduler %s ready (scheduler name %s)", options.identity, settings.scheduler_name)
    scheduler.run(stop)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
