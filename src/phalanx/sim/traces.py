"""Trace loaders: the openb pod and node lists (Alibaba, ATC'23) and the ITP job lists (Microsoft, ASPLOS'23).

Each loader reads one CSV file into a tuple of frozen records, in file order, and checks every value it keeps:
a missing column, a cell that is not a number, a negative duration or GPU count, a GPU share outside 1..1000.
A bad file raises ``TraceError``, whose message names the file, the line (1 is the header), the column and
what to do about it. Extra columns are ignored, so a file with more columns than the published ones loads, and
the loaders work on any file of these formats, not only the copies that ship with Phalanx. An openb pod list
needs only the columns a placement reads (``OPENB_POD_REQUIRED``: name, CPU, memory, GPU count and share);
``gpu_spec``, ``qos``, ``pod_phase`` and the three times are read when present (absent: any model, empty, 0.0,
None), so a list cut down to the protocol's columns loads.

Numbers are read as the traces write them: integers where the format has integers (``8``; ``8.0`` is
accepted too, ``8.5`` is not), floats for times and durations. Times are seconds.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

OPENB_POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
#: The columns an openb pod list must have: what placing a pod reads. The others are read when present.
OPENB_POD_REQUIRED = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
OPENB_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
ITP_COLUMNS = ("job_id", "submission_time", "duration", "num_gpu")


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file, line and column, and the fix."""


@dataclass(frozen=True, slots=True)
class OpenbPod:
    """One row of an openb pod list.

    Attributes:
        name: pod name.
        cpu_milli: CPU requested, in millicores.
        memory_mib: memory requested, in MiB.
        num_gpu: GPUs requested (0 for a CPU-only pod).
        gpu_milli: share of each GPU, 1..1000 (1000 = whole GPUs); 0 when no GPU is requested.
        gpu_spec: allowed GPU models; empty means any.
        qos: the QoS class (LS, BE, Burstable, Guaranteed).
        pod_phase: Running, Succeeded, Failed or Pending.
        creation_time: seconds.
        deletion_time: seconds, or None when the cell is empty.
        scheduled_time: seconds, or None when the pod was never scheduled (empty cell).
    """

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...]
    qos: str
    pod_phase: str
    creation_time: float
    deletion_time: float | None
    scheduled_time: float | None


@dataclass(frozen=True, slots=True)
class OpenbNode:
    """One row of an openb node list: a node's name, CPU (millicores), memory (MiB), GPU count and model."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class ItpJob:
    """One row of an ITP job list.

    Attributes:
        job_id: the job's id (a UUID in the published traces).
        submission_time: seconds from the trace start.
        duration: run time in seconds.
        num_gpu: GPUs of the whole gang.
    """

    job_id: str
    submission_time: float
    duration: float
    num_gpu: int


class _Row:
    """One data row, with its file and line, that parses its cells into checked values."""

    __slots__ = ("cells", "line", "path")

    def __init__(self, path: Path, line: int, cells: Mapping[str, str]) -> None:
        self.path = path
        self.line = line
        self.cells = cells

    def error(self, column: str, problem: str) -> TraceError:
        return TraceError(f"{self.path}:{self.line}: column {column!r}: {problem}")

    def text(self, column: str, *, required: bool = True) -> str:
        value = self.cells[column].strip()
        if required and not value:
            raise self.error(column, "is empty; every row needs a value here")
        return value

    def number(self, column: str, *, minimum: float = 0.0) -> float:
        raw = self.text(column)
        try:
            value = float(raw)
        except ValueError:
            raise self.error(column, f"{raw!r} is not a number; write seconds as digits, e.g. 3600") from None
        if not math.isfinite(value):
            raise self.error(column, f"{raw!r} is not a finite number")
        if value < minimum:
            raise self.error(column, f"{raw!r} is below {minimum:g}; it cannot be negative")
        return value

    def optional_number(self, column: str) -> float | None:
        return self.number(column) if self.cells[column].strip() else None

    def integer(self, column: str, *, minimum: int = 0, maximum: int | None = None) -> int:
        raw = self.text(column)
        try:
            value = float(raw)
        except ValueError:
            raise self.error(column, f"{raw!r} is not a number; write a whole number, e.g. 8") from None
        if not value.is_integer():
            raise self.error(column, f"{raw!r} is not a whole number; write a whole number, e.g. 8")
        whole = int(value)
        if whole < minimum or (maximum is not None and whole > maximum):
            bounds = f"from {minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
            raise self.error(column, f"{raw!r} is out of range; it must be {bounds}")
        return whole


def _rows(path: Path, columns: Sequence[str], fmt: str, required: Sequence[str] | None = None) -> Iterator[_Row]:
    """Yield the data rows of a CSV file after checking that its header has every column of ``required``.

    ``required`` defaults to all of ``columns``; a column of ``columns`` the header lacks is left out of the rows.
    """
    required = columns if required is None else required
    try:
        handle = path.open(newline="", encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file; check the path of the {fmt} trace") from None
    except OSError as err:
        raise TraceError(f"{path}: cannot be read ({err.strerror or err})") from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, None)
            if header is None:
                raise TraceError(f"{path}: the file is empty; a {fmt} trace starts with the header {','.join(columns)}")
            names = [name.strip() for name in header]
            missing = [column for column in required if column not in names]
            if missing:
                optional = [column for column in columns if column not in required]
                also = f" (and may have {','.join(optional)})" if optional else ""
                raise TraceError(
                    f"{path}:1: the header lacks column(s) {', '.join(repr(c) for c in missing)}; a {fmt} trace has "
                    f"the columns {','.join(required)}{also} (found {','.join(names)})"
                )
            position = {name: names.index(name) for name in columns if name in names}
            for cells in reader:
                if not cells or all(not cell.strip() for cell in cells):
                    continue
                if len(cells) != len(names):
                    raise TraceError(
                        f"{path}:{reader.line_num}: the row has {len(cells)} field(s) but the header has "
                        f"{len(names)}; check for a missing or extra comma"
                    )
                yield _Row(path, reader.line_num, {column: cells[i] for column, i in position.items()})
        except UnicodeDecodeError as err:
            raise TraceError(f"{path}: not UTF-8 text ({err.reason}); is this a CSV file?") from None
        except csv.Error as err:
            raise TraceError(f"{path}:{reader.line_num}: not valid CSV ({err})") from None


def _load(
    path: Path | str,
    columns: Sequence[str],
    fmt: str,
    parse: Callable[[_Row], T],
    required: Sequence[str] | None = None,
) -> tuple[tuple[int, T], ...]:
    """Each data row's line number and parsed record."""
    return tuple((row.line, parse(row)) for row in _rows(Path(path), columns, fmt, required))


