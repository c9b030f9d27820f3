"""``phalanx sim``: replay a trace or a generated workload on a simulated cluster and write a report.

``phalanx sim run`` builds the cluster (synthetic N x G GPU nodes, or nodes of an openb node list), the workload
(an ITP trace, or a Poisson or FfDL-like generator), runs every requested variant (queue order x placement x
gang on/off) through ``phalanx.sim.engine.simulate`` — the same scheduler core the runtimes use — with a
progress bar, prints a summary and writes the report directory (``phalanx.sim.report``).

``--scheduler-config FILE`` reads the SchedulerConfiguration that ``phalanx up`` and ``phalanx-scheduler`` read
(docs/scheduling.md): its fields are the defaults of ``--queue-order``, ``--queueing-strategy``, ``--placement``,
``--preemption``, ``--time-slicing`` and ``--starve-limit`` (and the bands), and a flag given as well wins.

This module only translates options; the simulator itself is imported when the command runs, so ``phalanx``'s
other commands do not pay for numpy. Bad input (a missing file, a bad column, a nonsense number, an unknown
policy) exits with code 2 and a message naming what to fix.
"""

from __future__ import annotations

import shlex
import sys
from enum import StrEnum
from itertools import product
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, get_args

import typer

from phalanx.entrypoints.cli.output import fail

if TYPE_CHECKING:
    from phalanx.core.scheduling import ClusterSnapshot
    from phalanx.core.scheduling.config import SchedulerConfig
    from phalanx.sim.engine import SimOptions, SimResult
    from phalanx.sim.workloads import SimJob

