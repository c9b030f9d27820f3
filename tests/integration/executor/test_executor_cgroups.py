"""cgroups: detection from fake /proc files, setup on fake trees, and real limits on this machine.

The real-cgroup tests need a writable cgroup hierarchy (root on a host or a privileged container). Where there
is none they are skipped with the reason; everything else still runs.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.adapters.executor import (
    CgroupError,
    CgroupLayout,
    LaunchSpec,
    LocalExecutor,
    ProcessHandle,
    create_cgroups,
    detect_cgroups,
    read_affinity,
    remove_cgroups,
)

pytestmark = pytest.mark.integration

BLOCK = "import os, sys, time\nwhile not os.path.exists(os.environ['RELEASE']):\n    time.sleep(0.01)\n"
MIB = 1 << 20


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# -- detection -----------------------------------------------------------------------------------------------

HYBRID_MOUNTINFO = """\
23 1 0:21 / /sys rw,nosuid - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
HYBRID_CGROUP = """\
9:name=systemd:/user.slice
4:memory:/user.slice/session-3.scope
3:cpuset:/
2:cpu,cpuacct:/user.slice
0::/user.slice/session-3.scope
"""


def fake_proc(tmp_path: Path, mountinfo: str, cgroup: str) -> Path:
    proc = tmp_path / "proc"
    write(proc / "self" / "mountinfo", mountinfo)
    write(proc / "self" / "cgroup", cgroup)
    return proc


def test_detects_v1_hierarchies_under_our_own_cgroups(tmp_path: Path) -> None:
    layout = detect_cgroups(fake_proc(tmp_path, HYBRID_MOUNTINFO, HYBRID_CGROUP))

    # cgroup2 is mounted but offers no cpuset/memory controller (hybrid mode): v1 is used.
    assert layout == CgroupLayout(
        version=1,
        parents={
            "cpuset": Path("/sys/fs/cgroup/cpuset/phalanx"),
            "memory": Path("/sys/fs/cgroup/memory/user.slice/session-3.scope/phalanx"),
            "cpu": Path("/sys/fs/cgroup/cpu,cpuacct/user.slice/phalanx"),
        },
    )


