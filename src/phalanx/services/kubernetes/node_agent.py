"""phalanx-node-agent: what one Kubernetes node has — GPUs, their health and topology, CPUs and NUMA — on its Node.

Every ``interval`` seconds the agent:

1. **Discovers** the node: GPUs through NVML (model, NUMA node from sysfs, NVLink peers), every CPU of the host
   with its core, socket and NUMA node from ``/sys``; or, for tests and demos, one node of a simulated
   inventory file (``adapters.devices.inventory``). Without NVML or a driver the node simply has no GPUs, and
   the reason is logged and kept in the ``phalanx.dev/gpu-discovery`` annotation; a Node that already
   advertises ``nvidia.com/gpu`` then keeps its GPU fields as they are (unknown is not none).
2. **Checks each GPU's health**: NVML queries that fail (a GPU that cannot be opened or has fallen off the bus),
   retired pages or row remappings pending a reset, failed row remapping, uncorrected ECC errors, and critical
   XID errors from NVML's event API (sticky until the agent restarts, as in the NVIDIA device plugin). On top,
   **fault injection**: a file listing GPU indices to treat as unhealthy, read again every cycle.
3. **Writes the Node** when something changed (a merge patch, so other labels are left alone):

   - labels ``nvidia.com/gpu.product``, ``nvidia.com/gpu.count`` (the values NVIDIA's GPU feature discovery
     writes) and ``phalanx.dev/numa-nodes``;
   - annotations ``phalanx.dev/gpu-topology`` (JSON: per NUMA node its GPUs and CPUs, and the NVLink pairs),
     ``phalanx.dev/unhealthy-gpus`` (``"1,3"``; ``""`` when none), ``phalanx.dev/gpu-problems`` (why, per
     GPU) and ``phalanx.dev/node-agent-heartbeat`` (refreshed at least every ``heartbeat_interval``);
   - through ``nodes/status``: ``nvidia.com/gpu`` in capacity (every GPU) and allocatable (healthy GPUs),
     unless ``manage_gpu_resource`` is off (where the NVIDIA device plugin owns that resource: kubelet
     recomputes allocatable from capacity at each of its status updates).

   When a GPU turns unhealthy it records a Warning Event on the Node, and a Normal one when it recovers.

The annotations and allocatable are two writes (the status is a subresource), ordered so that a reader of the
Node (``objects.node_from_object``) never sees a healthy GPU counted out of allocatable, nor GPUs without their
topology: when GPUs fail, or first appear, the annotations go first; when they recover, allocatable goes first.

The agent compares what it wants with the Node it last read or wrote, and reads the Node again on every
heartbeat, so a change made by someone else is repaired within ``heartbeat_interval``.

Given a dataset store, the same process also keeps the node's dataset cache, on a thread of its own
(``services.kubernetes.node_cache``): it stages the data of the jobs placed on the node and publishes the
``dataset.phalanx.dev/<name>`` labels and the ``phalanx.dev/dataset-cache`` annotation, keys this module never
writes.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.devices.inventory import GPU_DISCOVERY_ANNOTATION, load_inventory
from phalanx.adapters.devices.nvml import (
    APPLICATION_XIDS,
    NvmlUnavailableError,
    XidWatcher,
    check_health,
    describe_xid,
    discover_gpus,
)
from phalanx.adapters.devices.sysfs import discover_cpus, format_cpu_list, parse_cpu_list
from phalanx.adapters.kubernetes.api import EVENTS, NODES, KubeApi, KubeApiError
from phalanx.adapters.kubernetes.objects import (
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    GPU_TOPOLOGY_ANNOTATION,
    UNHEALTHY_GPUS_ANNOTATION,
    unhealthy_gpus,
)
from phalanx.model.errors import FieldError, SpecError
from phalanx.model.meta import ObjectMeta
from phalanx.model.nodes import Node, NodeStatus

log = logging.getLogger(__name__)

GPU_COUNT_LABEL = "nvidia.com/gpu.count"
NUMA_NODES_LABEL = "phalanx.dev/numa-nodes"
GPU_PROBLEMS_ANNOTATION = "phalanx.dev/gpu-problems"
HEARTBEAT_ANNOTATION = "phalanx.dev/node-agent-heartbeat"
COMPONENT = "phalanx-node-agent"
EVENT_NAMESPACE = "default"  # where kubelet records Node events, and where `kubectl describe node` finds them


# -- discovery ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Discovered:
    """What one discovery found.

    Attributes:
        node: CPUs and GPUs; a GPU's ``healthy`` is the discoverer's health check.
        problems: why each unhealthy GPU is unhealthy, by index (a GPU may be unhealthy without a reason here).
        note: why no GPUs were found, when that is not simply because there are none (e.g. no NVML driver).
    """

    node: Node
    problems: Mapping[int, Sequence[str]] = field(default_factory=dict)
    note: str | None = None


Discover = Callable[[], Discovered]


class InventoryDiscovery:
    """One node of a simulated inventory file, read again on every call (so a demo can edit it)."""

    def __init__(self, path: Path, node_name: str) -> None:
        self.path = path
        self.node_name = node_name

    def __call__(self) -> Discovered:
        """The inventory's node of our name, or its only node.

        Raises:
            SpecError: the file is not a valid inventory, or names several nodes and none is ours.
        """
        nodes = load_inventory(self.path)
        chosen = next((node for node in nodes if node.metadata.name == self.node_name), None)
        if chosen is None and len(nodes) == 1:
            chosen = nodes[0]
        if chosen is None:
            names = ", ".join(node.metadata.name for node in nodes) or "none"
            message = f"no node {self.node_name!r} in the inventory (it has {names}); name one so, or keep one node"
            raise SpecError([FieldError("metadata.name", message)], source=str(self.path))
        problems = {
            gpu.index: ["marked unhealthy in the simulated inventory"] for gpu in chosen.status.gpus if not gpu.healthy
        }
        return Discovered(node=chosen, problems=problems)

    def close(self) -> None:
        """Nothing to release."""


class HostDiscovery:
    """This machine: GPUs through NVML, every CPU of the host from sysfs, critical XIDs from NVML events.

    The CPUs are the host's present CPUs, not this process's affinity: the agent's own Pod is confined to a
    shared cpuset, but the Node's topology is the machine's.
    """

    def __init__(self, sys_root: Path = Path("/sys"), *, ignored_xids: frozenset[int] = APPLICATION_XIDS) -> None:
        self.sys_root = sys_root
        self.xids = XidWatcher(ignored_xids)
        self._xid_note: str | None = None

    def __call__(self) -> Discovered:
        """Discover once; XID watching starts with the first discovery that finds GPUs."""
        gpus, note = discover_gpus(self.sys_root)
        present = _read_cpu_list(self.sys_root / "devices" / "system" / "cpu" / "present")
        cpus = discover_cpus(self.sys_root, allowed=present)
        problems: dict[int, list[str]] = {}
        for gpu in gpus:
            if not gpu.healthy:
                problems[gpu.index] = self._problems(gpu.index)
        if gpus and not self.xids.started and self._xid_note is None:
            self._xid_note = self.xids.start()
            if self._xid_note:
                log.info("critical XID errors are not watched: %s", self._xid_note)
        by_index = {gpu.index: gpu for gpu in gpus}
        for index, xids in self.xids.poll().items():
            if index in by_index:
                problems.setdefault(index, []).extend(describe_xid(xid) for xid in xids)
                by_index[index] = by_index[index].model_copy(update={"healthy": False})
        node = Node(
            metadata=ObjectMeta(name="local"),
            status=NodeStatus(
                cpus=cpus, gpus=[by_index[index] for index in sorted(by_index)], source="nvml" if gpus else "sysfs"
            ),
        )
        return Discovered(node=node, problems=problems, note=note)

    @staticmethod
    def _problems(index: int) -> list[str]:
        try:
            health = check_health(index)
        except NvmlUnavailableError as err:
            return [str(err)]
        return health.problems or ["NVML queries about the GPU fail"]

    def close(self) -> None:
        """Stop watching XIDs."""
        self.xids.close()


def _read_cpu_list(path: Path) -> set[int] | None:
    try:
        return parse_cpu_list(path.read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None


def read_fault_file(path: Path | None) -> set[int]:
    """GPU indices the fault file marks unhealthy: numbers separated by commas, spaces or lines; ``#`` comments.

    A missing file (or none configured) injects no fault; a word that is not a GPU index is logged and skipped.
    """
    if path is None:
        return set()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return set()
    except OSError as err:
        log.warning("cannot read the fault file %s: %s", path, err)
        return set()
    faults: set[int] = set()
    for line in text.splitlines():
        for word in re.split(r"[\s,]+", line.split("#", 1)[0]):
            if not word:
                continue
            if word.isdigit():
                faults.add(int(word))
            else:
                log.warning("fault file %s: %r is not a GPU index; ignored", path, word)
    return faults


# -- what the Node should say (pure) --------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeReport:
    """What the agent wants on its Node.

    Attributes:
        labels: label values; None removes the label.
        annotations: annotation values; None removes the annotation (the heartbeat is not among them).
        gpus: every GPU (capacity ``nvidia.com/gpu``).
        healthy_gpus: the healthy ones (allocatable ``nvidia.com/gpu``).
        problems: why each unhealthy GPU is unhealthy, by index.
        gpus_known: False when discovery could not look for GPUs on a GPU node: GPU fields are then left alone.
    """

    labels: dict[str, str | None]
    annotations: dict[str, str | None]
    gpus: int
    healthy_gpus: int
    problems: dict[int, list[str]]
    gpus_known: bool = True

    @property
    def unhealthy(self) -> set[int]:
        """Indices of the unhealthy GPUs."""
        return set(self.problems)


def label_value(value: str) -> str:
    """A valid label value: ≤ 63 of ``[A-Za-z0-9._-]``, alphanumeric at both ends (``A100 SXM4`` → ``A100-SXM4``)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", value)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned)


