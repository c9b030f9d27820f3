"""The FGD inflation protocol: static packing of an openb-format pod trace onto its nodes, per placement policy.

The experiment of Weng et al. (USENIX ATC'23), replayed through Phalanx's own scheduler core
(``SchedulingSession``), one pod at a time:

- the cluster is the node list, empty at start; per seed, a node order is drawn at random and kept for the
  whole run (nodes are renamed ``<rank>-<name>``, so the scheduler's tie-break by name follows it, as the
  published simulator's does);
- the workload is every pod of the trace, shuffled, followed by pods sampled with replacement from the
  trace, until the GPU demand that has arrived would pass ``inflation`` (1.3) times the GPU capacity;
- each pod is placed or fails for good; nothing departs; GPUs are requested as in the trace (whole GPUs, or a
  ``gpu_milli`` share of one GPU), CPU from the node's shared pool (no pinning), memory filtered;
- after every pod the run records arrived demand, allocated GPU share and fragmentation (``fragmentation.py``
  against the trace's typical shapes: the most frequent shapes covering 95 % of its pods).

The curve is then read at each whole percentage of arrived demand: the mean of the events whose arrived
demand rounds to it, or lies within one point of it (the published analysis does the same); a small trace
that arrives in coarser steps is read at its last event at or below the percentage. ``run_fgd`` returns
per-seed curves and their means; the CLI prints the ``RESULT`` line.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from phalanx.core.scheduling import (
    ClusterSnapshot,
    PendingJob,
    ReplicaRequest,
    SchedulerConfig,
    SchedulingSession,
    TaskShape,
)
from phalanx.core.scheduling.demands import demand_of
from phalanx.core.scheduling.fragmentation import WorkloadProfile, node_fragmentation, shape_of, typical_shapes
from phalanx.core.scheduling.table import NodeTable
from phalanx.model.resources import ResourceVector
from phalanx.sim.traces import OpenbPod

MIB = 2**20
MILLI = 1000
EPOCH = datetime(2023, 1, 1, tzinfo=UTC)
# Whole percentages of arrived demand the curves are read at: 0..130.
MAX_PERCENT = 130

# One recorded event: arrived %, allocated %, fragmented milli-GPU, fragmented share of idle %.
Event = tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class Unallocated:
    """Where the GPU capacity left idle at the end of a run is, in milli-GPU; the three parts are disjoint.

    Attributes:
        cpu_bound: on nodes whose free CPU is less than every typical GPU shape asks, whatever their GPUs hold.
        whole: elsewhere, in GPUs nothing uses.
        shares: elsewhere, what is left of GPUs a share of which is used.
    """

    cpu_bound: int = 0
    whole: int = 0
    shares: int = 0


def unallocated(table: NodeTable, shapes: Sequence[TaskShape]) -> Unallocated:
    """Split the idle GPU capacity of ``table`` by why the typical work cannot use it (``Unallocated``)."""
    free = np.where(table.gpu_present, table.gpu_free, 0)
    asks = [shape.cpu_milli for shape in shapes if shape.gpus]
    bound = table.cpu_free < min(asks) if asks else np.zeros(len(table.cpu_free), dtype=np.bool_)
    rest = free[~bound]
    return Unallocated(
        cpu_bound=int(free[bound].sum()),
        whole=int(np.where(rest == MILLI, rest, 0).sum()),
        shares=int(np.where(rest < MILLI, rest, 0).sum()),
    )


@dataclass(frozen=True, slots=True)
class SeedRun:
    """One seed's run: the curves at each whole percentage of arrived GPU demand.

    Attributes:
        seed: the seed.
        pods: pods offered.
        failed: pods that could not be placed.
        allocation: percent -> GPU allocation ratio (% of capacity).
        fragmentation_ratio: percent -> fragmented share of the idle GPU capacity (%).
        fragmentation_amount: percent -> fragmented GPU capacity (% of capacity).
        unallocated: where the idle GPU capacity is at the end of the run.
    """

    seed: int
    pods: int
    failed: int
    allocation: dict[int, float]
    fragmentation_ratio: dict[int, float]
    fragmentation_amount: dict[int, float]
    unallocated: Unallocated = field(default=Unallocated())


@dataclass(frozen=True, slots=True)
class FgdResult:
    """All seeds of one policy and the means the protocol reports."""

    policy: str
    runs: tuple[SeedRun, ...]
    capacity_milli: int
    shapes: tuple[TaskShape, ...] = field(default=())

    def mean(self, curve: str, percent: int) -> float:
        """The mean over seeds of a curve at ``percent`` arrived demand.

        ``curve`` is ``allocation``, ``fragmentation_ratio`` or ``fragmentation_amount``.
        """
        values = [getattr(run, curve).get(percent) for run in self.runs]
        present = [value for value in values if value is not None]
        return float(np.mean(present)) if present else float("nan")

    def idle_at_end(self) -> IdleAtEnd:
        """Each part of ``Unallocated``, the mean over seeds, in % of the GPU capacity."""
        if not self.runs or not self.capacity_milli:
            return IdleAtEnd(0.0, 0.0, 0.0)
        parts = (
            float(np.mean([getattr(run.unallocated, part) for run in self.runs])) * 100 / self.capacity_milli
            for part in ("cpu_bound", "whole", "shares")
        )
        return IdleAtEnd(*parts)


@dataclass(frozen=True, slots=True)
class IdleAtEnd:
    """``Unallocated`` in % of the GPU capacity, the mean over seeds."""

    cpu_bound: float
    whole: float
    shares: float


def pod_demand_milli(pod: OpenbPod) -> int:
    """The GPU demand of one pod in milli-GPU (``num_gpu`` GPUs of ``gpu_milli`` each)."""
    return pod.num_gpu * pod.gpu_milli if pod.num_gpu else 0


def inflated_workload(pods: Sequence[OpenbPod], capacity_milli: int, seed: int, inflation: float) -> list[OpenbPod]:
    """Every pod shuffled, then pods drawn with replacement until arrived demand would pass the target."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pods))
    workload = [pods[i] for i in order]
    target = inflation * capacity_milli
    arrived = sum(pod_demand_milli(pod) for pod in workload)
    while True:
        pod = pods[int(rng.integers(len(pods)))]
        if arrived + pod_demand_milli(pod) > target:
            break
        workload.append(pod)
        arrived += pod_demand_milli(pod)
    return workload


