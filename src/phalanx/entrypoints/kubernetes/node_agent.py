"""``phalanx-node-agent``: keep one Node's GPUs, GPU health and CPU/NUMA topology current, until SIGTERM.

Options beyond the common ones: ``--node-name`` (``$NODE_NAME``, from the downward API in the DaemonSet),
``--inventory`` (a simulated inventory file instead of NVML and ``/sys``), ``--fault-file``
(``$PHALANX_FAULT_FILE``: GPU indices to treat as unhealthy), ``--interval``, ``--heartbeat-interval``,
``--no-gpu-resource`` (leave ``nvidia.com/gpu`` to the NVIDIA device plugin), ``--ignored-xids``,
``--kubelet-config`` (``$PHALANX_KUBELET_CONFIG``: the kubelet's configuration file, whose CPU and topology manager
policies are reported on the Node), ``--resource-slices`` (``$PHALANX_RESOURCE_SLICES``: publish the GPUs as a
ResourceSlice of ``--dra-driver`` for ``--gpu-allocation dra``, where no DRA driver does) and ``--once``.

With ``--dataset-store`` (``$PHALANX_DATASET_STORE``: the volume the operator materialises Datasets into) the
agent also keeps the node's dataset cache (``services.kubernetes.node_cache``): ``--cache-dir`` (default
``/var/cache/phalanx/datasets``, a hostPath), ``--cache-host-dir`` (that directory on the host, when the
container mounts it elsewhere) and ``--cache-size`` (e.g. ``50Gi``; default: what the cache recorded, half the
free disk when new), ``--sample-dir`` and ``--sample-host-dir`` (the replicas' in-job sample caches, default
``/var/cache/phalanx/samples``). ``--once`` checks GPUs only.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Sequence
from pathlib import Path

from phalanx.adapters.datacache import CacheError
from phalanx.adapters.devices.discovery import HostDiscovery, InventoryDiscovery
from phalanx.adapters.devices.nvml import APPLICATION_XIDS
from phalanx.adapters.kubernetes import dra
from phalanx.adapters.kubernetes.api import KubeApiError
from phalanx.adapters.kubernetes.cache_report import DEFAULT_CACHE_DIR
from phalanx.adapters.kubernetes.manifests import RESOURCE_SLICES_ENV
from phalanx.adapters.kubernetes.rendering import SAMPLE_MOUNT_PATH
from phalanx.entrypoints.kubernetes.common import (
    StartError,
    add_common_options,
    add_dataset_store_option,
    common_options,
    metrics_guard,
    parse,
    refuse_start,
    serve_health,
    setup,
)
from phalanx.model.errors import SpecError
from phalanx.model.resources import QuantityError, parse_memory
from phalanx.services.kubernetes.node_agent import AgentSettings, NodeAgent
from phalanx.services.kubernetes.node_cache import CacheSettings, NodeCacheKeeper

log = logging.getLogger("phalanx.node_agent")


def _xids(text: str) -> frozenset[int]:
    try:
        return frozenset(int(part) for part in text.replace(",", " ").split())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of XID numbers: {text!r}") from None


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0: {text}")
    return value


def _size(text: str) -> int:
    try:
        return parse_memory(text)
    except (QuantityError, ValueError) as error:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} ({error}); write e.g. 50Gi or 500Mi") from None


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="phalanx-node-agent",
        description="Report this node's GPUs, their health and its CPU/NUMA topology on its Kubernetes Node.",
    )
    add_common_options(parser, "node-agent")
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME"),
        help="the Node to write (default: $NODE_NAME; required)",
    )
    parser.add_argument(
        "--inventory",
        type=Path,
        default=None,
        help="report a node of this simulated inventory file instead of discovering NVML and /sys",
    )
    parser.add_argument(
        "--fault-file",
        type=Path,
        default=Path(os.environ["PHALANX_FAULT_FILE"]) if os.environ.get("PHALANX_FAULT_FILE") else None,
        help="a file of GPU indices to treat as unhealthy, read every cycle (default: $PHALANX_FAULT_FILE)",
    )
    parser.add_argument("--interval", type=_positive, default=10.0, help="seconds between checks (default 10)")
    parser.add_argument(
        "--heartbeat-interval",
        type=_positive,
        default=60.0,
        help="seconds between heartbeat annotations when nothing changes (default 60)",
    )
    parser.add_argument(
        "--gpu-resource",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write nvidia.com/gpu capacity and allocatable (--no-gpu-resource: the NVIDIA device plugin does)",
    )
    parser.add_argument(
        "--ignored-xids",
        type=_xids,
        default=APPLICATION_XIDS,
        help=f"XID errors that leave a GPU healthy (default: {','.join(map(str, sorted(APPLICATION_XIDS)))})",
    )
    parser.add_argument(
        "--kubelet-config",
        type=Path,
        default=Path(os.environ["PHALANX_KUBELET_CONFIG"]) if os.environ.get("PHALANX_KUBELET_CONFIG") else None,
        help="the kubelet's configuration file (e.g. /var/lib/kubelet/config.yaml, a read-only hostPath): its "
        "cpuManagerPolicy and topologyManagerPolicy are reported on the Node, and jobs with topology: required go "
        "only where they align cores (default: $PHALANX_KUBELET_CONFIG; none: not reported, not aligned)",
    )
    parser.add_argument(
        "--resource-slices",
        action=argparse.BooleanOptionalAction,
        default=os.environ.get(RESOURCE_SLICES_ENV, "").lower() == "true",
        help="publish the node's GPUs as a ResourceSlice of --dra-driver, for phalanx-operator --gpu-allocation dra "
        "where no DRA driver publishes them (default: $PHALANX_RESOURCE_SLICES == true)",
    )
    parser.add_argument(
        "--dra-driver",
        default=os.environ.get("PHALANX_DRA_DRIVER") or dra.DEFAULT_DRIVER,
        help=f"the driver its ResourceSlice names (default: $PHALANX_DRA_DRIVER, else {dra.DEFAULT_DRIVER})",
    )
    parser.add_argument("--once", action="store_true", help="run one check, write the Node and exit")
    add_dataset_store_option(parser, "without it the agent keeps no dataset cache")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(DEFAULT_CACHE_DIR),
        help=f"the node's dataset cache directory, a hostPath (default {DEFAULT_CACHE_DIR})",
    )
    parser.add_argument(
        "--cache-host-dir",
        default=None,
        help="the cache directory's path on the host, which Pods mount entries from (default: --cache-dir)",
    )
    parser.add_argument(
        "--sample-dir",
        type=Path,
        default=Path(SAMPLE_MOUNT_PATH),
        help="where the in-job sample caches of the node's replicas live, one directory per namespace, a hostPath "
        f"(default {SAMPLE_MOUNT_PATH})",
    )
    parser.add_argument(
        "--sample-host-dir",
        default=None,
        help="the sample directory's path on the host, which Pods mount (default: --sample-dir)",
    )
    parser.add_argument(
        "--cache-size",
        type=_size,
        default=None,
        help="the cache's size limit, e.g. 50Gi (default: what it recorded; half the free disk when new)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run until SIGTERM or SIGINT (or one cycle with ``--once``); exit 0 when done, 1 when the API is unusable.

    Exits 2 for a bad command line, an invalid inventory, or a dataset cache directory it cannot use.
    """
    parser = build_parser()
    args = parse(parser, argv)
    if not args.node_name:
        parser.error("--node-name (or $NODE_NAME) is required")
    options = common_options(args)
    try:
        api = setup(options, "node-agent")
    except KubeApiError as error:
        logging.getLogger(__name__).error("%s", error)
        return 1
    discover: InventoryDiscovery | HostDiscovery
    if args.inventory is not None:
        discover = InventoryDiscovery(args.inventory, args.node_name)
        try:
            discover()
        except SpecError as error:
            log.error("%s", error)
            api.close()
            return 2
        log.info("reporting node %s from the simulated inventory %s", args.node_name, args.inventory)
    else:
        discover = HostDiscovery(ignored_xids=args.ignored_xids)
    settings = AgentSettings(
        node_name=args.node_name,
        identity=options.identity,
        interval_s=args.interval,
        heartbeat_interval_s=args.heartbeat_interval,
        fault_file=args.fault_file,
        manage_gpu_resource=args.gpu_resource,
        kubelet_config=args.kubelet_config,
        resource_slices=args.resource_slices,
        dra_driver=args.dra_driver,
    )
    agent = NodeAgent(api, settings, discover)
    keeper: NodeCacheKeeper | None = None
    try:
        if args.once:
            try:
                agent.cycle()
            except (KubeApiError, SpecError) as error:
                log.error("node %s not updated: %s", args.node_name, error)
                return 1
            return 0
        stop = threading.Event()
        if args.dataset_store is not None:
            try:
                keeper = NodeCacheKeeper(
                    api,
                    CacheSettings(
                        node_name=args.node_name,
                        cache_dir=args.cache_dir,
                        dataset_store=args.dataset_store,
                        capacity=args.cache_size,
                        host_dir=args.cache_host_dir,
                        sample_dir=args.sample_dir,
                        sample_host_dir=args.sample_host_dir,
                        identity=options.identity,
                    ),
                )
            except (OSError, CacheError) as error:
                log.error("cannot keep the dataset cache in %s: %s", args.cache_dir, error)
                return 2
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: _stop(stop, keeper))
        ready = agent.ready.is_set if keeper is None else lambda: agent.ready.is_set() and keeper.ready.is_set()
        try:
            serve_health(options.health_port, ready, "node-agent", guard=metrics_guard(options, api))
        except StartError as error:
            return refuse_start(error)
        log.info(
            "node agent %s for node %s: every %.1fs%s",
            options.identity,
            args.node_name,
            args.interval,
            f", fault file {args.fault_file}" if args.fault_file else "",
        )
        cache_thread = None
        if keeper is not None:
            keeper.start()
            cache_thread = threading.Thread(target=keeper.run, args=(stop,), name="dataset-cache", daemon=True)
            cache_thread.start()
            log.info(
                "keeping the dataset cache %s (store %s) for node %s",
                args.cache_dir,
                args.dataset_store,
                args.node_name,
            )
        agent.run(stop)
        if cache_thread is not None:
            cache_thread.join(10)
        return 0
    finally:
        discover.close()
        api.close()


def _stop(stop: threading.Event, keeper: NodeCacheKeeper | None) -> None:
    stop.set()
    if keeper is not None:
        keeper.signal.set()


if __name__ == "__main__":
    raise SystemExit(main())