sim_app = typer.Typer(
    name="sim",
    help="Simulate scheduling policies on traces or generated workloads, with the scheduler Phalanx runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class Generator(StrEnum):
    """Workload generators."""

    POISSON = "poisson"
    FFDL = "ffdl"


class Intensity(StrEnum):
    """FfDL-like load levels."""

    LIGHT = "light"
    HEAVY = "heavy"


class Interconnect(StrEnum):
    """GPU interconnect of synthetic nodes."""

    PCIE = "pcie"
    NVSWITCH = "nvswitch"


TRACE_FORMATS = ("itp",)
NODE_TRACE_FORMATS = ("openb",)
DEFAULT_JOBS = 500
DEFAULT_LOAD = 0.8


def _source(spec: str, formats: tuple[str, ...], option: str) -> Path:
    """``FORMAT:PATH`` -> PATH, checking the format; a usage error (exit 2) otherwise."""
    fmt, sep, path = spec.partition(":")
    if not sep or fmt not in formats or not path:
        fail(f"{option} {spec!r}: write FORMAT:PATH with FORMAT one of {', '.join(formats)}, e.g. {formats[0]}:FILE", 2)
    return Path(path)


@sim_app.command("run")
def run(
    trace: Annotated[
        str | None, typer.Option("--trace", help="Replay a trace: itp:PATH (an ITP job list CSV).", show_default=False)
    ] = None,
    generate: Annotated[
        Generator | None, typer.Option("--generate", help="Generate a workload instead: poisson or ffdl.")
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", min=1, help=f"Jobs to generate (default {DEFAULT_JOBS}), or the first N of a trace."),
    ] = None,
    rate: Annotated[
        float | None,
        typer.Option(
            "--rate",
            min=0.0,
            help="Arrivals per hour (poisson default: from --load; ffdl default: from --intensity).",
        ),
    ] = None,
    load: Annotated[
        float,
        typer.Option("--load", min=0.0, help="poisson: offered GPU load as a fraction of the cluster's GPUs."),
    ] = DEFAULT_LOAD,
    intensity: Annotated[
        Intensity, typer.Option("--intensity", help="ffdl: light (50% load) or heavy (120% load).")
    ] = Intensity.HEAVY,
    max_gpus_per_replica: Annotated[
        int,
        typer.Option(
            "--max-gpus-per-replica", min=1, help="trace and poisson: split gangs into replicas of at most this."
        ),
    ] = 8,
    nodes: Annotated[
        int | None, typer.Option("--nodes", min=1, help="Nodes (default 16; with --node-trace, all of the list).")
    ] = None,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", min=0, help="GPUs per synthetic node.")] = 8,
    gpu_model: Annotated[
        str | None,
        typer.Option(
            "--gpu-model",
            help="GPU model(s) of synthetic nodes, comma-separated, nodes split evenly "
            "(default V100; ffdl: K80,P100,V100).",
        ),
    ] = None,
    cpus_per_node: Annotated[
        int | None, typer.Option("--cpus-per-node", min=1, help="CPUs per synthetic node (default 8 per GPU).")
    ] = None,
    memory_per_node: Annotated[
        int | None,
        typer.Option("--memory-per-node", min=1, help="Memory per synthetic node in GiB (default 64 per GPU)."),
    ] = None,
    interconnect: Annotated[
        Interconnect, typer.Option("--interconnect", help="GPU links of synthetic nodes: pcie or nvswitch.")
    ] = Interconnect.PCIE,
    node_trace: Annotated[
        str | None,
        typer.Option("--node-trace", help="Take the nodes from a node list: openb:PATH.", show_default=False),
    ] = None,
    queue_order: Annotated[
        list[str] | None,
        typer.Option(
            "--queue-order",
            help="fifo, priority (the same as fifo), shortest-first or least-attained-service; repeat to compare "
            "(default fifo; with --compare, fifo and shortest-first).",
        ),
    ] = None,
    placement: Annotated[
        list[str] | None,
        typer.Option(
            "--placement",
            help="Placement policy (pack, spread, binpack, fragmentation, random, auto); repeat to compare.",
        ),
    ] = None,
    topology: Annotated[str, typer.Option("--topology", help="GPU topology rule: none, preferred, required.")] = (
        "preferred"
    ),
    gang: Annotated[
        bool, typer.Option("--gang/--no-gang", help="Admit whole gangs, or place pod by pod (the baseline).")
    ] = True,
    strategy: Annotated[
        list[str] | None,
        typer.Option(
            "--queueing-strategy",
            help="best-effort-fifo, strict-fifo or backfill; repeat to compare (default best-effort-fifo).",
        ),
    ] = None,
    preemption: Annotated[
        bool | None,
        typer.Option(
            "--preemption/--no-preemption",
            help="Let higher-priority jobs stop lower-priority ones (default: off, or the --scheduler-config's).",
            show_default=False,
        ),
    ] = None,
    time_slicing: Annotated[
        bool | None,
        typer.Option(
            "--time-slicing/--no-time-slicing",
            help="least-attained-service runs: preempt running jobs whose attained GPU time put them in a "
            "lower band (Tiresias); needs gang admission.",
            show_default=False,
        ),
    ] = None,
    starve_limit: Annotated[
        float | None,
        typer.Option(
            "--starve-limit",
            min=0.0,
            help="With --time-slicing: promote a waiting job to the top band once it waited this many times "
            "as long as it ran (default 0: never).",
            show_default=False,
        ),
    ] = None,
    scheduler_config: Annotated[
        Path | None,
        typer.Option(
            "--scheduler-config",
            help="A SchedulerConfiguration file (as for phalanx up and phalanx-scheduler); flags given win.",
            show_default=False,
        ),
    ] = None,
    restart_penalty: Annotated[
        float,
        typer.Option("--restart-penalty", min=0.0, help="Seconds a preempted job adds to its run time."),
    ] = 0.0,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="Let the core explain every waiting job in every cycle (slower; same decisions and report).",
        ),
    ] = False,
    compare: Annotated[
        bool, typer.Option("--compare", help="Run gang and pod-by-pod for every queue order and placement.")
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of generated workloads and random placement.")] = 0,
    out: Annotated[Path, typer.Option("--out", help="Report directory (created; files in it are replaced).")] = Path(
        "sim-report"
    ),
) -> None:
    """Run a simulation and write report.md, metrics.csv, jobs.csv and plots to --out."""
    from phalanx.sim.clusters import gpus_by_model
    from phalanx.sim.engine import check_options
    from phalanx.sim.report import ReportError, check_plotting
    from phalanx.sim.traces import TraceError

    if (trace is None) == (generate is None):
        fail("give exactly one workload: --trace itp:PATH or --generate poisson|ffdl", 2)
    try:
        check_plotting()
    except ReportError as err:
        fail(str(err), 1)
    try:
        cluster, cluster_line = _cluster(
            node_trace,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            gpu_models=gpu_model or ("K80,P100,V100" if generate is Generator.FFDL else "V100"),
            cpus_per_node=cpus_per_node,
            memory_per_node=memory_per_node,
            interconnect=interconnect.value,
        )
        if trace is not None:
            workload, workload_line = _trace_jobs(trace, limit=jobs, max_gpus_per_replica=max_gpus_per_replica)
        else:
            assert generate is not None
            workload, workload_line = _generated_jobs(
                generate,
                count=jobs or DEFAULT_JOBS,
                rate=rate,
                load=load,
                intensity=intensity,
                gpus=gpus_by_model(cluster),
                seed=seed,
                max_gpus_per_replica=max_gpus_per_replica,
            )
        policy, held = _policy(scheduler_config)
        from_file = scheduler_config is not None
        variants = _variants(
            queue_order or ([policy.queue_order] if from_file else None),
            placement or ([policy.placement] if from_file else None),
            topology=topology,
            gang=gang,
            compare=compare,
            seed=seed,
            strategies=strategy or ([policy.queueing_strategy] if from_file else None),
            preemption=policy.preemption if preemption is None else preemption,
            time_slicing=policy.las_preempt if time_slicing is None else time_slicing,
            starve_limit=policy.las_starve_limit if starve_limit is None else starve_limit,
            restart_penalty=restart_penalty,
            explain=explain,
            las_thresholds=policy.las_thresholds,
        )
        for variant in variants:
            check_options(variant)
    except (TraceError, ValueError) as err:
        fail(str(err), 2)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        fail(f"--out {out}: cannot create the directory ({err.strerror or err})", 2)
    results = _simulate_all(cluster, workload, variants)
    try:
        from phalanx.sim.report import write_report

        files = write_report(
            out,
            results,
            command=shlex.join(["phalanx", *sys.argv[1:]]),
            setup=[workload_line, cluster_line, f"seed: {seed}", *held],
        )
    except ReportError as err:
        fail(str(err), 1)
    _print_summary(results)
    typer.echo(f"report: {files.report}")


