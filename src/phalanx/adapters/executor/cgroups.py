"""cgroup detection and per-replica cgroups: exclusive cpusets, memory limits and CPU quotas.

Owns everything that knows the two cgroup layouts:

- **v2** (unified): one directory per replica holds ``cpuset.cpus``, ``memory.max`` and ``cpu.max``; the
  controllers must first be enabled in each ancestor's ``cgroup.subtree_control``.
- **v1** (one hierarchy per controller): a directory per replica in each of the ``cpuset``, ``memory`` and
  ``cpu`` hierarchies. A new v1 cpuset starts with *empty* ``cpuset.cpus`` and ``cpuset.mems`` and refuses
  tasks until both are set, so the intermediate directory copies them from its parent.

Replica cgroups are created under the control plane's *own* cgroup in each hierarchy
(``<own>/phalanx/<name>``), not at the hierarchy root: nesting keeps every replica inside whatever limits the
control plane itself runs under (a container, a systemd slice), instead of letting replicas escape them.
Where the control plane runs in the root cgroup this is ``<mount>/phalanx/<name>``.

Creating cgroups needs write access, which most unprivileged users and many containers lack. Every failure
here is a :class:`CgroupError` with the path and the reason, and the executor falls back to CPU affinity only.
Nothing here runs a process: the shim joins the groups itself by writing its pid to ``cgroup.procs``.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from phalanx.adapters.cgroupfs import own_cgroup_paths

CONTROLLERS = ("cpuset", "memory", "cpu")
GROUP = "phalanx"
# The CFS period used for CPU quotas: 100 ms, the kernel's and Kubernetes' default.
CPU_PERIOD_US = 100_000
# The kernel refuses quotas below 1 ms.
MIN_CPU_QUOTA_US = 1_000


class CgroupError(RuntimeError):
    """A cgroup could not be found, created, configured or removed."""


@dataclass(frozen=True)
class CgroupLayout:
    """Where replica cgroups go on this machine.

    Attributes:
        version: 1 or 2.
        parents: controller (``cpuset``, ``memory``, ``cpu``) → the directory that holds one sub-directory per
            replica (the ``phalanx`` group). With v2 every controller maps to the same directory.

    """

    version: Literal[1, 2]
    parents: dict[str, Path] = field(default_factory=dict)

    @property
    def controllers(self) -> frozenset[str]:
        """The controllers this layout can configure."""
        return frozenset(self.parents)


def _unescape(path: str) -> str:
    r"""Undo mountinfo's octal escapes of space, tab, newline and backslash as octal: ``\\040``."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), path)


@dataclass(frozen=True)
class _Mount:
    root: str
    mount_point: Path
    fstype: str
    options: frozenset[str]