def seeded_node_order(snapshot: ClusterSnapshot, seed: int) -> ClusterSnapshot:
    """The same nodes renamed ``<rank>-<name>`` with ranks drawn at random, so name order is a seeded order."""
    rng = np.random.default_rng([seed, 1])
    ranks = rng.permutation(len(snapshot.nodes))
    width = len(str(len(snapshot.nodes)))
    return ClusterSnapshot(
        nodes=tuple(
            replace(node, name=f"{int(rank):0{width}d}-{node.name}")
            for node, rank in zip(snapshot.nodes, ranks, strict=True)
        )
    )


def trace_shapes(pods: Sequence[OpenbPod]) -> tuple[TaskShape, ...]:
    """The typical shapes of a trace: most frequent request shapes covering 95 % of its pods."""
    counts: Counter[TaskShape] = Counter(shape_of(demand_of(_replica(pod, 0))) for pod in pods)
    return typical_shapes(counts)


def _replica(pod: OpenbPod, position: int) -> ReplicaRequest:
    whole = pod.num_gpu if pod.num_gpu and pod.gpu_milli >= MILLI else 0
    share = pod.gpu_milli if pod.num_gpu == 1 and 0 < pod.gpu_milli < MILLI else 0
    return ReplicaRequest(
        name=f"p{position}",
        role="pod",
        resources=ResourceVector(cpu_milli=pod.cpu_milli, memory=pod.memory_mib * MIB, gpu=whole, gpu_milli=share),
        # Alternatives (``V100M16|V100M32``) are one constraint: any of them, none else.
        gpu_model="|".join(pod.gpu_spec) if pod.gpu_spec else None,
        pin_cpus=False,
    )


