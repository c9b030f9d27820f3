"""The embedded control plane's GPU health watch: what the node agent does on Kubernetes, for the local nodes.

Every ``interval_s`` it looks at the GPUs again and writes any change of health onto the Node objects in the
store (``healthy`` and ``problem`` of each GPU), with a Warning event ``GPUUnhealthy`` on the node when a GPU
fails and a Normal ``GPUHealthy`` when it recovers:

- on a **simulated inventory** it reads the file again (once per check, for every node), so a
  GPU marked ``healthy: false`` there while the control plane runs turns unhealthy here, and recovers when the
  mark is removed; only health is taken from the file (the nodes' hardware is what was registered at start);
- on **this machine** it asks NVML (``HostDiscovery``: failing queries, pending retired pages or row
  remappings, uncorrected ECC errors, critical XIDs), plus the GPU indices of a fault file, if one is set (on
  an inventory the fault file is ignored, with a warning: edit the inventory instead).

What health means is decided in ``core.gpu_health``: the scheduler places nothing on an unhealthy GPU, and the
controller's planner stops a replica placed on one and restarts its job, placed afresh, per its ``runPolicy``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.devices.discovery import (
    Discover,
    Discovered,
    HostDiscovery,
    read_fault_file,
    simulated_problems,
)
from phalanx.adapters.devices.inventory import load_inventory
from phalanx.adapters.store import SqliteStore
from phalanx.core.gpu_health import gpu_health_changes, health_events, unhealthy_reasons, with_health
from phalanx.model.errors import SpecError
from phalanx.model.events import Event
from phalanx.model.nodes import Node

log = logging.getLogger(__name__)


class GpuWatch:
    """Checks the GPUs of the registered nodes every ``interval_s`` and records changes of health."""

    def __init__(
        self,
        store: SqliteStore,
        nodes: Mapping[str, Node],
        *,
        inventory: Path | None = None,
        fault_file: Path | None = None,
        interval_s: float = 10.0,
        clock: Clock | None = None,
        discover: Mapping[str, Discover] | None = None,
    ) -> None:
        self.store = store
        self.interval_s = interval_s
        self.fault_file = fault_file
        self.clock = clock or SystemClock()
        self._next = self.clock.monotonic()
        self._failing: str | None = None  # the discovery error last logged
        self._closers: list[Callable[[], None]] = []
        with_gpus = [name for name, node in nodes.items() if node.status.gpus]
        self.discover: Callable[[], dict[str, Discovered]] | None = None
        if discover is not None:
            self.discover = lambda: {name: found() for name, found in discover.items()}
        elif inventory is not None and with_gpus:
            if fault_file is not None:
                log.warning("the GPU fault file is for this machine's GPUs; with an inventory, edit the inventory")
                self.fault_file = None
            self.discover = lambda: _inventory_health(inventory, set(with_gpus))
        elif with_gpus:
            # A node without GPUs has nothing to watch; NVML is never started for it.
            host = HostDiscovery()
            self._closers.append(host.close)
            self.discover = lambda: {with_gpus[0]: host()}

    def due_in(self) -> float | None:
        """Seconds until the next check (None when no node has GPUs to watch)."""
        if self.discover is None:
            return None
        return max(0.0, self._next - self.clock.monotonic())

    def sync(self) -> bool:
        """Check health if a check is due; True when a node's GPU health changed (and was written)."""
        if self.discover is None or self.clock.monotonic() < self._next:
            return False
        self._next = self.clock.monotonic() + self.interval_s
        try:
            discovered = self.discover()
        except SpecError as err:  # an inventory being edited: keep what is known, say why once
            if str(err) != self._failing:
                self._failing = str(err)
                log.warning("GPU health not checked: %s", err)
            return False
        self._failing = None
        faults = read_fault_file(self.fault_file)
        changed = False
        for current in self.store.list(Node):
            found = discovered.get(current.metadata.name)
            if found is None:
                continue
            known = {gpu.index for gpu in current.status.gpus}
            reasons = unhealthy_reasons(found.node, found.problems, faults)
            updated = with_health(current, {index: why for index, why in reasons.items() if index in known})
            if updated.status.gpus == current.status.gpus:
                continue
            failed, recovered = gpu_health_changes(current, updated)
            self.store.update_status(updated)
            changed = True
            self._record(updated, failed, recovered)
        return changed

    def _record(self, node: Node, failed: list[int], recovered: list[int]) -> None:
        healthy = sum(gpu.healthy for gpu in node.status.gpus)
        problems = {gpu.index: gpu.problem for gpu in node.status.gpus}
        for reason, message, warning in health_events(failed, recovered, problems, healthy, len(node.status.gpus)):
            (log.warning if warning else log.info)("node %s: %s", node.metadata.name, message)
            self._event(node, reason, message, warning=warning)

    def _event(self, node: Node, reason: str, message: str, *, warning: bool = False) -> None:
        self.store.record_event(Event.about("Node", node.metadata, reason, message, self.clock.now(), warning=warning))

    def close(self) -> None:
        """Stop watching XIDs."""
        for close in self._closers:
            close()


def _inventory_health(path: Path, names: set[str]) -> dict[str, Discovered]:
    """The nodes ``names`` of the inventory, read once, with why their GPUs marked unhealthy are.

    Raises:
        SpecError: the file is not a valid inventory (an edit in progress, say).
    """
    return {
        node.metadata.name: Discovered(node=node, problems=simulated_problems(node))
        for node in load_inventory(path)
        if node.metadata.name in names
    }
