"""``phalanx sim fgd``: the FGD inflation protocol on any openb-format pod and node list (``phalanx.sim.fgd``).

Prints a table per policy and ends with one ``RESULT policy=… allocation_at_100=… allocation_at_130=…
frag_at_80=…`` line per policy (means over the seeds); ``--out`` also writes a report directory (markdown, CSV
and plots). Without ``--policy`` the placement Phalanx uses by default (``auto``) runs. ``--mix`` replays a mix
drawn from the pod list instead (``phalanx.sim.mixes``: GPU-sharing-, multi-GPU-, CPU-heavy or model-constrained).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from phalanx.entrypoints.cli.output import fail
from phalanx.entrypoints.cli.sim import sim_app

DEFAULT_POLICY = "auto"


def parse_seeds(text: str) -> list[int]:
    """``42-51`` or ``42,43,50`` (or a mix) -> the seeds; a usage error for anything else."""
    seeds: list[int] = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            if dash:
                low, high = int(first), int(last)
                if high < low:
                    raise ValueError
                seeds.extend(range(low, high + 1))
            else:
                seeds.append(int(first))
        except ValueError:
            fail(f"--seeds {text!r}: write a range (42-51), a list (42,43) or both (1-3,7)", 2)
    return seeds


@sim_app.command("fgd")
def fgd(
    pods: Annotated[Path, typer.Option("--pods", help="openb pod list CSV (name, cpu_milli, ..., gpu_spec).")],
    nodes: Annotated[
        Path, typer.Option("--nodes", help="openb node list CSV (sn, cpu_milli, memory_mib, gpu, model).")
    ],
    policy: Annotated[
        list[str] | None,
        typer.Option("--policy", help="Placement policy; repeat to compare several. Default: auto (Phalanx's)."),
    ] = None,
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds: a range 42-51, a list 42,43, or both.")] = "42-51",
    inflation: Annotated[
        float, typer.Option("--inflation", min=0.01, help="Stop when arrived GPU demand reaches this x capacity.")
    ] = 1.3,
    out: Annotated[Path | None, typer.Option("--out", help="Also write report.md, curves.csv and plots here.")] = None,
    mix: Annotated[
        str | None,
        typer.Option(
            "--mix",
            help="Replay a mix drawn from --pods instead: gpushare=P (P % of the GPU demand shares GPUs), "
            "multigpu=P (P % from multi-GPU pods), cpu=P (CPU-only pods ask P % of the cluster's CPU), "
            "gpuspec=P (P % of GPU pods constrained to GPU models), as the FGD paper's trace variants.",
        ),
    ] = None,
    mix_seed: Annotated[int, typer.Option("--mix-seed", help="The seed the mix is drawn with.")] = 1,
) -> None:
    """Replay the FGD inflation protocol (Weng et al., ATC'23) through Phalanx's scheduler and print RESULT lines."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from phalanx.core.scheduling.policies import PLACEMENTS
    from phalanx.entrypoints.cli.output import rich_console
    from phalanx.sim.clusters import openb_cluster
    from phalanx.sim.fgd import MAX_PERCENT, FgdResult, result_line, run_fgd, write_fgd_report
    from phalanx.sim.mixes import Mix, make_mix
    from phalanx.sim.traces import TraceError, load_openb_nodes, load_openb_pods

    policies = policy or [DEFAULT_POLICY]
    unknown = [name for name in policies if name not in PLACEMENTS]
    if unknown:
        fail(f"--policy {unknown[0]!r} is not a placement policy; use one of {', '.join(sorted(PLACEMENTS))}", 2)
    chosen_seeds = parse_seeds(seeds)
    try:
        chosen_mix = Mix.parse(mix) if mix is not None else None
    except ValueError as error:
        fail(f"--mix: {error}", 2)
    try:
        trace = load_openb_pods(pods)
        node_list = load_openb_nodes(nodes)
        cluster = openb_cluster(node_list)
        if chosen_mix is not None:
            trace = tuple(make_mix(trace, chosen_mix, mix_seed, node_list))
            rich_console(stderr=True).print(f"mix {chosen_mix.label} (seed {mix_seed}): {len(trace)} pods")
    except (TraceError, OSError, ValueError) as error:
        fail(str(error), 2)
    results: list[FgdResult] = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("pods"),
        TimeElapsedColumn(),
        console=rich_console(stderr=True),
    ) as progress:
        for name in policies:
            task = progress.add_task(f"{name} seed {chosen_seeds[0]}", total=None)

            def update(index: int, done: int, total: int, task: TaskID = task, name: str = name) -> None:
                progress.update(task, description=f"{name} seed {chosen_seeds[index]}", completed=done, total=total)

            try:
                results.append(
                    run_fgd(cluster, trace, policy=name, seeds=chosen_seeds, inflation=inflation, progress=update)
                )
            except ValueError as error:
                fail(str(error), 2)
    table = Table(
        "policy", "seeds", "alloc @100 %", f"alloc @{MAX_PERCENT} %", "frag ratio @80 %", "frag @80 % of GPUs"
    )
    for result in results:
        table.add_row(
            result.policy,
            str(len(result.runs)),
            f"{result.mean('allocation', 100):.2f}",
            f"{result.mean('allocation', MAX_PERCENT):.2f}",
            f"{result.mean('fragmentation_ratio', 80):.1f}",
            f"{result.mean('fragmentation_amount', 80):.1f}",
        )
    rich_console().print(table)
    idle = Table(
        "policy",
        "idle at the end %",
        "on CPU-bound nodes",
        "whole GPUs",
        "left of shared GPUs",
        title="Where the idle GPU capacity is at the end of the run (% of GPUs)",
    )
    for result in results:
        parts = result.idle_at_end()
        idle.add_row(
            result.policy,
            f"{parts.cpu_bound + parts.whole + parts.shares:.2f}",
            f"{parts.cpu_bound:.2f}",
            f"{parts.whole:.2f}",
            f"{parts.shares:.2f}",
        )
    rich_console().print(idle)
    if out is not None:
        command = "phalanx " + " ".join(shlex.quote(arg) for arg in sys.argv[1:])
        for path in write_fgd_report(results, out, command):
            rich_console(stderr=True).print(f"wrote {path}")
    for result in results:
        print(result_line(result))