def _cluster(
    node_trace: str | None,
    *,
    nodes: int | None,
    gpus_per_node: int,
    gpu_models: str,
    cpus_per_node: int | None,
    memory_per_node: int | None,
    interconnect: str,
) -> tuple[ClusterSnapshot, str]:
    from phalanx.sim.clusters import GIB, gpu_capacity, openb_cluster, synthetic_cluster
    from phalanx.sim.traces import load_openb_nodes

    if node_trace is not None:
        path = _source(node_trace, NODE_TRACE_FORMATS, "--node-trace")
        cluster = openb_cluster(load_openb_nodes(path), nodes)
        line = f"cluster: the first {len(cluster.nodes):,} nodes of {path.name} ({gpu_capacity(cluster):,} GPUs)"
        return cluster, line
    count = nodes if nodes is not None else 16
    models = tuple(model.strip() for model in gpu_models.split(",") if model.strip())
    cluster = synthetic_cluster(
        count,
        gpus_per_node,
        gpu_models=models,
        cpus_per_node=cpus_per_node,
        memory_per_node=memory_per_node * GIB if memory_per_node is not None else None,
        interconnect=interconnect,
    )
    first = cluster.nodes[0]
    line = (
        f"cluster: {count:,} nodes x {gpus_per_node} GPUs ({'/'.join(models)}, {interconnect}) = "
        f"{gpu_capacity(cluster):,} GPUs; {len(first.cpus)} CPUs and {first.memory // GIB} GiB per node"
    )
    return cluster, line


