"""Where GPU health is observed, for both backends: a simulated inventory, this machine's NVML, a fault file.

The embedded control plane (``services.embedded.gpu_watch``) and the Kubernetes node agent
(``services.kubernetes.node_agent``) discover through these the same way and hand what they found to
``core.gpu_health``, which decides what is unhealthy and why:

- ``InventoryDiscovery``: one node of a simulated inventory file, read again on every call, so editing the file
  (``healthy: false`` on a GPU, with an optional ``problem``) marks a GPU unhealthy at run time;
- ``HostDiscovery``: this machine's GPUs through NVML (failing queries, retired pages, row remapping,
  uncorrected ECC errors) and critical XID errors from NVML's event API, sticky until the process restarts;
- ``read_fault_file``: GPU indices a file marks unhealthy (fault injection on real hardware).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from phalanx.adapters.devices.inventory import load_inventory
from phalanx.adapters.devices.nvml import (
    APPLICATION_XIDS,
    NvmlUnavailableError,
    XidWatcher,
    check_health,
    describe_xid,
    discover_gpus,
)
from phalanx.adapters.devices.sysfs import discover_cpus, parse_cpu_list
from phalanx.model.errors import FieldError, SpecError
from phalanx.model.meta import ObjectMeta
from phalanx.model.nodes import Node, NodeStatus

log = logging.getLogger(__name__)

SIMULATED_FAULT = "marked unhealthy in the simulated inventory"


def simulated_problems(node: Node) -> dict[int, list[str]]:
    """Why each GPU an inventory marks ``healthy: false`` is unhealthy: its ``problem``, or that it is marked."""
    return {gpu.index: [gpu.problem or SIMULATED_FAULT] for gpu in node.status.gpus if not gpu.healthy}


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
        self._told = False  # whether the fallback to the file's only node was logged

    def __call__(self) -> Discovered:
        """The inventory's node of our name, or its only node.

        Raises:
            SpecError: the file is not a valid inventory, or names several nodes and none is ours.
        """
        nodes = load_inventory(self.path)
        chosen = next((node for node in nodes if node.metadata.name == self.node_name), None)
        if chosen is None and len(nodes) == 1:
            chosen = nodes[0]
            if not self._told:
                self._told = True
                # Two agents reading one such file report the same GPUs (UUIDs included) for two nodes.
                log.warning(
                    "no node %r in the inventory %s: reporting its only node, %r",
                    self.node_name,
                    self.path,
                    chosen.metadata.name,
                )
        if chosen is None:
            names = ", ".join(node.metadata.name for node in nodes) or "none"
            message = f"no node {self.node_name!r} in the inventory (it has {names}); name one so, or keep one node"
            raise SpecError([FieldError("metadata.name", message)], source=str(self.path))
        return Discovered(node=chosen, problems=simulated_problems(chosen))

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