def _mounts(proc_root: Path) -> list[_Mount]:
    found: list[_Mount] = []
    try:
        lines = (proc_root / "self" / "mountinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return found
    for line in lines:
        before, sep, after = line.partition(" - ")
        if not sep:
            continue
        left = before.split()
        right = after.split()
        if len(left) < 5 or len(right) < 3 or right[0] not in ("cgroup", "cgroup2"):
            continue
        found.append(
            _Mount(
                root=_unescape(left[3]),
                mount_point=Path(_unescape(left[4])),
                fstype=right[0],
                options=frozenset(right[2].split(",")),
            )
        )
    return found


def _own_directory(mount: _Mount, own_path: str) -> Path:
    """Join a mount point and our path in that hierarchy, minus the part of the path above the mount's root.

    Without a cgroup namespace a container sees ``/docker/<id>/...`` in /proc/self/cgroup while its mount's
    root is ``/docker/<id>``; with one, both are ``/``.
    """
    root = mount.root.rstrip("/")
    relative = own_path
    if root and (own_path == root or own_path.startswith(root + "/")):
        relative = own_path[len(root) :]
    elif root:
        # Our cgroup is outside what this mount shows: the best we can do is the mount point itself.
        relative = "/"
    parts = [part for part in relative.split("/") if part]
    return mount.mount_point.joinpath(*parts)


def detect_cgroups(proc_root: Path = Path("/proc")) -> CgroupLayout | None:
    """Find the cgroup hierarchies that could hold replica cgroups, without writing anything.

    Prefers v2 when its root offers the ``cpuset`` or ``memory`` controller (a pure unified system); otherwise
    uses the v1 hierarchies of those controllers (a legacy or hybrid system, where v2 is mounted only to track
    processes). Returns ``None`` when neither exists.
    """
    mounts = _mounts(proc_root)
    own_v1, own_v2 = own_cgroup_paths(proc_root)
    for mount in mounts:
        if mount.fstype != "cgroup2" or own_v2 is None:
            continue
        directory = _own_directory(mount, own_v2)
        available = _read_words(mount.mount_point / "cgroup.controllers") | _read_words(
            directory / "cgroup.controllers"
        )
        usable = [controller for controller in CONTROLLERS if controller in available]
        if "cpuset" in usable or "memory" in usable:
            return CgroupLayout(version=2, parents={controller: directory / GROUP for controller in usable})
    parents: dict[str, Path] = {}
    for controller in CONTROLLERS:
        v1_mount = next((m for m in mounts if m.fstype == "cgroup" and controller in m.options), None)
        if v1_mount is not None:
            parents[controller] = _own_directory(v1_mount, own_v1.get(controller, "/")) / GROUP
    return CgroupLayout(version=1, parents=parents) if parents else None


def _read_words(path: Path) -> set[str]:
    try:
        return set(path.read_text(encoding="ascii").split())
    except OSError:
        return set()


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii").strip()
    except OSError as err:
        raise CgroupError(f"cannot read {path}: {err.strerror}") from None


def _write(path: Path, value: str) -> None:
    try:
        # cgroup files take one value per write(2); open without truncation games, write once.
        with path.open("w", encoding="ascii") as handle:
            handle.write(value)
    except OSError as err:
        raise CgroupError(f"cannot write {value!r} to {path}: {err.strerror}") from None


def _mkdir(path: Path) -> bool:
    """Create one cgroup directory; True when it did not exist before."""
    try:
        path.mkdir()
    except FileExistsError:
        return False
    except OSError as err:
        raise CgroupError(f"cannot create cgroup {path}: {err.strerror}") from None
    return True


def _cpu_list(cpus: Iterable[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(set(cpus)))


# controller -> cgroup file -> value: the limits one replica asks for.
_Settings = dict[str, dict[str, str]]


def _plan(
    layout: CgroupLayout,
    *,
    cpus: Sequence[int] | None,
    memory_limit: int | None,
    cpu_limit_milli: int | None,
) -> tuple[_Settings, list[str]]:
    settings: _Settings = {}
    missing: list[str] = []
    wanted: dict[str, dict[str, str]] = {}
    if cpus:
        wanted["cpuset"] = {"cpuset.cpus": _cpu_list(cpus)}
    if memory_limit is not None:
        key = "memory.max" if layout.version == 2 else "memory.limit_in_bytes"
        wanted["memory"] = {key: str(memory_limit)}
    if cpu_limit_milli is not None:
        quota = max(cpu_limit_milli * CPU_PERIOD_US // 1000, MIN_CPU_QUOTA_US)
        if layout.version == 2:
            wanted["cpu"] = {"cpu.max": f"{quota} {CPU_PERIOD_US}"}
        else:
            wanted["cpu"] = {"cpu.cfs_period_us": str(CPU_PERIOD_US), "cpu.cfs_quota_us": str(quota)}
    for controller, values in wanted.items():
        if controller in layout.parents:
            settings[controller] = values
        else:
            missing.append(controller)
    return settings, missing


def _prepare_parent_v1(controller: str, parent: Path) -> None:
    created = _mkdir(parent)
    if controller == "cpuset" and (created or not _read(parent / "cpuset.mems") or not _read(parent / "cpuset.cpus")):
        # A fresh v1 cpuset has no CPUs and no memory nodes: inherit both or no task may join it.
        _write(parent / "cpuset.cpus", _read(parent.parent / "cpuset.cpus"))
        _write(parent / "cpuset.mems", _read(parent.parent / "cpuset.mems"))


def _enable_controllers_v2(directory: Path, controllers: Iterable[str]) -> None:
    enabled = _read_words(directory / "cgroup.subtree_control")
    for controller in controllers:
        if controller not in enabled:
            _write(directory / "cgroup.subtree_control", f"+{controller}")


@dataclass(frozen=True)
class CgroupSetup:
    """The cgroups made for one replica.

    Attributes:
        directories: every directory created (one for v2, one per controller for v1); the shim writes its pid
            to ``<directory>/cgroup.procs``.
        missing: controllers a limit needed but this machine does not offer; those limits are not enforced.

    """

    directories: list[Path]
    missing: list[str]


def create_cgroups(
    layout: CgroupLayout,
    name: str,
    *,
    cpus: Sequence[int] | None = None,
    memory_limit: int | None = None,
    cpu_limit_milli: int | None = None,
) -> CgroupSetup:
    """Create ``phalanx/<name>`` in each hierarchy a limit needs, and write the limits.

    Raises:
        CgroupError: a directory could not be created or a limit was refused; whatever this call created is
            removed again first.

    """
    if not name or "/" in name or name in (".", ".."):
        raise CgroupError(f"invalid cgroup name {name!r}")
    settings, missing = _plan(layout, cpus=cpus, memory_limit=memory_limit, cpu_limit_milli=cpu_limit_milli)
    created: list[Path] = []
    try:
        if layout.version == 2:
            created = _create_v2(layout, name, settings)
        else:
            for controller, values in settings.items():
                parent = layout.parents[controller]
                _prepare_parent_v1(controller, parent)
                directory = parent / name
                _mkdir(directory)
                created.append(directory)
                if controller == "cpuset":
                    _write(directory / "cpuset.mems", _read(parent / "cpuset.mems"))
                for key, value in values.items():
                    _write(directory / key, value)
    except CgroupError:
        remove_cgroups(created)
        raise
    return CgroupSetup(directories=created, missing=missing)


def _create_v2(layout: CgroupLayout, name: str, settings: _Settings) -> list[Path]:
    if not settings:
        return []
    parent = next(iter(layout.parents.values()))
    controllers = list(settings)
    # The "no internal processes" rule: this fails with EBUSY when our own cgroup holds processes and is not
    # the root; the executor then falls back to affinity only.
    _enable_controllers_v2(parent.parent, controllers)
    _mkdir(parent)
    _enable_controllers_v2(parent, controllers)
    directory = parent / name
    _mkdir(directory)
    created = [directory]
    for values in settings.values():
        for key, value in values.items():
            _write(directory / key, value)
    return created


def set_cgroup_cpus(directories: Iterable[Path], cpus: Sequence[int]) -> None:
    """Change the cpuset of a replica's cgroup (the directory that has ``cpuset.cpus``).

    Raises:
        CgroupError: the kernel refused the new set (e.g. CPUs outside the parent's cpuset).

    """
    for directory in directories:
        target = directory / "cpuset.cpus"
        if target.exists():
            _write(target, _cpu_list(cpus))


def remove_cgroups(directories: Iterable[Path]) -> list[str]:
    """Remove replica cgroups, then their ``phalanx`` parents when no other replica uses them.

    A cgroup directory is removed with rmdir(2) (its files are not real files). Returns the problems found:
    a cgroup that still holds processes stays and is reported; one already gone is not a problem.
    """
    problems: list[str] = []
    for directory in directories:
        try:
            directory.rmdir()
        except FileNotFoundError:
            pass
        except OSError as err:
            problems.append(f"cannot remove cgroup {directory}: {err.strerror}")
            continue
        try:
            # Leave no empty group behind in someone else's cgroup; EBUSY/ENOTEMPTY means siblings remain.
            directory.parent.rmdir()
        except OSError as err:
            if err.errno not in (errno.EBUSY, errno.ENOTEMPTY, errno.ENOENT, errno.EEXIST):
                problems.append(f"cannot remove cgroup {directory.parent}: {err.strerror}")
    return problems


def procs_files(directories: Iterable[Path]) -> list[str]:
    """List the ``cgroup.procs`` files the shim writes its pid to."""
    return [os.fspath(directory / "cgroup.procs") for directory in directories]
