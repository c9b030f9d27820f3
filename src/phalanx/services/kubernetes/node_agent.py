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
     GPU), ``phalanx.dev/cpu-policy`` (the kubelet's CPU and topology manager policies, read from its
     configuration file with ``kubelet_config``: whether exclusive, NUMA-aligned cores are enforced there,
     ``core.cpu_policy``) and ``phalanx.dev/node-agent-heartbeat`` (refreshed at least every
     ``heartbeat_interval``);
   - through ``nodes/status``: ``nvidia.com/gpu`` in capacity (every GPU) and allocatable (healthy GPUs),
     unless ``manage_gpu_resource`` is off (where the NVIDIA device plugin owns that resource: kubelet
     recomputes allocatable from capacity at each of its status updates).

   With ``resource_slices`` (where no DRA driver publishes the node's GPUs: a kwok node, or a cluster without
   NVIDIA's DRA driver) it also publishes them as a ResourceSlice (``adapters.kubernetes.dra``), the devices
   phalanx-scheduler allocates the Pods' GPU claims from.

   When a GPU turns unhealthy it records a Warning Event on the Node, and a Normal one when it recovers.

The annotations and allocatable are two writes (the status is a subresource), ordered so that a reader of the
Node (``objects.node_from_object``) never sees a healthy GPU counted out of allocatable, nor GPUs without their
topology: when GPUs fail, or first appear, the annotations go first; when they recover, allocatable goes first.

Discovery is ``adapters.devices.discovery`` and what the Node should say ``adapters.kubernetes.node_report``; which
GPUs are unhealthy is ``core.gpu_health``'s decision, the same one the embedded control plane makes.

The agent compares what it wants with the Node it last read or wrote, and reads the Node again on every
heartbeat, so a change made by someone else is repaired within ``heartbeat_interval``.

Given a dataset store, the same process also keeps the node's dataset cache, on a thread of its own
(``services.kubernetes.node_cache``): it stages the data of the jobs placed on the node and publishes the
``dataset.phalanx.dev/<name>`` labels and the ``phalanx.dev/dataset-cache`` annotation, keys this module never
writes.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.devices.discovery import Discover, read_fault_file
from phalanx.adapters.kubernetes import dra
from phalanx.adapters.kubernetes.api import (
    EVENTS,
    NODES,
    RESOURCESLICES,
    ConflictError,
    KubeApi,
    KubeApiError,
    NotFoundError,
)
from phalanx.adapters.kubernetes.kubelet_config import read_kubelet_policy
from phalanx.adapters.kubernetes.node_report import (
    NUMA_NODES_LABEL,
    NodeReport,
    allocatable_gpus,
    metadata_patch,
    node_report,
    quantity,
    status_patch,
)
from phalanx.adapters.kubernetes.objects import GPU_PRODUCT_LABEL, GPU_RESOURCE, unhealthy_gpus
from phalanx.core.gpu_health import health_events
from phalanx.model.errors import SpecError
from phalanx.model.nodes import GpuInfo

log = logging.getLogger(__name__)

HEARTBEAT_ANNOTATION = "phalanx.dev/node-agent-heartbeat"
COMPONENT = "phalanx-node-agent"
EVENT_NAMESPACE = "default"  # where kubelet records Node events, and where `kubectl describe node` finds them


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
    kubelet_config: Path | None = None  # the kubelet's configuration file, for its CPU/topology manager policy
    resource_slices: bool = False  # publish the GPUs as a ResourceSlice of ``dra_driver`` (where no DRA driver does)
    dra_driver: str = dra.DEFAULT_DRIVER


@dataclass
class CycleResult:
    """What one cycle did."""

    report: NodeReport
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
        self._slice: dict[str, Any] | None = None  # the ResourceSlice as last read or written

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
        advertised = quantity(((observed.get("status") or {}).get("capacity") or {}).get(GPU_RESOURCE))
        gpus_unknown = discovered.note is not None and not discovered.node.status.gpus and bool(advertised)
        self._log_note(discovered.note, gpus_unknown)
        report = node_report(
            discovered.node,
            discovered.problems,
            faults=read_fault_file(self.settings.fault_file),
            note=discovered.note,
            gpus_unknown=gpus_unknown,
            cpu_policy=read_kubelet_policy(self.settings.kubelet_config) if self.settings.kubelet_config else None,
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
        if meta or heartbeat_due:
            meta.setdefault("annotations", {})[HEARTBEAT_ANNOTATION] = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
            observed = self.api.patch(NODES, name, {"metadata": meta})
            self._last_heartbeat = now
        if status and not status_first:
            observed = self.api.patch(NODES, name, status, subresource="status")
        self._observed = observed
        if self.settings.resource_slices and report.gpus_known:
            self._publish_slice(discovered.node.status.gpus, report.unhealthy, reread=heartbeat_due)
        if report.gpus_known:
            self._record_transitions(report, result)
        self._log_summary(report, len(discovered.node.status.cpus))
        self.ready.set()
        return result

    def _publish_slice(self, gpus: list[GpuInfo], unhealthy: set[int], *, reread: bool) -> None:
        """Make the node's ResourceSlice list its GPUs as they are now (no GPUs: no slice).

        Its pool's generation goes up on every change, as a DRA driver's does. It is read again on every
        heartbeat, so a change made by someone else is repaired.
        """
        node, driver = self.settings.node_name, self.settings.dra_driver
        name = dra.slice_name(node, driver)
        current = self._slice
        if current is None or reread:
            try:
                current = self.api.get(RESOURCESLICES, name)
            except NotFoundError:
                current = None
        if not gpus:
            if current is not None:
                with contextlib.suppress(NotFoundError):
                    self.api.delete(RESOURCESLICES, name)
                log.info("node %s: ResourceSlice %s deleted (no GPUs)", node, name)
            self._slice = None
            return
        generation = int(((current or {}).get("spec") or {}).get("pool", {}).get("generation") or 0)
        wanted = dra.render_resource_slice(node, gpus, unhealthy, driver=driver, generation=max(generation, 1))
        if current is not None and dra.slice_devices(current) == wanted["spec"]["devices"]:
            self._slice = current
            return
        if current is None:
            self._slice = self.api.create(RESOURCESLICES, wanted)
        else:
            wanted["spec"]["pool"]["generation"] = generation + 1
            wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                self._slice = self.api.replace(RESOURCESLICES, wanted)
            except ConflictError:
                self._slice = None  # changed meanwhile: read it again next cycle
                raise
        log.info("node %s: ResourceSlice %s lists %d GPU(s) of %s", node, name, len(gpus), driver)

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
        problems = {index: "; ".join(report.problems[index]) for index in result.failed}
        changes = health_events(result.failed, result.recovered, problems, report.healthy_gpus, report.gpus)
        for reason, message, warning in changes:
            (log.warning if warning else log.info)("%s", message)
            self._event(reason, message, warning=warning)

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
