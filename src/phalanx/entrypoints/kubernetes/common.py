"""What the three cluster components share: options, logging, the API connection and the health endpoint.

Options come from flags first, then from the environment the manifests in ``deploy/`` set (``POD_NAME``,
``POD_NAMESPACE``, ``PHALANX_HEALTH_PORT``, ``KUBECONFIG``), then defaults; outside a cluster, ``--kubeconfig``
(or ``$KUBECONFIG``) selects the API server. ``/healthz`` and ``/readyz`` answer on ``--health-port`` for the
kubelet's probes, and ``/metrics`` for Prometheus: the process's own metrics (CPU, memory, open files, Python's
garbage collector), which component and version it is, and whether it is ready (docs/install.md#metrics). Who may
read ``/metrics`` is ``--metrics-access``'s (``metrics_access``: RBAC by default); the probes answer anyone.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

from phalanx import __version__
from phalanx.adapters.kubernetes.api import KubeApi
from phalanx.adapters.kubernetes.manifests import HEALTH_PORT, HEALTH_PORT_ENV, JOB_SCHEDULER_ENV, METRICS_ACCESS_ENV
from phalanx.entrypoints.kubernetes.metrics_access import ACCESS_CHOICES, OPEN, RBAC, MetricsGuard, reviewed_by
from phalanx.entrypoints.masked_logging import mask_log_handlers
from phalanx.model.names import check_dns_subdomain

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

DEFAULT_NAMESPACE = "phalanx-system"
#: Each component's health port when neither ``--health-port`` nor ``$PHALANX_HEALTH_PORT`` names one: distinct,
#: so that the three run side by side as processes on one host. In a Pod the manifests set the variable (one port,
#: ``manifests.HEALTH_PORT``, as each Pod has its own network).
DEFAULT_HEALTH_PORTS = {"operator": HEALTH_PORT, "scheduler": HEALTH_PORT + 1, "node-agent": HEALTH_PORT + 2}


class StartError(Exception):
    """The component cannot start for a reason its user can fix; the message is one sentence that says how."""


@dataclass(frozen=True)
class ComponentOptions:
    """Options every component takes."""

    kubeconfig: str | None
    context: str | None
    namespace: str
    identity: str
    health_port: int
    log_level: str
    metrics_access: str = RBAC


def add_common_options(parser: argparse.ArgumentParser, component: str) -> None:
    """Add the shared flags to the parser of ``component`` (``operator``, ``scheduler`` or ``node-agent``)."""
    health_port = DEFAULT_HEALTH_PORTS[component]
    parser.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG"),
        help="kubeconfig file (default: in-cluster service account, then $KUBECONFIG)",
    )
    parser.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE", DEFAULT_NAMESPACE),
        help="the namespace Phalanx is installed in (Leases live there)",
    )
    parser.add_argument(
        "--identity",
        default=os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}",
        help="this process's name in Leases and events",
    )
    parser.add_argument(
        "--health-port",
        type=int,  # argparse converts a string default too, so a bad $PHALANX_HEALTH_PORT is a usage error
        default=os.environ.get(HEALTH_PORT_ENV, str(health_port)),
        help=f"port for /healthz, /readyz and /metrics (0: none; default: ${HEALTH_PORT_ENV}, else {health_port}; "
        f"the operator, scheduler and node agent default to {', '.join(map(str, DEFAULT_HEALTH_PORTS.values()))})",
    )
    parser.add_argument(
        "--metrics-access",
        choices=ACCESS_CHOICES,
        default=os.environ.get(METRICS_ACCESS_ENV) or RBAC,
        help=f"who may read /metrics: {RBAC} (a Kubernetes token whose account RBAC lets get /metrics, e.g. bound "
        f"to the ClusterRole phalanx-metrics-reader) or {OPEN} (anyone who reaches the port; default: "
        f"${METRICS_ACCESS_ENV}, else {RBAC})",
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get("PHALANX_LOG_LEVEL", "INFO"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
    )


def add_dataset_store_option(parser: argparse.ArgumentParser, without: str) -> None:
    """Add ``--dataset-store`` (default ``$PHALANX_DATASET_STORE``); ``without``: what happens when none is given."""
    from_env = os.environ.get("PHALANX_DATASET_STORE")
    parser.add_argument(
        "--dataset-store",
        type=Path,
        default=Path(from_env) if from_env else None,
        help="the directory Datasets are materialised into, which the operator writes and the node agents read "
        f"(a ReadWriteMany volume; default: $PHALANX_DATASET_STORE); {without}",
    )


def _scheduler_name(value: str) -> str:
    try:
        return check_dns_subdomain(value, "--default-job-scheduler")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_job_scheduler_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--default-job-scheduler`` (default ``$PHALANX_DEFAULT_JOB_SCHEDULER``; none: phalanx-scheduler)."""
    parser.add_argument(
        "--default-job-scheduler",
        type=_scheduler_name,
        default=os.environ.get(JOB_SCHEDULER_ENV) or None,
        metavar="NAME",
        help="the scheduler that places the Pods of jobs naming none in spec.scheduling.schedulerName, e.g. "
        f"default-scheduler for kube-scheduler's gang scheduling (default: ${JOB_SCHEDULER_ENV}, else "
        "phalanx-scheduler); give the operator and phalanx-scheduler the same",
    )


