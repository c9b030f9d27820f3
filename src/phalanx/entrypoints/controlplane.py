"""``python -m phalanx.entrypoints.controlplane``: the embedded control plane as a process.

Runs until SIGTERM or SIGINT, then releases its lease so another control plane can lead at once. Schedules
under the SchedulerConfiguration recorded in the state directory (``phalanx up --scheduler-config``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from phalanx.core.scheduling.config import from_configuration
from phalanx.entrypoints.cli.preload import start_preload, stop_preload
from phalanx.entrypoints.masked_logging import mask_log_handlers
from phalanx.model.errors import SpecError
from phalanx.model.resources import parse_memory
from phalanx.services.embedded.api_http import HttpLimits
from phalanx.services.embedded.controlplane import ControlPlane, ControlPlaneConfig
from phalanx.services.embedded.daemon import recorded_scheduler_configuration
from phalanx.services.embedded.layout import StateLayout, default_state_dir


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run the control plane in the foreground."""
    parser = argparse.ArgumentParser(prog="phalanx-controlplane", description=__doc__)
    parser.add_argument("--state-dir", type=Path, default=default_state_dir())
    parser.add_argument("--inventory", type=Path, default=None, help="simulated nodes (YAML of Node objects)")
    parser.add_argument("--node-name", default=None)
    parser.add_argument("--lease-ttl", type=float, default=5.0)
    parser.add_argument("--grace-seconds", type=float, default=10.0)
    parser.add_argument(
        "--cache-size",
        default=None,
        help="each node's dataset cache, e.g. 50Gi (default: what the cache recorded; half the free disk when new)",
    )
    parser.add_argument(
        "--api-timeout",
        type=float,
        default=HttpLimits.timeout,
        help="seconds the local API waits for a request's head, then its body, before hanging up",
    )
    parser.add_argument(
        "--api-workers",
        type=int,
        default=HttpLimits.workers,
        help="threads answering local API requests; four times as many may wait for one",
    )
    parser.add_argument(
        "--gpu-check-interval",
        type=float,
        default=10.0,
        help="seconds between GPU health checks (NVML, or the simulated inventory read again)",
    )
    parser.add_argument(
        "--gpu-fault-file",
        type=Path,
        default=None,
        help="a file of GPU indices of this machine to treat as unhealthy, read at every check",
    )
    parser.add_argument(
        "--artifact-store",
        default=os.environ.get("PHALANX_ARTIFACT_STORE"),
        help="pipeline artifacts and step cache: a folder or an s3:// / gs:// URL (default: <state dir>/artifacts)",
    )
    parser.add_argument(
        "--history-url",
        default=os.environ.get("PHALANX_HISTORY_URL"),
        help="the job history's database: a postgresql:// URL (default: <state dir>/history.db)",
    )
    parser.add_argument(
        "--history-keep-days",
        type=float,
        default=os.environ.get("PHALANX_HISTORY_KEEP_DAYS"),
        help="drop history records of jobs that ended longer ago than this many days (default: keep them)",
    )
    parser.add_argument(
        "--history-keep",
        type=int,
        default=os.environ.get("PHALANX_HISTORY_KEEP"),
        help="keep only this many newest history records (default: all)",
    )
    parser.add_argument(
        "--listen",
        default=None,
        metavar="HOST:PORT",
        help="also serve the REST API (and /metrics, with the scheduler's counts) on this loopback address",
    )
    parser.add_argument("--no-auth", action="store_true", help="with --listen: serve every request without a token")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    try:
        cache_bytes = None if args.cache_size is None else parse_memory(args.cache_size)
    except ValueError as exc:
        parser.error(f"--cache-size: {exc}")
    if not 0 < args.api_timeout <= 3600 or not 1 <= args.api_workers <= 1024:
        parser.error("--api-timeout must be in (0, 3600] seconds and --api-workers in 1..1024")
    if not 0 < args.gpu_check_interval <= 86400:
        parser.error("--gpu-check-interval must be in (0, 86400] seconds")
    if args.history_keep_days is not None and not 0 < args.history_keep_days <= 36500:
        parser.error("--history-keep-days (PHALANX_HISTORY_KEEP_DAYS) must be in (0, 36500] days")
    if args.history_keep is not None and args.history_keep < 0:
        parser.error("--history-keep (PHALANX_HISTORY_KEEP) must be 0 or more records")
    listen = _listen(parser, args.listen)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    mask_log_handlers()  # the log may quote a datasource URL: never with its password
    layout = StateLayout(args.state_dir)
    try:
        policy = from_configuration(recorded_scheduler_configuration(layout))
    except SpecError as exc:
        parser.error(str(exc))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    metrics, registry = None, None
    if listen is not None:
        from prometheus_client import CollectorRegistry

        from phalanx.services.metrics import SchedulerMetrics

        registry = CollectorRegistry()  # the scheduler counts here; the REST API's /metrics serves it
        metrics = SchedulerMetrics(registry)
    plane = ControlPlane(
        ControlPlaneConfig(
            state_dir=args.state_dir,
            inventory=args.inventory,
            node_name=args.node_name,
            lease_ttl_seconds=args.lease_ttl,
            grace_seconds=args.grace_seconds,
            cache_bytes=cache_bytes,
            api_limits=HttpLimits(timeout=args.api_timeout, workers=args.api_workers, backlog=4 * args.api_workers),
            gpu_check_seconds=args.gpu_check_interval,
            gpu_fault_file=args.gpu_fault_file,
            scheduler_policy=policy,
            artifact_store=args.artifact_store,
            history_url=args.history_url,
            history_keep_days=args.history_keep_days,
            history_keep=args.history_keep,
            metrics=metrics,
        )
    )
    api = None
    if listen is not None and registry is not None:
        from phalanx.entrypoints.server.background import ServeError, start

        try:
            api = start(
                plane.store, layout, *listen, registry=registry, tokens=not args.no_auth, history_url=args.history_url
            )
        except (ServeError, ValueError) as exc:  # ValueError: --history-url's database cannot be opened
            logging.getLogger(__name__).error("%s", exc)
            return 1
        logging.getLogger(__name__).info("serving the REST API on %s", args.listen)
    preload = start_preload(layout)
    try:
        plane.run(stop)
    finally:
        if api is not None:
            api.stop()
        stop_preload(preload)
    return 1 if plane.abandoned else 0


def _listen(parser: argparse.ArgumentParser, text: str | None) -> tuple[str, int] | None:
    """``--listen`` as (host, port), refused with its sentence; None without it. Needs the server extra."""
    if text is None:
        return None
    from phalanx.entrypoints.server.serving import ListenError, listen_address

    try:
        address = listen_address(text)
    except ListenError as exc:
        parser.error(str(exc))
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        parser.error(
            "--listen needs FastAPI, uvicorn and prometheus_client, the server extra: pip install 'phalanx[server]'"
        )
    return address


if __name__ == "__main__":
    sys.exit(main())