def run_seed(
    snapshot: ClusterSnapshot,
    pods: Sequence[OpenbPod],
    *,
    policy: str,
    seed: int,
    shapes: tuple[TaskShape, ...],
    inflation: float = 1.3,
    progress: Callable[[int, int], None] | None = None,
) -> SeedRun:
    """Replay one seed of the protocol under ``policy`` and read its curves."""
    capacity = sum(len([gpu for gpu in node.gpus if gpu.healthy]) for node in snapshot.nodes) * MILLI
    if capacity == 0:
        raise ValueError("the node list has no GPU: the protocol measures GPU allocation")
    workload = inflated_workload(pods, capacity, seed, inflation)
    # The protocol counts failed pods, never why they failed: the core need not explain them.
    config = SchedulerConfig(workload=shapes, seed=seed, explain=False)
    session = SchedulingSession(seeded_node_order(snapshot, seed), config)
    table = session.cluster.table
    profile = WorkloadProfile.build(shapes, table)
    node_frag = node_fragmentation(table, profile, slice(None))
    arrived = allocated = failed = 0
    events: list[Event] = []

    def record() -> None:
        frag = float(node_frag.sum())
        idle = capacity - allocated
        events.append((arrived / capacity * 100, allocated / capacity * 100, frag, frag / idle * 100 if idle else 0.0))

    record()
    for position, pod in enumerate(workload):
        arrived += pod_demand_milli(pod)
        job = PendingJob(
            key=f"pod-{position}",
            priority=0,
            created=EPOCH,
            queue="default",
            replicas=(_replica(pod, position),),
            placement=policy,
            topology="none",
        )
        decisions = session.cycle([job], EPOCH)
        if decisions.admitted:
            assignment = decisions.admitted[0].assignments[0]
            allocated += len(assignment.gpus) * (assignment.gpu_milli or MILLI)
            row = table.row_of[assignment.node]
            node_frag[row] = node_fragmentation(table, profile, np.array([row]))[0]
        else:
            failed += 1
        record()
        if progress is not None:
            progress(position + 1, len(workload))
    return replace(_curves(seed, len(workload), failed, events, capacity), unallocated=unallocated(table, shapes))


def _curves(
    seed: int, pods: int, failed: int, events: list[tuple[float, float, float, float]], capacity: int
) -> SeedRun:
    data = np.array(events)
    # Python's round (half to even), as the published analysis rounds arrived demand to whole percents.
    percents = np.array([round(value) for value in data[:, 0]])
    allocation: dict[int, float] = {}
    ratio: dict[int, float] = {}
    amount: dict[int, float] = {}
    for percent in range(MAX_PERCENT + 1):
        chosen = percents == percent
        if not chosen.any():
            chosen = np.abs(percents - percent) <= 1
        if not chosen.any():
            # A small trace arrives in coarse steps: read the state of the last event at or below the percentage.
            below = np.flatnonzero(data[:, 0] <= percent)
            if not below.size:
                continue
            chosen = np.zeros(len(data), dtype=np.bool_)
            chosen[below[-1]] = True
        allocation[percent] = float(data[chosen, 1].mean())
        amount[percent] = float(data[chosen, 2].mean() / capacity * 100)
        ratio[percent] = float(data[chosen, 3].mean())
    return SeedRun(seed, pods, failed, allocation, ratio, amount)


def run_fgd(
    snapshot: ClusterSnapshot,
    pods: Sequence[OpenbPod],
    *,
    policy: str,
    seeds: Sequence[int],
    inflation: float = 1.3,
    progress: Callable[[int, int, int], None] | None = None,
) -> FgdResult:
    """Run the protocol for every seed; ``progress(seed_index, done, total)`` is called as pods are offered."""
    if not pods:
        raise ValueError("the pod trace is empty")
    shapes = trace_shapes(pods)
    runs = []
    for index, seed in enumerate(seeds):
        report = None if progress is None else (lambda done, total, i=index: progress(i, done, total))
        runs.append(
            run_seed(snapshot, pods, policy=policy, seed=seed, shapes=shapes, inflation=inflation, progress=report)
        )
    capacity = sum(len(node.gpus) for node in snapshot.nodes) * MILLI
    return FgdResult(policy=policy, runs=tuple(runs), capacity_milli=capacity, shapes=shapes)


def result_line(result: FgdResult) -> str:
    """The protocol's machine-readable summary: means over the seeds."""
    return (
        f"RESULT policy={result.policy} allocation_at_100={result.mean('allocation', 100):.2f} "
        f"allocation_at_130={result.mean('allocation', MAX_PERCENT):.2f} "
        f"frag_at_80={result.mean('fragmentation_ratio', 80):.2f}"
    )