def common_options(args: argparse.Namespace) -> ComponentOptions:
    """The shared options out of parsed arguments."""
    return ComponentOptions(
        kubeconfig=args.kubeconfig,
        context=args.context,
        namespace=args.namespace,
        identity=args.identity,
        health_port=args.health_port,
        log_level=args.log_level,
        metrics_access=args.metrics_access,
    )


def setup(options: ComponentOptions, component: str) -> KubeApi:
    """Configure logging and connect to the API server."""
    logging.basicConfig(
        level=options.log_level,
        format=f"%(asctime)s %(levelname)s {component} %(name)s: %(message)s",
    )
    mask_log_handlers()  # the log may quote a datasource URL: never with its password
    # httpx logs every request at INFO; a scheduler makes thousands.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    return KubeApi.from_kubeconfig(options.kubeconfig, options.context)


def component_metrics(
    component: str, ready: Callable[[], bool], registry: CollectorRegistry | None = None
) -> CollectorRegistry:
    """The metrics a component serves on /metrics: its process, its name and version, and its readiness.

    Added to ``registry``, which holds the component's own (the scheduler's admissions, the operator's view of
    the jobs: ``services.metrics``); a new one when None. A registry of its own per server (not
    prometheus_client's global one), so that two servers in one process — the tests' — do not collide.
    """
    from prometheus_client import CollectorRegistry, Gauge, Info
    from prometheus_client.gc_collector import GCCollector
    from prometheus_client.platform_collector import PlatformCollector
    from prometheus_client.process_collector import ProcessCollector

    registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    Info("phalanx_component", "The Phalanx component this process is, and its version.", registry=registry).info(
        {"component": component, "version": __version__}
    )
    readiness = Gauge("phalanx_component_ready", "1 when the component answers /readyz with 200.", registry=registry)
    readiness.set_function(lambda: 1.0 if ready() else 0.0)
    return registry


def metrics_guard(options: ComponentOptions, api: KubeApi) -> MetricsGuard | None:
    """Who may read the component's /metrics, as ``--metrics-access`` says: None serves everyone (``open``)."""
    if options.metrics_access == OPEN:
        return None
    from phalanx.adapters.kubernetes.reviews import KubeReviewer

    return reviewed_by(KubeReviewer(api))


def serve_health(
    port: int,
    ready: Callable[[], bool],
    component: str = "phalanx",
    registry: CollectorRegistry | None = None,
    *,
    guard: MetricsGuard | None = None,
) -> ThreadingHTTPServer | None:
    """Answer in a daemon thread: /healthz while the process lives, /readyz when ``ready()``, and /metrics.

    /metrics serves ``registry`` (the component's own metrics) with the process's added (``component_metrics``),
    to the callers ``guard`` lets in (None: everyone); a refusal answers its status and sentence as plain text.

    Raises:
        StartError: the port cannot be listened on (taken by another process, or not ours to take).
    """
    if not port:
        return None
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    served = component_metrics(component, ready, registry)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                refused = guard(self.headers.get("Authorization")) if guard is not None else None
                if refused is not None:
                    status, message = refused
                    self.send_response(status)
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                    if status == 401:
                        self.send_header("WWW-Authenticate", 'Bearer realm="phalanx"')
                    self.end_headers()
                    self.wfile.write(f"{message}\n".encode())
                    return
                body = generate_latest(served)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.end_headers()
                self.wfile.write(body)
                return
            ok = self.path == "/healthz" or (self.path == "/readyz" and ready())
            self.send_response(200 if ok else 503)
            self.end_headers()
            self.wfile.write(b"ok\n" if ok else b"not ready\n")

        def log_message(self, format: str, *args: object) -> None:
            return

    try:
        server = ThreadingHTTPServer(("0.0.0.0", port), Handler)  # nosec B104  # in a Pod: the kubelet probes its IP
    except OSError as error:
        taken = error.errno == errno.EADDRINUSE
        raise StartError(
            f"cannot serve /healthz on port {port}: "
            + ("another process listens there (another Phalanx component?)" if taken else str(error.strerror or error))
            + "; pass --health-port with a free port, or --health-port 0 for none"
        ) from None
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server


def refuse_start(error: StartError) -> int:
    """Say why the component cannot start, in one ``error:`` line on stderr; the exit code (1)."""
    sys.stderr.write(f"error: {error}\n")
    sys.stderr.flush()
    return 1


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv`` (None: the process's arguments)."""
    return parser.parse_args(list(argv) if argv is not None else None)