def _trace_jobs(trace: str, *, limit: int | None, max_gpus_per_replica: int) -> tuple[tuple[SimJob, ...], str]:
    from phalanx.sim.traces import load_itp_jobs
    from phalanx.sim.workloads import jobs_from_itp

    path = _source(trace, TRACE_FORMATS, "--trace")
    records = load_itp_jobs(path)
    if not records:
        raise ValueError(f"{path}: the trace has no job")
    workload = jobs_from_itp(
        records[:limit] if limit is not None else records, max_gpus_per_replica=max_gpus_per_replica
    )
    first = f"the first {len(workload):,} of " if len(workload) < len(records) else ""
    return workload, f"workload: {first}{len(records):,} jobs of the ITP trace {path.name}"


def _generated_jobs(
    generator: Generator,
    *,
    count: int,
    rate: float | None,
    load: float,
    intensity: Intensity,
    gpus: dict[str, int],
    seed: int,
    max_gpus_per_replica: int,
) -> tuple[tuple[SimJob, ...], str]:
    from phalanx.sim.workloads import (
        DEFAULT_DURATION,
        DEFAULT_GANG_MIX,
        ffdl_workload,
        mean_gang_size,
        poisson_workload,
        rate_for_load,
    )

    if generator is Generator.FFDL:
        workload = ffdl_workload(count, intensity=intensity.value, gpus_by_model=gpus, seed=seed, rate_per_hour=rate)
        load_text = f"{rate:g} arrivals/hour" if rate else f"{intensity.value} load"
        return workload, f"workload: {count:,} FfDL-like jobs, {load_text}, models {', '.join(gpus)}"
    if rate is None:
        rate = rate_for_load(
            load,
            capacity_gpus=sum(gpus.values()),
            mean_gpus=mean_gang_size(DEFAULT_GANG_MIX),
            mean_duration=DEFAULT_DURATION.mean,
        )
    workload = poisson_workload(count, rate_per_hour=rate, seed=seed, max_gpus_per_replica=max_gpus_per_replica)
    return workload, f"workload: {count:,} Poisson arrivals at {rate:.2f} jobs/hour"


