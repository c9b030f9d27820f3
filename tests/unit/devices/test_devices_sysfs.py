"""CPU topology and memory discovery against fake /sys and /proc trees built in tmp_path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from phalanx.adapters.devices import (
    cgroup_memory_limit,
    discover_cpus,
    discover_memory,
    format_cpu_list,
    parse_cpu_list,
)
from phalanx.model.nodes import CpuInfo

GIB = 1 << 30


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_cpu(sys_root: Path, cpu: int, *, core: int | None, socket: int | None) -> None:
    topology = sys_root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
    topology.mkdir(parents=True, exist_ok=True)
    if core is not None:
        write(topology / "core_id", f"{core}\n")
    if socket is not None:
        write(topology / "physical_package_id", f"{socket}\n")


@pytest.fixture
def two_socket_ht(tmp_path: Path) -> Path:
    """2 sockets x 2 cores x 2 hyperthreads, numbered as Linux does on Intel: siblings are n and n+4."""
    sys_root = tmp_path / "sys"
    for cpu in range(8):
        physical = cpu % 4
        fake_cpu(sys_root, cpu, core=physical % 2, socket=physical // 2)
    write(sys_root / "devices" / "system" / "cpu" / "online", "0-7\n")
    write(sys_root / "devices" / "system" / "node" / "node0" / "cpulist", "0-1,4-5\n")
    write(sys_root / "devices" / "system" / "node" / "node1" / "cpulist", "2-3,6-7\n")
    # Files that look like node entries but are not must be ignored.
    write(sys_root / "devices" / "system" / "node" / "online", "0-1\n")
    return sys_root


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0", {0}),
        ("0-3", {0, 1, 2, 3}),
        ("0-1,4-5\n", {0, 1, 4, 5}),
        ("0,2,7-8", {0, 2, 7, 8}),
        ("", set()),
    ],
    ids=["single", "range", "two-ranges", "mixed", "empty"],
)
def test_cpu_lists_parse_and_format_round_trip(text: str, cpus: set[int]) -> None:
    assert parse_cpu_list(text) == cpus
    assert parse_cpu_list(format_cpu_list(cpus)) == cpus


def test_format_cpu_list_collapses_ranges() -> None:
    assert format_cpu_list([5, 0, 1, 2, 9, 10]) == "0-2,5,9-10"


def test_two_socket_machine_with_hyperthreads(two_socket_ht: Path) -> None:
    cpus = discover_cpus(two_socket_ht, allowed=range(8))

    assert cpus == [
        CpuInfo(id=0, core=0, socket=0, numa=0),
        CpuInfo(id=1, core=1, socket=0, numa=0),
        CpuInfo(id=2, core=0, socket=1, numa=1),
        CpuInfo(id=3, core=1, socket=1, numa=1),
        CpuInfo(id=4, core=0, socket=0, numa=0),
        CpuInfo(id=5, core=1, socket=0, numa=0),
        CpuInfo(id=6, core=0, socket=1, numa=1),
        CpuInfo(id=7, core=1, socket=1, numa=1),
    ]
    # Hyperthread siblings share (socket, core).
    siblings = {(cpu.socket, cpu.core) for cpu in cpus if cpu.id in (0, 4)}
    assert len(siblings) == 1


def test_only_allowed_and_online_cpus_are_reported(two_socket_ht: Path) -> None:
    write(two_socket_ht / "devices" / "system" / "cpu" / "online", "0-6\n")

    cpus = discover_cpus(two_socket_ht, allowed={1, 2, 6, 7})

    assert [cpu.id for cpu in cpus] == [1, 2, 6]


def test_defaults_to_this_process_affinity(two_socket_ht: Path) -> None:
    usable = os.sched_getaffinity(0) & set(range(8))
    assert {cpu.id for cpu in discover_cpus(two_socket_ht)} == usable


def test_container_without_topology_or_numa_falls_back_to_node_zero(tmp_path: Path) -> None:
    sys_root = tmp_path / "sys"
    for cpu in range(3):
        fake_cpu(sys_root, cpu, core=None, socket=None)

    cpus = discover_cpus(sys_root, allowed={0, 1, 2})

    # Each CPU is its own core: nothing is mistaken for a hyperthread sibling.
    assert cpus == [CpuInfo(id=i, core=i, socket=0, numa=0) for i in range(3)]


def test_no_sysfs_at_all_reports_the_allowed_cpus(tmp_path: Path) -> None:
    cpus = discover_cpus(tmp_path / "nothing-here", allowed={0, 3})

    assert cpus == [CpuInfo(id=0, core=0, socket=0, numa=0), CpuInfo(id=3, core=3, socket=0, numa=0)]


def test_negative_package_id_maps_to_socket_zero(tmp_path: Path) -> None:
    sys_root = tmp_path / "sys"
    fake_cpu(sys_root, 0, core=0, socket=-1)

    assert discover_cpus(sys_root, allowed={0}) == [CpuInfo(id=0, core=0, socket=0, numa=0)]


def test_this_machine_reports_usable_cpus() -> None:
    assert {cpu.id for cpu in discover_cpus()} <= os.sched_getaffinity(0)
    assert discover_cpus()


# -- memory --------------------------------------------------------------------------------------------------


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    write(proc / "meminfo", "MemTotal:       16777216 kB\nMemFree:         1000 kB\n")
    return proc


def test_memory_is_memtotal_without_cgroup_limit(proc_root: Path, tmp_path: Path) -> None:
    write(proc_root / "self" / "cgroup", "0::/\n")

    assert discover_memory(proc_root, cgroup_root=tmp_path / "cgroup") == 16 * GIB


@pytest.mark.parametrize(
    ("cgroup_file", "limit_file", "limit", "expected"),
    [
        ("0::/job.slice\n", "job.slice/memory.max", "4294967296\n", 4 * GIB),
        ("0::/job.slice\n", "job.slice/memory.max", "max\n", 16 * GIB),
        ("0::/a/b\n", "a/memory.max", "2147483648\n", 2 * GIB),
        ("0::/\n", "memory.max", "1073741824\n", 1 * GIB),
        ("4:memory:/docker/x\n0::/\n", "memory/docker/x/memory.limit_in_bytes", "3221225472\n", 3 * GIB),
        ("4:memory:/docker/x\n", "memory/docker/x/memory.limit_in_bytes", "9223372036854771712\n", 16 * GIB),
        ("0::/big\n", "big/memory.max", str(64 * GIB), 16 * GIB),
    ],
    ids=[
        "v2-limit",
        "v2-max",
        "v2-ancestor",
        "v2-namespaced-root",
        "v1-limit",
        "v1-unlimited",
        "limit-above-ram",
    ],
)
def test_memory_respects_a_smaller_cgroup_limit(
    proc_root: Path, tmp_path: Path, cgroup_file: str, limit_file: str, limit: str, expected: int
) -> None:
    cgroup_root = tmp_path / "cgroup"
    write(proc_root / "self" / "cgroup", cgroup_file)
    write(cgroup_root / limit_file, limit)

    assert discover_memory(proc_root, cgroup_root=cgroup_root) == expected


def test_cgroup_memory_limit_is_none_when_nothing_is_readable(tmp_path: Path) -> None:
    assert cgroup_memory_limit(tmp_path / "proc", tmp_path / "cgroup") is None


def test_memory_without_meminfo_is_zero(tmp_path: Path) -> None:
    assert discover_memory(tmp_path / "proc", cgroup_root=tmp_path / "cgroup") == 0


def test_this_machine_has_memory() -> None:
    assert discover_memory() > 0
