"""CPU topology and memory of this machine, read from /sys and /proc.

Owns the translation of the kernel's view (``/sys/devices/system/cpu``, ``/sys/devices/system/node``,
``/proc/meminfo`` and the cgroup memory limit) into :class:`~phalanx.model.nodes.CpuInfo` records and a byte
count. Only CPUs this process may run on are reported: a control plane started under ``taskset`` or inside a
cpuset-limited container must never hand out CPUs it cannot pin to.

Containers often hide parts of /sys; every reader here degrades to a safe default (one core per CPU, socket
0, NUMA node 0) instead of failing, because a node with a coarse topology is still schedulable and a crash is
not.
The roots are parameters so that tests can build fake trees.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from phalanx.adapters.cgroupfs import own_cgroup_paths
from phalanx.model.nodes import CpuInfo

_CPU_DIR = re.compile(r"^cpu(\d+)$")
_NODE_DIR = re.compile(r"^node(\d+)$")

# cgroup v1 reports "no limit" as a page-aligned LONG_MAX; anything this large means unlimited.
_UNLIMITED = 1 << 62


def parse_cpu_list(text: str) -> set[int]:
    """Parse the kernel's list format, e.g. ``"0-3,8,10-11"`` → ``{0, 1, 2, 3, 8, 10, 11}``.

    Raises:
        ValueError: the text is not a CPU list.

    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            first, last = part.split("-", 1)
            cpus.update(range(int(first), int(last) + 1))
        else:
            cpus.add(int(part))
    return cpus


def format_cpu_list(cpus: Iterable[int]) -> str:
    """Format CPUs as the kernel lists them, e.g. ``{0, 1, 2, 5}`` → ``"0-2,5"``."""
    ordered = sorted(set(cpus))
    ranges: list[str] = []
    start = previous = None
    for cpu in ordered:
        if previous is not None and cpu == previous + 1:
            previous = cpu
            continue
        if start is not None:
            ranges.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = cpu
    if start is not None:
        ranges.append(str(start) if start == previous else f"{start}-{previous}")
    return ",".join(ranges)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


def _read_cpu_list(path: Path) -> set[int] | None:
    try:
        return parse_cpu_list(path.read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None


def _numa_of_cpus(node_root: Path) -> dict[int, int]:
    """CPU id → NUMA node id, from ``nodeN/cpulist``; empty when the kernel exposes no NUMA information."""
    numa: dict[int, int] = {}
    try:
        entries = sorted(node_root.iterdir())
    except OSError:
        return numa
    for entry in entries:
        match = _NODE_DIR.match(entry.name)
        if not match:
            continue
        cpus = _read_cpu_list(entry / "cpulist")
        for cpu in cpus or ():
            numa[cpu] = int(match.group(1))
    return numa


def discover_cpus(sys_root: Path = Path("/sys"), *, allowed: Iterable[int] | None = None) -> list[CpuInfo]:
    """List the logical CPUs this process may use, with their core, socket and NUMA node.

    Args:
        sys_root: where sysfs is mounted (a fake tree in tests).
        allowed: the CPUs to consider; defaults to this process's affinity mask.

    Returns:
        One record per usable, online CPU, ordered by id. Never empty on a real machine: when /sys says
        nothing, every allowed CPU is its own core on socket 0 and NUMA node 0.

    """
    usable = set(os.sched_getaffinity(0) if allowed is None else allowed)
    cpu_root = sys_root / "devices" / "system" / "cpu"
    online = _read_cpu_list(cpu_root / "online")
    if online is not None:
        usable &= online
    numa = _numa_of_cpus(sys_root / "devices" / "system" / "node")

    present: set[int] = set()
    try:
        for entry in cpu_root.iterdir():
            match = _CPU_DIR.match(entry.name)
            if match:
                present.add(int(match.group(1)))
    except OSError:
        present = set()
    if present:
        usable &= present

    found: list[CpuInfo] = []
    for cpu in sorted(usable):
        topology = cpu_root / f"cpu{cpu}" / "topology"
        core = _read_int(topology / "core_id")
        socket = _read_int(topology / "physical_package_id")
        found.append(
            CpuInfo(
                id=cpu,
                # Without topology each CPU is its own core, so nothing is wrongly treated as a sibling.
                core=core if core is not None and core >= 0 else cpu,
                # Some VMs and ARM boards report -1 for the package id.
                socket=socket if socket is not None and socket >= 0 else 0,
                numa=numa.get(cpu, 0),
            )
        )
    return found


def _ancestors(root: Path, cgroup_path: str) -> list[Path]:
    """``root/a/b``, ``root/a`` and ``root``: a limit anywhere above us applies to us."""
    parts = [part for part in cgroup_path.split("/") if part]
    return [root.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 < value < _UNLIMITED else None


def cgroup_memory_limit(proc_root: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Return the smallest memory limit set on this process's cgroup or any of its ancestors, in bytes.

    Looks at cgroup v2 (``memory.max``) and v1 (``memory/…/memory.limit_in_bytes``). Inside a container with a
    cgroup namespace the own path is ``/`` and the limit sits at the mount root, which the walk covers.
    """
    own_v1, v2_path = own_cgroup_paths(proc_root)
    v1_path = own_v1.get("memory")
    limits: list[int] = []
    if v2_path is not None:
        for directory in _ancestors(cgroup_root, v2_path):
            limit = _read_limit(directory / "memory.max")
            if limit is not None:
                limits.append(limit)
    if v1_path is not None:
        for directory in _ancestors(cgroup_root / "memory", v1_path):
            limit = _read_limit(directory / "memory.limit_in_bytes")
            if limit is not None:
                limits.append(limit)
    return min(limits) if limits else None


def discover_memory(proc_root: Path = Path("/proc"), *, cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """Bytes of memory replicas may use: ``MemTotal``, or the cgroup memory limit when it is smaller.

    Returns 0 when ``meminfo`` cannot be read (a node that reports 0 bytes gets no memory-requesting work,
    which is the safe failure).
    """
    total = 0
    try:
        for line in (proc_root / "meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemTotal:"):
                fields = line.split()
                # The kernel always reports kB here; multiply by 1024 as free(1) does.
                total = int(fields[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        total = 0
    limit = cgroup_memory_limit(proc_root, cgroup_root)
    if limit is not None and (total == 0 or limit < total):
        return limit
    return total