def _variants(
    queue_orders: list[str] | None,
    placements: list[str] | None,
    *,
    topology: str,
    gang: bool,
    compare: bool,
    seed: int,
    strategies: list[str] | None = None,
    preemption: bool = False,
    time_slicing: bool = False,
    starve_limit: float = 0.0,
    restart_penalty: float = 0.0,
    explain: bool = False,
    las_thresholds: tuple[float, ...] | None = None,
) -> list[SimOptions]:
    """Every combination of the options; time slicing applies to the least-attained-service gang runs."""
    from phalanx.core.scheduling.config import DEFAULT_LAS_THRESHOLDS, FIFO, LEAST_ATTAINED_SERVICE
    from phalanx.core.scheduling.policies import TOPOLOGIES
    from phalanx.model.scheduler_config import PlacementPolicy, QueueingStrategy, QueueOrder
    from phalanx.sim.engine import SimOptions

    # Checked here, naming the flag: the core would name its own field (queue_order) or a made-up job.
    for flag, values, allowed in (
        ("--queue-order", queue_orders, get_args(QueueOrder)),
        ("--queueing-strategy", strategies, get_args(QueueingStrategy)),
        ("--placement", placements, get_args(PlacementPolicy)),
        ("--topology", [topology], sorted(TOPOLOGIES)),
    ):
        for value in values or ():
            if value not in allowed:
                raise ValueError(f"{flag} {value!r} is not one of {', '.join(allowed)}")
    # `priority` is `fifo`, as in the configuration file: every order puts higher priorities first.
    given = [FIFO if order == "priority" else order for order in queue_orders or ()]
    orders = list(dict.fromkeys(given or (["fifo", "shortest-first"] if compare else ["fifo"])))
    chosen = list(dict.fromkeys(placements or ["auto"]))
    gangs = [True, False] if compare else [gang]
    kinds = list(dict.fromkeys(strategies or ["best-effort-fifo"]))
    if time_slicing and LEAST_ATTAINED_SERVICE not in orders:
        raise ValueError(f"--time-slicing applies to --queue-order {LEAST_ATTAINED_SERVICE}; none is requested")
    if time_slicing and True not in gangs:
        raise ValueError("--time-slicing needs gang admission (drop --no-gang)")
    if starve_limit and not time_slicing:
        raise ValueError("--starve-limit needs --time-slicing")
    variants = []
    for order, kind, where, on in product(orders, kinds, chosen, gangs):
        slicing = time_slicing and order == LEAST_ATTAINED_SERVICE
        if slicing and not on:
            continue  # pod by pod cannot time-slice; the gang run of the same order is there
        variants.append(
            SimOptions(
                queue_order=order,
                placement=where,
                topology=topology,
                gang=on,
                seed=seed,
                queueing_strategy=kind,
                preemption=preemption,
                time_slicing=slicing,
                starve_limit=starve_limit if slicing else 0.0,
                restart_penalty=restart_penalty,
                las_thresholds=las_thresholds or DEFAULT_LAS_THRESHOLDS,
                explain=explain,
            )
        )
    return variants


def _policy(path: Path | None) -> tuple[SchedulerConfig, list[str]]:
    """The base policy of ``--scheduler-config`` (the simulator's defaults without one: preemption off).

    Also the report's line saying what the file held: its name alone would not tell a later reader which bands ran.
    """
    import json

    from phalanx.core.scheduling.config import SchedulerConfig, from_configuration
    from phalanx.model.loading import read_scheduler_configuration

    if path is None:
        return SchedulerConfig(), []
    configuration = read_scheduler_configuration(path)
    fields = {key: value for key, value in configuration.to_dict().items() if key not in ("apiVersion", "kind")}
    return from_configuration(configuration), [f"scheduler configuration ({path}): {json.dumps(fields)}"]


def _simulate_all(
    cluster: ClusterSnapshot, workload: tuple[SimJob, ...], variants: list[SimOptions]
) -> list[SimResult]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    from phalanx.entrypoints.cli.output import rich_console
    from phalanx.sim.engine import simulate

    results: list[SimResult] = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs finished"),
        TimeElapsedColumn(),
        console=rich_console(stderr=True),
    ) as progress:
        for variant in variants:
            task = progress.add_task(variant.label, total=len(workload))

            def update(finished: int, total: int, task: TaskID = task) -> None:
                progress.update(task, completed=finished, total=total)

            results.append(simulate(cluster, workload, variant, progress=update))
    return results


def _print_summary(results: list[SimResult]) -> None:
    from rich.table import Table

    from phalanx.entrypoints.cli.output import rich_console
    from phalanx.sim.metrics import METRICS, compute_metrics

    shown = (
        "jobs_finished",
        "jct_mean_s",
        "queueing_mean_s",
        "gpu_allocation_pct",
        "partial_gang_idle_gpu_s",
        "preemptions",
    )
    columns = [column for column in METRICS if column.name in shown]
    table = Table("run", *(column.title for column in columns), "deadlock")
    for result in results:
        values = compute_metrics(result)
        table.add_row(
            result.options.label,
            *(column.format(values[column.name]) for column in columns),
            "yes" if result.deadlock else "no",
        )
    rich_console().print(table)
    for result in results:
        if result.deadlock is not None:
            rich_console().print(f"{result.options.label}: {result.deadlock.describe()}")
