"""The Kubernetes benchmarks' report: a plain text table, numbers for it, and the machine it ran on."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack"))
import k8s_testenv  # noqa: E402 - lives in hack/, on the path from the line above


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table: first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        parts = [row[0].ljust(widths[0]), *(row[i].rjust(widths[i]) for i in range(1, len(row)))]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def fmt(value: float | None, digits: int = 1) -> str:
    """A number for tables and RESULT lines; ``n/a`` for None or NaN."""
    if value is None or value != value:
        return "n/a"
    return f"{value:.{digits}f}"


def machine() -> str:
    """A one-line description of this machine, for the report."""
    cpus = os.cpu_count() or 0
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    except (ValueError, OSError):
        memory = float("nan")
    versions = k8s_testenv.pinned_versions()
    return (
        f"{cpus} CPUs, {memory:.0f} GiB, Python {sys.version.split()[0]}; Kubernetes {versions.kubernetes}, "
        f"kwok {versions.kwok}, etcd {versions.etcd}"
    )
