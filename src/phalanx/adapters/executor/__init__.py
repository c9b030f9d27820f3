"""The local executor: replicas as CPU-pinned process groups, in cgroups where writable, that outlive us.

``shim.py`` is standard-library-only and runs as its own program (``python -I -S shim.py RUN_DIR``), so the
process table shows every replica's shim for what it is.
"""

from phalanx.adapters.executor.cgroups import (
    CgroupError,
    CgroupLayout,
    CgroupSetup,
    create_cgroups,
    detect_cgroups,
    remove_cgroups,
)
from phalanx.adapters.executor.local import (
    KILLED_EXIT_CODE,
    LaunchDeferredError,
    LaunchError,
    LaunchSpec,
    LocalExecutor,
    ProcessHandle,
    ProcessState,
    find_shim,
    group_members,
    read_affinity,
    read_exit_code,
    read_start_ticks,
)

__all__ = [
    "KILLED_EXIT_CODE",
    "CgroupError",
    "CgroupLayout",
    "CgroupSetup",
    "LaunchDeferredError",
    "LaunchError",
    "LaunchSpec",
    "LocalExecutor",
    "ProcessHandle",
    "ProcessState",
    "create_cgroups",
    "detect_cgroups",
    "find_shim",
    "group_members",
    "read_affinity",
    "read_exit_code",
    "read_start_ticks",
    "remove_cgroups",
]