def gpu_topology(node: Node) -> dict[str, Any]:
    """The ``phalanx.dev/gpu-topology`` document of a discovered node.

    ``{"numaNodes": [{"id": 0, "gpus": [0, 1], "cpus": "0-15,32-47"}, ...], "nvlink": {"type": "NV12",
    "pairs": [[0, 1], ...], "links": [12, ...]}, "source": "nvml"}``: NUMA nodes with their GPUs and CPUs (the
    kernel's list format), and every GPU pair joined by NVLink with its link count (``links``, parallel to
    ``pairs``); ``type`` is ``NV<n>`` when every pair has ``n`` links, as ``nvidia-smi topo -m`` prints it,
    else ``NV``. ``source`` says where it was found (``simulated`` for an inventory).
    """
    gpus = sorted(node.status.gpus, key=lambda gpu: gpu.index)
    cpus = node.status.cpus
    numa_ids = sorted({cpu.numa for cpu in cpus} | {gpu.numa for gpu in gpus}) or [0]
    numa_nodes = [
        {
            "id": numa,
            "gpus": [gpu.index for gpu in gpus if gpu.numa == numa],
            "cpus": format_cpu_list(cpu.id for cpu in cpus if cpu.numa == numa),
        }
        for numa in numa_ids
    ]
    pairs: list[list[int]] = []
    links: list[int] = []
    for position, gpu in enumerate(gpus):
        for peer in gpus[position + 1 :]:
            count = max(gpu.nvlinks.get(peer.index, 0), peer.nvlinks.get(gpu.index, 0))
            if count > 0:
                pairs.append([gpu.index, peer.index])
                links.append(count)
    nvlink: dict[str, Any] = {"pairs": pairs}
    if pairs:
        nvlink = {"type": f"NV{links[0]}" if len(set(links)) == 1 else "NV", "pairs": pairs, "links": links}
    return {"numaNodes": numa_nodes, "nvlink": nvlink, "source": node.status.source}