def test_detects_unified_v2(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    write(root / "cgroup.controllers", "cpuset cpu io memory pids\n")
    mountinfo = f"30 23 0:26 / {root} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"

    layout = detect_cgroups(fake_proc(tmp_path, mountinfo, "0::/phalanx.service\n"))

    group = root / "phalanx.service" / "phalanx"
    assert layout == CgroupLayout(version=2, parents={"cpuset": group, "memory": group, "cpu": group})


def test_container_without_cgroup_namespace_strips_the_mount_root(tmp_path: Path) -> None:
    mountinfo = "50 40 0:31 /docker/abc /sys/fs/cgroup/cpuset ro,nosuid - cgroup cgroup rw,cpuset\n"

    layout = detect_cgroups(fake_proc(tmp_path, mountinfo, "3:cpuset:/docker/abc\n"))

    assert layout is not None
    assert layout.parents == {"cpuset": Path("/sys/fs/cgroup/cpuset/phalanx")}


def test_escaped_mount_points_are_decoded(tmp_path: Path) -> None:
    mountinfo = "50 40 0:31 / /mnt/my\\040cgroups rw - cgroup cgroup rw,memory\n"

    layout = detect_cgroups(fake_proc(tmp_path, mountinfo, "4:memory:/\n"))

    assert layout is not None
    assert layout.parents == {"memory": Path("/mnt/my cgroups/phalanx")}


def test_no_cgroups_mounted(tmp_path: Path) -> None:
    assert detect_cgroups(fake_proc(tmp_path, "23 1 0:21 / /sys rw - sysfs sysfs rw\n", "0::/\n")) is None
    assert detect_cgroups(tmp_path / "no-proc") is None


# -- setup on fake trees -------------------------------------------------------------------------------------


def test_v1_setup_writes_limits_and_inherits_cpuset_mems(tmp_path: Path) -> None:
    base = tmp_path / "cg"
    write(base / "cpuset" / "cpuset.cpus", "0-7\n")
    write(base / "cpuset" / "cpuset.mems", "0-1\n")
    (base / "memory").mkdir()
    (base / "cpu").mkdir()
    layout = CgroupLayout(
        version=1,
        parents={name: base / name / "phalanx" for name in ("cpuset", "memory", "cpu")},
    )

    setup = create_cgroups(layout, "job-w-0", cpus=[3, 2], memory_limit=512 * MIB, cpu_limit_milli=1500)

    assert setup.missing == []
    assert setup.directories == [base / c / "phalanx" / "job-w-0" for c in ("cpuset", "memory", "cpu")]
    group = base / "cpuset" / "phalanx"
    assert (group / "cpuset.cpus").read_text() == "0-7"  # the intermediate group gets the parent's set
    assert (group / "cpuset.mems").read_text() == "0-1"
    assert (group / "job-w-0" / "cpuset.cpus").read_text() == "2,3"
    assert (group / "job-w-0" / "cpuset.mems").read_text() == "0-1"
    assert (base / "memory" / "phalanx" / "job-w-0" / "memory.limit_in_bytes").read_text() == str(512 * MIB)
    assert (base / "cpu" / "phalanx" / "job-w-0" / "cpu.cfs_period_us").read_text() == "100000"
    assert (base / "cpu" / "phalanx" / "job-w-0" / "cpu.cfs_quota_us").read_text() == "150000"


def test_v1_setup_reports_missing_controllers(tmp_path: Path) -> None:
    layout = CgroupLayout(version=1, parents={"memory": tmp_path / "memory" / "phalanx"})
    (tmp_path / "memory").mkdir()

    setup = create_cgroups(layout, "r", cpus=[0], memory_limit=MIB, cpu_limit_milli=100)

    assert setup.missing == ["cpuset", "cpu"]
    assert setup.directories == [tmp_path / "memory" / "phalanx" / "r"]


def test_no_limits_means_no_cgroups(tmp_path: Path) -> None:
    layout = CgroupLayout(version=1, parents={"memory": tmp_path / "phalanx"})

    assert create_cgroups(layout, "r").directories == []
    assert not (tmp_path / "phalanx").exists()


def test_v2_setup_enables_controllers_and_writes_one_directory(tmp_path: Path) -> None:
    own = tmp_path / "cgroup"
    write(own / "cgroup.subtree_control", "")
    layout = CgroupLayout(version=2, parents={c: own / "phalanx" for c in ("cpuset", "memory", "cpu")})

    setup = create_cgroups(layout, "r", cpus=[1], memory_limit=64 * MIB, cpu_limit_milli=250)

    directory = own / "phalanx" / "r"
    assert setup.directories == [directory]
    assert (directory / "cpuset.cpus").read_text() == "1"
    assert (directory / "memory.max").read_text() == str(64 * MIB)
    assert (directory / "cpu.max").read_text() == "25000 100000"
    # Each controller is enabled with its own write, as the kernel wants ("+cpu" after "+memory" here).
    assert (own / "phalanx" / "cgroup.subtree_control").read_text() == "+cpu"


@pytest.mark.parametrize("name", ["", "a/b", "..", "."])
def test_bad_cgroup_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(CgroupError, match="invalid cgroup name"):
        create_cgroups(CgroupLayout(version=1, parents={"memory": tmp_path}), name, memory_limit=MIB)


def test_unwritable_hierarchy_is_a_cgroup_error(tmp_path: Path) -> None:
    layout = CgroupLayout(version=1, parents={"cpuset": tmp_path / "absent" / "phalanx"})

    with pytest.raises(CgroupError, match=r"cannot create cgroup .*absent/phalanx"):
        create_cgroups(layout, "r", cpus=[0])


# -- fallback to affinity only -------------------------------------------------------------------------------


def test_one_warning_per_executor_when_cgroups_are_unavailable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, wait_until: Any
) -> None:
    broken = CgroupLayout(version=1, parents={"cpuset": tmp_path / "absent" / "phalanx"})
    executor = LocalExecutor(tmp_path / "executor", cgroups=broken)
    cpu = min(os.sched_getaffinity(0))
    handles = []
    with caplog.at_level(logging.DEBUG, logger="phalanx.adapters.executor"):
        for index in range(3):
            handles.append(
                executor.launch(
                    LaunchSpec(
                        name=f"r{index}",
                        command=[sys.executable, "-c", BLOCK],
                        env={"RELEASE": str(tmp_path / "never")},
                        working_dir=tmp_path,
                        run_dir=tmp_path / f"run-{index}",
                        cpus=[cpu],
                    )
                )
            )
    try:
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "CPU affinity only" in warnings[0].getMessage()
        # Pinning still happened, without cgroups.
        for handle in handles:
            started = handle.run_dir / "started"
            wait_until(started.exists, message="the started file")
            assert read_affinity(int(started.read_text())) == {cpu}
    finally:
        for handle in handles:
            executor.kill(handle)
            wait_until(functools.partial(executor.is_gone, handle), message="teardown")
            executor.poll(handle)


