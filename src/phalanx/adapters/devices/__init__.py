"""Device discovery: CPUs and NUMA from /sys, memory from /proc and cgroups, GPUs from NVML, inventories.

Everything here produces :class:`~phalanx.model.nodes.Node` data and nothing else; the scheduler never reads
/sys or NVML itself, so the same placement code runs on discovered, simulated and Kubernetes nodes.
"""

from phalanx.adapters.devices.inventory import discover_local_node, load_inventory, node_name_from_hostname
from phalanx.adapters.devices.nvml import GpuHealth, NvmlUnavailableError, check_health, discover_gpus
from phalanx.adapters.devices.sysfs import (
    cgroup_memory_limit,
    discover_cpus,
    discover_memory,
    format_cpu_list,
    parse_cpu_list,
)

__all__ = [
    "GpuHealth",
    "NvmlUnavailableError",
    "cgroup_memory_limit",
    "check_health",
    "discover_cpus",
    "discover_gpus",
    "discover_local_node",
    "discover_memory",
    "format_cpu_list",
    "load_inventory",
    "node_name_from_hostname",
    "parse_cpu_list",
]