def gpu_product(node: Node) -> str | None:
    """The label value of the node's GPU model: the lowest-indexed GPU's known model (None without GPUs)."""
    models = [gpu.model for gpu in sorted(node.status.gpus, key=lambda gpu: gpu.index) if gpu.model != "unknown"]
    if not models:
        return "unknown" if node.status.gpus else None
    return label_value(models[0]) or "unknown"


def node_report(
    node: Node,
    problems: Mapping[int, Sequence[str]],
    *,
    faults: AbstractSet[int] = frozenset(),
    note: str | None = None,
    gpus_unknown: bool = False,
) -> NodeReport:
    """What the Node should say about a discovered node.

    A GPU is unhealthy when discovery says so (``healthy`` false or a problem listed) or it is in ``faults``
    (the fault file); indices that name no GPU are ignored.

    Args:
        node: the discovered node.
        problems: the discoverer's reasons, by GPU index.
        faults: GPU indices injected as unhealthy.
        note: why discovery found no GPUs, kept in ``phalanx.dev/gpu-discovery``.
        gpus_unknown: discovery could not look for GPUs (``note`` says why) on a node that advertises some: the
            report then leaves every GPU label, annotation and resource as it is, and says only the NUMA count
            and the note. A broken driver or a container without the NVIDIA runtime must not erase a GPU node.
    """
    gpus = sorted(node.status.gpus, key=lambda gpu: gpu.index)
    reasons: dict[int, list[str]] = {}
    for gpu in gpus:
        found = list(problems.get(gpu.index, ()))
        if not gpu.healthy and not found:
            found = ["unhealthy"]
        if gpu.index in faults:
            found.append("listed in the fault file")
        if found:
            reasons[gpu.index] = found
    numa_count = len({cpu.numa for cpu in node.status.cpus} | {gpu.numa for gpu in gpus}) or 1
    if gpus_unknown:
        return NodeReport(
            labels={NUMA_NODES_LABEL: str(numa_count)},
            annotations={GPU_DISCOVERY_ANNOTATION: note},
            gpus=0,
            healthy_gpus=0,
            problems={},
            gpus_known=False,
        )
    labels: dict[str, str | None] = {
        GPU_PRODUCT_LABEL: gpu_product(node),
        GPU_COUNT_LABEL: str(len(gpus)) if gpus else None,
        NUMA_NODES_LABEL: str(numa_count),
    }
    annotations: dict[str, str | None] = {
        GPU_TOPOLOGY_ANNOTATION: json.dumps(gpu_topology(node), separators=(",", ":")),
        UNHEALTHY_GPUS_ANNOTATION: ",".join(str(index) for index in sorted(reasons)),
        GPU_PROBLEMS_ANNOTATION: json.dumps(
            {str(index): "; ".join(reasons[index]) for index in sorted(reasons)}, separators=(",", ":")
        ),
        GPU_DISCOVERY_ANNOTATION: note if not gpus else None,
    }
    return NodeReport(
        labels=labels, annotations=annotations, gpus=len(gpus), healthy_gpus=len(gpus) - len(reasons), problems=reasons
    )