# -- real cgroups on this machine ----------------------------------------------------------------------------


@pytest.fixture
def writable_layout() -> Iterator[CgroupLayout]:
    layout = detect_cgroups()
    if layout is None or not {"cpuset", "memory"} <= layout.controllers:
        pytest.skip("no cpuset and memory cgroup controllers on this machine")
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    try:
        setup = create_cgroups(layout, probe, cpus=sorted(os.sched_getaffinity(0))[:1], memory_limit=64 * MIB)
    except CgroupError as err:
        pytest.skip(f"cgroups are not writable here ({err}); replicas get CPU affinity only")
    remove_cgroups(setup.directories)
    yield layout


def cgroup_paths(pid: int) -> dict[str, str]:
    """Controller → cgroup path of a process, from /proc/<pid>/cgroup."""
    paths: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else ["unified"]:
            paths[controller] = path
    return paths


def test_replica_runs_in_its_cpuset_memory_and_cpu_cgroups(
    writable_layout: CgroupLayout, replicas: Any, wait_until: Any
) -> None:
    cpu = max(os.sched_getaffinity(0))
    spec = replicas.spec(BLOCK, cpus=[cpu], memory_limit=256 * MIB, cpu_limit_milli=500)
    handle = replicas.launch(spec)
    started = handle.run_dir / "started"
    wait_until(started.exists, message="the started file")
    child = int(started.read_text())

    cpuset_dir = writable_layout.parents["cpuset"] / spec.name
    memory_dir = writable_layout.parents["memory"] / spec.name
    if writable_layout.version == 1:
        assert (cpuset_dir / "cpuset.cpus").read_text().strip() == str(cpu)
        assert int((memory_dir / "memory.limit_in_bytes").read_text()) == 256 * MIB
        if "cpu" in writable_layout.controllers:
            assert (writable_layout.parents["cpu"] / spec.name / "cpu.cfs_quota_us").read_text().strip() == "50000"
        paths = cgroup_paths(child)
        assert paths["cpuset"].endswith(f"/phalanx/{spec.name}")
        assert paths["memory"].endswith(f"/phalanx/{spec.name}")
    else:
        assert (cpuset_dir / "cpuset.cpus").read_text().strip() == str(cpu)
        assert int((memory_dir / "memory.max").read_text()) == 256 * MIB
        assert cgroup_paths(child)["unified"].endswith(f"/phalanx/{spec.name}")
    assert str(child) in (cpuset_dir / "cgroup.procs").read_text().split()
    assert read_affinity(child) == {cpu}

    replicas.release(handle)
    assert replicas.finish(handle) == 0
    wait_until(lambda: replicas.executor.is_gone(handle), message="the shim to exit")
    replicas.executor.cleanup(handle)
    assert not cpuset_dir.exists()
    assert not memory_dir.exists()