def write_fgd_report(results: Sequence[FgdResult], directory: Path, command: str) -> list[Path]:
    """Write ``report.md``, ``curves.csv`` and the allocation/fragmentation plots for ``results``.

    Returns the files written. Plots need matplotlib (the ``sim`` extra).
    """
    directory.mkdir(parents=True, exist_ok=True)
    written = [directory / "report.md", directory / "curves.csv"]
    with (directory / "curves.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["policy", "seed", "arrived_pct", "allocation_pct", "frag_ratio_pct", "frag_amount_pct"])
        for result in results:
            for run in result.runs:
                for percent in sorted(run.allocation):
                    writer.writerow(
                        [
                            result.policy,
                            run.seed,
                            percent,
                            f"{run.allocation[percent]:.4f}",
                            f"{run.fragmentation_ratio[percent]:.4f}",
                            f"{run.fragmentation_amount[percent]:.4f}",
                        ]
                    )
    lines = [
        "# FGD inflation protocol",
        "",
        f"Command: `{command}`",
        "",
        "Means over the seeds; allocation and fragmentation amount in % of GPU capacity, fragmentation ratio in %",
        "of the idle GPU capacity, read at whole percentages of arrived GPU demand.",
        "",
        "| policy | seeds | pods per seed | failed per seed | alloc @100 | alloc @130 | frag ratio @80 "
        "| frag amount @80 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        pods = np.mean([run.pods for run in result.runs])
        failed = np.mean([run.failed for run in result.runs])
        lines.append(
            f"| {result.policy} | {len(result.runs)} | {pods:.0f} | {failed:.0f} | "
            f"{result.mean('allocation', 100):.2f} | {result.mean('allocation', MAX_PERCENT):.2f} | "
            f"{result.mean('fragmentation_ratio', 80):.1f} | {result.mean('fragmentation_amount', 80):.1f} |"
        )
    lines += [
        "",
        "Where the GPU capacity left idle at the end of the run is (% of GPU capacity, mean over the seeds): on",
        "nodes whose free CPU is less than every typical GPU shape asks; elsewhere in GPUs nothing uses; elsewhere",
        "in what is left of GPUs a share of which is used.",
        "",
        "| policy | idle | on CPU-bound nodes | whole GPUs | left of shared GPUs |",
        "|---|---:|---:|---:|---:|",
    ]
    for result in results:
        idle = result.idle_at_end()
        lines.append(
            f"| {result.policy} | {idle.cpu_bound + idle.whole + idle.shares:.2f} | {idle.cpu_bound:.2f} | "
            f"{idle.whole:.2f} | {idle.shares:.2f} |"
        )
    lines += ["", "Per seed, allocation at 130 %:", ""]
    for result in results:
        values = ", ".join(f"{run.seed}: {run.allocation.get(MAX_PERCENT, float('nan')):.2f}" for run in result.runs)
        lines.append(f"- {result.policy}: {values}")
    lines += [
        "",
        "Plots: `allocation.png` (GPU allocation vs arrived demand), `fragmentation.png` (fragmentation ratio).",
        "",
    ]
    lines += [result_line(result) for result in results]
    (directory / "report.md").write_text("\n".join(lines) + "\n")
    written += _plots(results, directory)
    return written


def _plots(results: Sequence[FgdResult], directory: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:  # pragma: no cover - the test extra installs matplotlib
        raise RuntimeError("plots need matplotlib: pip install 'phalanx[sim]'") from error
    written: list[Path] = []
    for curve, name, label in (
        ("allocation", "allocation.png", "GPU allocation (% of capacity)"),
        ("fragmentation_ratio", "fragmentation.png", "fragmented share of idle GPUs (%)"),
    ):
        figure, axes = plt.subplots(figsize=(7, 4.5))
        for result in results:
            percents = list(range(MAX_PERCENT + 1))
            axes.plot(percents, [result.mean(curve, percent) for percent in percents], label=result.policy)
        axes.set_xlabel("arrived GPU demand (% of capacity)")
        axes.set_ylabel(label)
        axes.grid(alpha=0.3)
        axes.legend()
        figure.tight_layout()
        figure.savefig(directory / name, dpi=110)
        plt.close(figure)
        written.append(directory / name)
    return written
