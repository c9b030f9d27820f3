"""Where this process sits in the cgroup hierarchies, read from ``/proc/self/cgroup``.

Shared by device discovery (memory limits that apply to us) and the executor (where replica cgroups go).
"""

from __future__ import annotations

from pathlib import Path


def own_cgroup_paths(proc_root: Path = Path("/proc")) -> tuple[dict[str, str], str | None]:
    """Our path per cgroup v1 controller, and our cgroup v2 path (None when there is no v2 entry)."""
    v1: dict[str, str] = {}
    v2: str | None = None
    try:
        lines = (proc_root / "self" / "cgroup").read_text(encoding="utf-8").splitlines()
    except OSError:
        return v1, v2
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy_id, controllers, path = parts
        if hierarchy_id == "0" and not controllers:
            v2 = path
        else:
            for controller in controllers.split(","):
                v1[controller] = path
    return v1, v2