def test_a_shim_moved_in_by_the_launcher_runs_the_command_in_its_cgroups(
    writable_layout: CgroupLayout, replicas: Any, wait_until: Any
) -> None:
    cpu = max(os.sched_getaffinity(0))
    spec = replicas.spec(BLOCK, cpus=[cpu], memory_limit=256 * MIB)
    handle = replicas.launch(spec)

    replicas.executor.move_into_cgroups(handle)  # while the shim starts; it then finds itself a member

    started = handle.run_dir / "started"
    wait_until(started.exists, message="the started file")
    child = int(started.read_text())
    assert str(child) in (writable_layout.parents["cpuset"] / spec.name / "cgroup.procs").read_text().split()
    assert read_affinity(child) == {cpu}
    assert "warning" not in handle.log_path.read_text()
    replicas.release(handle)
    assert replicas.finish(handle) == 0


def test_a_pid_that_is_not_the_shim_is_never_moved(writable_layout: CgroupLayout, replicas: Any) -> None:
    handle = replicas.run(BLOCK, cpus=[min(os.sched_getaffinity(0))])
    # Our own pid with another start time: what a reused pid looks like. Moving it would move this test.
    impostor = ProcessHandle(pid=os.getpid(), start_ticks=handle.start_ticks + 1, run_dir=handle.run_dir)
    before = cgroup_paths(os.getpid())

    replicas.executor.move_into_cgroups(impostor)

    assert cgroup_paths(os.getpid()) == before
    replicas.release(handle)
    assert replicas.finish(handle) == 0


def test_root_cpuset_path_on_a_host_in_the_root_cpuset(writable_layout: CgroupLayout, replicas: Any) -> None:
    if writable_layout.version != 1 or cgroup_paths(os.getpid()).get("cpuset") != "/":
        pytest.skip("this machine's control plane does not live in the root v1 cpuset")
    spec = replicas.spec(BLOCK, cpus=[min(os.sched_getaffinity(0))])
    handle = replicas.launch(spec)

    cpus_file = Path("/sys/fs/cgroup/cpuset/phalanx") / spec.name / "cpuset.cpus"
    assert cpus_file.read_text().strip() == str(min(os.sched_getaffinity(0)))
    replicas.release(handle)
    assert replicas.finish(handle) == 0


def test_exceeding_the_memory_limit_is_an_oom_kill(writable_layout: CgroupLayout, replicas: Any) -> None:
    if "SwapTotal:             0 kB" not in Path("/proc/meminfo").read_text():
        pytest.skip("with swap the kernel may swap instead of killing at the limit")
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n"
    handle = replicas.run(code, memory_limit=64 * MIB)

    assert replicas.finish(handle, timeout=60) == 137
    state = replicas.executor.poll(handle)
    assert state.oom_killed
    assert "OOM killer" in handle.log_path.read_text()


def test_shim_removes_its_cgroups_when_the_command_exits(
    writable_layout: CgroupLayout, replicas: Any, wait_until: Any
) -> None:
    spec = replicas.spec("pass", cpus=[min(os.sched_getaffinity(0))], memory_limit=128 * MIB)
    handle = replicas.launch(spec)

    assert replicas.finish(handle) == 0
    # No control plane call needed: the shim left and removed its groups before writing the exit code.
    assert not (writable_layout.parents["cpuset"] / spec.name).exists()
    assert not (writable_layout.parents["memory"] / spec.name).exists()


def test_set_affinity_moves_the_cpuset_too(writable_layout: CgroupLayout, replicas: Any, wait_until: Any) -> None:
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        pytest.skip("needs two CPUs")
    spec = replicas.spec(BLOCK, cpus=[usable[0]])
    handle = replicas.launch(spec)
    started = handle.run_dir / "started"
    wait_until(started.exists, message="the started file")

    replicas.executor.set_affinity(handle, [usable[1]])

    assert (writable_layout.parents["cpuset"] / spec.name / "cpuset.cpus").read_text().strip() == str(usable[1])
    assert read_affinity(int(started.read_text())) == {usable[1]}
    replicas.release(handle)
    assert replicas.finish(handle) == 0