def _pod(row: _Row) -> OpenbPod:
    num_gpu = row.integer("num_gpu")
    gpu_milli = row.integer("gpu_milli", maximum=1000)
    if num_gpu and gpu_milli == 0:
        raise row.error("gpu_milli", "is 0 but the pod asks for GPUs; write 1000 for whole GPUs")
    if num_gpu > 1 and gpu_milli != 1000:
        raise row.error("gpu_milli", f"is {gpu_milli} for a {num_gpu}-GPU pod; only one-GPU pods may share a GPU")
    spec = row.text("gpu_spec", required=False) if "gpu_spec" in row.cells else ""
    return OpenbPod(
        name=row.text("name"),
        cpu_milli=row.integer("cpu_milli"),
        memory_mib=row.integer("memory_mib"),
        num_gpu=num_gpu,
        gpu_milli=gpu_milli if num_gpu else 0,
        gpu_spec=tuple(model.strip() for model in spec.split("|") if model.strip()),
        qos=row.text("qos", required=False) if "qos" in row.cells else "",
        pod_phase=row.text("pod_phase", required=False) if "pod_phase" in row.cells else "",
        creation_time=row.number("creation_time") if "creation_time" in row.cells else 0.0,
        deletion_time=row.optional_number("deletion_time") if "deletion_time" in row.cells else None,
        scheduled_time=row.optional_number("scheduled_time") if "scheduled_time" in row.cells else None,
    )


def _node(row: _Row) -> OpenbNode:
    gpus = row.integer("gpu")
    return OpenbNode(
        name=row.text("sn"),
        cpu_milli=row.integer("cpu_milli"),
        memory_mib=row.integer("memory_mib"),
        gpus=gpus,
        model=row.text("model", required=gpus > 0),
    )


def _itp_job(row: _Row) -> ItpJob:
    return ItpJob(
        job_id=row.text("job_id"),
        submission_time=row.number("submission_time"),
        duration=row.number("duration"),
        num_gpu=row.integer("num_gpu"),
    )


def load_openb_pods(path: Path | str) -> tuple[OpenbPod, ...]:
    """Read an openb pod list (``openb_pod_list_*.csv``).

    Raises:
        TraceError: the file is missing or unreadable, lacks a column, or has a bad value.
    """
    return tuple(pod for _, pod in _load(path, OPENB_POD_COLUMNS, "openb pod", _pod, OPENB_POD_REQUIRED))


def load_openb_nodes(path: Path | str) -> tuple[OpenbNode, ...]:
    """Read an openb node list (``openb_node_list_*.csv``); node names must be unique.

    Raises:
        TraceError: the file is missing or unreadable, lacks a column, has a bad value or a repeated node name.
    """
    rows = _load(path, OPENB_NODE_COLUMNS, "openb node", _node)
    _check_unique(path, [(line, node.name) for line, node in rows], "sn", "node name")
    return tuple(node for _, node in rows)


def load_itp_jobs(path: Path | str) -> tuple[ItpJob, ...]:
    """Read an ITP job list (``cluster*.csv`` of microsoft/elasticflow-traces); job ids must be unique.

    Raises:
        TraceError: the file is missing or unreadable, lacks a column, has a bad value or a repeated job id.
    """
    rows = _load(path, ITP_COLUMNS, "ITP job", _itp_job)
    _check_unique(path, [(line, job.job_id) for line, job in rows], "job_id", "job id")
    return tuple(job for _, job in rows)


def _check_unique(path: Path | str, names: Sequence[tuple[int, str]], column: str, what: str) -> None:
    seen: dict[str, int] = {}
    for line, name in names:
        if name in seen:
            raise TraceError(
                f"{path}:{line}: column {column!r}: {what} {name!r} already appears on line {seen[name]}; "
                f"each {what} must be unique"
            )
        seen[name] = line