def metadata_patch(observed: Mapping[str, Any], report: NodeReport) -> dict[str, Any]:
    """The labels and annotations that differ from the observed Node, as a merge patch's ``metadata`` (or {})."""
    meta = observed.get("metadata") or {}
    patch: dict[str, Any] = {}
    for key, wanted in (("labels", report.labels), ("annotations", report.annotations)):
        current = meta.get(key) or {}
        changes = {
            name: value
            for name, value in wanted.items()
            if (value is None and name in current) or (value is not None and current.get(name) != value)
        }
        if changes:
            patch[key] = changes
    return patch


def _quantity(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def status_patch(observed: Mapping[str, Any], report: NodeReport) -> dict[str, Any]:
    """The ``nodes/status`` merge patch that sets ``nvidia.com/gpu`` capacity and allocatable, or {} when they hold.

    A node without GPUs that never advertised any is left alone.
    """
    if not report.gpus_known:
        return {}
    status = observed.get("status") or {}
    capacity = _quantity((status.get("capacity") or {}).get(GPU_RESOURCE))
    allocatable = _quantity((status.get("allocatable") or {}).get(GPU_RESOURCE))
    if report.gpus == 0 and capacity is None and allocatable is None:
        return {}
    if capacity == report.gpus and allocatable == report.healthy_gpus:
        return {}
    return {
        "status": {
            "capacity": {GPU_RESOURCE: str(report.gpus)},
            "allocatable": {GPU_RESOURCE: str(report.healthy_gpus)},
        }
    }


def allocatable_gpus(observed: Mapping[str, Any]) -> int | None:
    """The Node's allocatable ``nvidia.com/gpu``, if it has any."""
    return _quantity(((observed.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE))


# -- the agent ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentSettings:
    """Which node, how often, and whether the agent owns the ``nvidia.com/gpu`` resource."""

    node_name: str
    identity: str = COMPONENT
    interval_s: float = 10.0
    heartbeat_interval_s: float = 60.0
    fault_file: Path | None = None
    manage_gpu_resource: bool = True


@dataclass
class CycleResult:
    """What one cycle did."""

    report: NodeReport
    patched_metadata: bool = False
    patched_status: bool = False
    failed: list[int] = field(default_factory=list)
    recovered: list[int] = field(default_factory=list)


class NodeAgent:
    """Discovers, checks and writes one Node, every ``interval`` seconds."""

    def __init__(self, api: KubeApi, settings: AgentSettings, discover: Discover, clock: Clock | None = None) -> None:
        self.api = api
        self.settings = settings
        self.discover = discover
        self.clock = clock or SystemClock()
        self.ready = threading.Event()
        self._observed: dict[str, Any] | None = None
        self._last_heartbeat: float | None = None
        self._unhealthy: set[int] | None = None  # as last written (or found on the Node at start)
        self._note: tuple[str | None, bool] = (None, False)  # the discovery note last logged
        self._summary = ""

    def cycle(self) -> CycleResult:
        """Discover, check health and faults, and write what changed.

        Raises:
            KubeApiError: the Node could not be read or written.
            SpecError: the simulated inventory is invalid.
        """
        discovered = self.discover()
        name = self.settings.node_name
        now = self.clock.monotonic()
        heartbeat_due = self._last_heartbeat is None or now - self._last_heartbeat >= self.settings.heartbeat_interval_s
        observed = self._observed
        if observed is None or heartbeat_due:
            observed = self.api.get(NODES, name)
        advertised = _quantity(((observed.get("status") or {}).get("capacity") or {}).get(GPU_RESOURCE))
        gpus_unknown = discovered.note is not None and not discovered.node.status.gpus and bool(advertised)
        self._log_note(discovered.note, gpus_unknown)
        report = node_report(
            discovered.node,
            discovered.problems,
            faults=read_fault_file(self.settings.fault_file),
            note=discovered.note,
            gpus_unknown=gpus_unknown,
        )
        if self._unhealthy is None:
            self._unhealthy = unhealthy_gpus(observed)
        result = CycleResult(report=report)
        meta = metadata_patch(observed, report)
        status = status_patch(observed, report) if self.settings.manage_gpu_resource else {}
        current = allocatable_gpus(observed)
        # Recovering GPUs reach allocatable before the annotation forgets them; failing ones the other way round;
        # new GPUs appear with their topology already written.
        status_first = bool(status) and current is not None and report.healthy_gpus >= current
        if status and status_first:
            observed = self.api.patch(NODES, name, status, subresource="status")
            result.patched_status = True
        if meta or heartbeat_due:
            meta.setdefault("annotations", {})[HEARTBEAT_ANNOTATION] = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
            observed = self.api.patch(NODES, name, {"metadata": meta})
            self._last_heartbeat = now
            result.patched_metadata = True
        if status and not status_first:
            observed = self.api.patch(NODES, name, status, subresource="status")
            result.patched_status = True
        self._observed = observed
        if report.gpus_known:
            self._record_transitions(report, result)
        self._log_summary(report, len(discovered.node.status.cpus))
        self.ready.set()
        return result

    def _log_note(self, note: str | None, gpus_unknown: bool) -> None:
        if (note, gpus_unknown) == self._note:
            return
        self._note = (note, gpus_unknown)
        if note and gpus_unknown:
            log.warning(
                "GPUs cannot be checked (%s); node %s advertises %s, which is left as it is",
                note,
                self.settings.node_name,
                GPU_RESOURCE,
            )
        elif note:
            log.warning("no GPUs discovered (%s); reporting the node's CPUs and NUMA nodes only", note)

    def _log_summary(self, report: NodeReport, cpus: int) -> None:
        gpus = (
            f"{report.gpus} GPU(s) ({report.labels.get(GPU_PRODUCT_LABEL) or 'none'}), {report.healthy_gpus} healthy"
            + (f", unhealthy {sorted(report.unhealthy)}" if report.unhealthy else "")
            if report.gpus_known
            else "GPUs unknown"
        )
        summary = f"{gpus}; {report.labels.get(NUMA_NODES_LABEL)} NUMA node(s), {cpus} CPU(s)"
        if summary != self._summary:
            self._summary = summary
            log.info("node %s: %s", self.settings.node_name, summary)

    def _record_transitions(self, report: NodeReport, result: CycleResult) -> None:
        before = self._unhealthy or set()
        after = report.unhealthy
        self._unhealthy = set(after)
        result.failed = sorted(after - before)
        result.recovered = sorted(before - after)
        left = f"{report.healthy_gpus} of {report.gpus} GPU(s) healthy"
        for index in result.failed:
            why = "; ".join(report.problems[index])
            log.warning("GPU %d is unhealthy: %s", index, why)
            self._event("GPUUnhealthy", f"GPU {index} is unhealthy: {why}; {left}", warning=True)
        for index in result.recovered:
            log.info("GPU %d is healthy again", index)
            self._event("GPUHealthy", f"GPU {index} is healthy again; {left}")

    def _event(self, reason: str, message: str, *, warning: bool = False) -> None:
        name = self.settings.node_name
        now = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": EVENT_NAMESPACE},
            # As kubelet refers to its Node (uid = the node's name), so that `kubectl describe node` lists it.
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": name, "uid": name},
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT, "host": name},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": COMPONENT,
            "reportingInstance": self.settings.identity,
        }
        try:
            self.api.create(EVENTS, body, EVENT_NAMESPACE)
        except KubeApiError as error:
            log.warning("event %s on node %s not recorded: %s", reason, name, error)

    def run(self, stop: threading.Event) -> None:
        """Run cycles every ``interval`` until ``stop`` is set; a failed cycle is logged and retried."""
        while not stop.is_set():
            try:
                self.cycle()
            except (KubeApiError, SpecError) as error:
                log.error("node %s not updated: %s", self.settings.node_name, error)
                self._observed = None  # read the Node again next time
            except Exception:
                # A node agent outlives a bad check: the next one may succeed, and a crash loop reports nothing.
                log.exception("node %s not updated: the check failed", self.settings.node_name)
                self._observed = None
            stop.wait(self.settings.interval_s)
