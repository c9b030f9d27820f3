"""The Sweep nouns of ``phalanx``: `get sweeps`, `delete sweep`, and `describe sweep`'s place.

``describe_sweep`` prints a minimal status here; the sweep controller's work (issue 17: the trials table sorted
by objective, the best trial and its parameters, stopped trials) replaces it, as ``phalanx sweep best`` joins it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from phalanx.entrypoints.cli.options import Output, print_objects
from phalanx.entrypoints.cli.output import console

if TYPE_CHECKING:
    from phalanx.entrypoints.client import Client
    from phalanx.entrypoints.kubernetes.client import KubernetesClient
    from phalanx.model.sweeps import Sweep


def best_value(sweep: Sweep) -> str:
    """The best trial's objective value, or ``-`` while there is none."""
    best = sweep.status.best_trial
    return f"{best.value:.6g}" if best is not None else "-"


def sweeps_table(sweeps: list[Sweep], *, namespaces: bool = False) -> Table:
    """`phalanx get sweeps`: NAME PHASE TRIALS (created/max) RUNNING BEST AGE."""
    from phalanx.entrypoints.cli.render import age
    from phalanx.entrypoints.cli.styles import styled_phase

    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ["NAME", "PHASE", "TRIALS", "RUNNING", "BEST", "AGE"]
    for column in ["NAMESPACE", *columns] if namespaces else columns:
        table.add_column(column)
    for sweep in sweeps:
        trials = sweep.status.trials
        row = [
            sweep.metadata.name,
            styled_phase(sweep.status.phase),
            f"{trials.created}/{sweep.spec.max_trials}",
            str(trials.running),
            best_value(sweep),
            age(sweep.metadata.creation_timestamp),
        ]
        table.add_row(*([sweep.metadata.namespace, *row] if namespaces else row))
    return table


def show_sweeps(client: Client | KubernetesClient, name: str | None, output: Output, everywhere: bool) -> None:
    """Print the sweeps (only ``name``; every namespace's when ``everywhere``) as a table or as YAML/JSON."""
    ops = client.ops
    sweeps = (
        [ops.get_sweep(client.namespace, name)] if name else ops.list_sweeps(None if everywhere else client.namespace)
    )
    if output in (Output.YAML, Output.JSON):
        print_objects(sweeps, output)
    elif not sweeps:
        where = "any namespace" if everywhere else client.namespace
        console.print(f"No sweeps in {where}: submit one with `phalanx submit -f sweep.yaml` (see docs/sweeps.md).")
    else:
        console.print(sweeps_table(sweeps, namespaces=everywhere))


def describe_sweep(client: Client | KubernetesClient, name: str) -> None:
    """`phalanx describe sweep NAME`: its phase, trial counts and best trial (the sweep controller's to extend)."""
    from phalanx.entrypoints.cli.styles import styled_phase

    sweep = client.ops.get_sweep(client.namespace, name)
    spec, status = sweep.spec, sweep.status
    console.print(f"[bold]Name:[/]       {sweep.metadata.name}")
    console.print(f"[bold]Namespace:[/]  {sweep.metadata.namespace}")
    console.print(f"[bold]Phase:[/]      {styled_phase(status.phase)}")
    if status.message:
        console.print(f"[bold]Message:[/]    {escape(status.message)}")
    console.print(f"[bold]Algorithm:[/]  {spec.algorithm.name} (seed {spec.algorithm.seed})")
    console.print(f"[bold]Objective:[/]  {spec.objective.direction} {escape(spec.objective.metric)}")
    trials = status.trials
    console.print(
        f"[bold]Trials:[/]     {trials.created}/{spec.max_trials} created, {trials.running} running, "
        f"{trials.succeeded} succeeded, {trials.failed} failed, {trials.stopped} stopped"
    )
    best = status.best_trial
    if best is not None:
        parameters = ", ".join(f"{key}={value}" for key, value in best.parameters.items())
        console.print(f"[bold]Best:[/]       {best.name} = {best.value:.6g} ({escape(parameters)})")


def delete_sweep(client: Client | KubernetesClient, name: str) -> None:
    """Delete a sweep and its trial jobs."""
    trials = client.ops.delete_sweep(client.namespace, name)
    console.print(f"sweep/{name} deleted")
    if trials:
        console.print(f"with its trial jobs: {', '.join(trials)}")
