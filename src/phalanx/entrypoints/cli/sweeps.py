"""The Sweep nouns of ``phalanx``: `get sweeps`, `describe sweep`, `delete sweep` and `sweep best`.

`describe sweep` and `sweep best` read what the sweep controller recorded in the Sweep's status
(``SweepStatus.results``, ``bestTrial``) and its Events: no trial's log is read, so they answer at once on
either backend, even for trials whose jobs are gone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from phalanx.entrypoints.cli.options import (
    BackendOption,
    ContextOption,
    KubeconfigOption,
    NamespaceOption,
    Output,
    OutputOption,
    StateDirOption,
    backend_session,
    choose,
    print_objects,
)
from phalanx.entrypoints.cli.output import console, fail

if TYPE_CHECKING:
    from phalanx.entrypoints.client import Client
    from phalanx.entrypoints.kubernetes.client import KubernetesClient
    from phalanx.entrypoints.remote_client import RemoteClient
    from phalanx.model.events import Event
    from phalanx.model.sweeps import BestTrial, Sweep, TrialResult

sweep_app = typer.Typer(help="Sweeps: hyperparameter searches whose trials are jobs.", no_args_is_help=True)


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


def show_sweeps(
    client: Client | KubernetesClient | RemoteClient, name: str | None, output: Output, everywhere: bool
) -> None:
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


def describe_sweep(client: Client | KubernetesClient | RemoteClient, name: str) -> None:
    """`phalanx describe sweep NAME`."""
    sweep = client.ops.get_sweep(client.namespace, name)
    print_sweep_description(console, sweep, client.ops.backend.events_of(sweep))


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _parameters(parameters: dict[str, Any]) -> str:
    from phalanx.core.sweeps.substitute import render

    return ", ".join(f"{key}={render(value)}" for key, value in parameters.items()) or "-"


def by_objective(sweep: Sweep) -> list[TrialResult]:
    """The trials best first: those with a value by it (ties: lower number), then the others by number."""
    sign = 1.0 if sweep.spec.objective.direction == "minimize" else -1.0
    valued = [r for r in sweep.status.results if r.value is not None and r.phase == "Succeeded"]
    others = [r for r in sweep.status.results if r not in valued]
    return sorted(valued, key=lambda r: (sign * (r.value or 0.0), r.number)) + sorted(others, key=lambda r: r.number)


def trials_table(sweep: Sweep) -> Table:
    """TRIAL PHASE OBJECTIVE LAST-STEP PARAMETERS, best first.

    LAST-STEP is the last step that reported the objective (an intermediate metric's ``step=``): "STEP" alone
    read as a pipeline's step to a new user.
    """
    from phalanx.entrypoints.cli.styles import styled_phase

    table = Table(title="Trials (best first)", box=None, title_justify="left", header_style="bold")
    metric = sweep.spec.objective.metric
    for column in ("TRIAL", "PHASE", metric.upper(), "LAST-STEP", "PARAMETERS"):
        table.add_column(column, overflow="fold")
    for result in by_objective(sweep):
        step = "-" if result.step is None else str(result.step)
        table.add_row(
            result.name, styled_phase(result.phase), _value(result.value), step, escape(_parameters(result.parameters))
        )
    return table


def print_sweep_description(console: Console, sweep: Sweep, events: list[Event]) -> None:
    """Sweep, algorithm, objective, budgets, phase, counts; trials table; best trial; stopped trials; events."""
    from phalanx.entrypoints.cli.render import age, events_table
    from phalanx.entrypoints.cli.styles import styled_phase

    spec, status, meta = sweep.spec, sweep.status, sweep.metadata
    counts = status.trials
    objective = f"{spec.objective.direction} {spec.objective.metric}"
    if spec.objective.goal is not None:
        objective += f" (goal {spec.objective.goal})"
    stopping = "none" if spec.early_stopping is None else str(spec.early_stopping.rule)
    rows = [
        ("Name", meta.name),
        ("Namespace", meta.namespace),
        ("Algorithm", f"{spec.algorithm.name} (seed {spec.algorithm.seed})"),
        ("Objective", objective),
        ("Early stopping", stopping),
        ("Phase", styled_phase(status.phase) + (f" ({status.reason})" if status.reason else "")),
        ("Message", escape(status.message or "-")),
        (
            "Trials",
            f"{counts.created} of {spec.max_trials} created, {spec.parallel_trials} at a time: {counts.running} "
            f"active, {counts.succeeded} succeeded, {counts.failed} failed, {counts.stopped} stopped",
        ),
        ("Created", f"{meta.creation_timestamp} ({age(meta.creation_timestamp)} ago)"),
    ]
    for label, value in rows:
        console.print(f"[bold]{label + ':':<16}[/] {value}", highlight=False)
    console.print()
    if status.results:
        console.print(trials_table(sweep))
        if len(status.results) < counts.created:
            console.print(f"({counts.created - len(status.results)} older trials not shown)")
    else:
        console.print("No trials yet.")
    console.print()
    best = status.best_trial
    if best is None:
        console.print("[bold]Best trial:[/]     none yet")
    else:
        console.print(
            f"[bold]Best trial:[/]     {best.name} ({spec.objective.metric}={best.value:.6g})", highlight=False
        )
        for key, chosen in best.parameters.items():
            console.print(f"  {key}: {escape(str(chosen))}", highlight=False)
    stopped = [r for r in status.results if r.phase in ("Stopped", "Failed") and r.reason]
    if stopped:
        console.print()
        table = Table(title="Stopped and failed trials", box=None, title_justify="left", header_style="bold")
        for column in ("TRIAL", "PHASE", "WHY"):
            table.add_column(column, overflow="fold")
        for result in stopped:
            table.add_row(result.name, styled_phase(result.phase), escape(result.reason))
        console.print(table)
    console.print()
    console.print(events_table(events, meta.creation_timestamp))


def best_document(best: BestTrial) -> dict[str, Any]:
    """What `sweep best -o json|yaml` prints."""
    return {"name": best.name, "number": best.number, "parameters": dict(best.parameters), "value": best.value}


@sweep_app.command("best")
def best(
    name: Annotated[str, typer.Argument(help="The Sweep's name.")],
    output: OutputOption = Output.TABLE,
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Print the sweep's best trial so far: its job's name, number, parameters and objective value.

    Exits 1 when no trial has succeeded with a value yet.
    """
    with backend_session(choose(backend, kubeconfig, context), state_dir, namespace) as client:
        sweep = client.ops.get_sweep(client.namespace, name)
    found = sweep.status.best_trial
    if found is None:
        fail(
            f"sweep {name} has no best trial yet: no trial has succeeded with {sweep.spec.objective.metric} "
            f"({sweep.status.trials.created} created; `phalanx describe sweep {name}` shows them)"
        )
    if output in (Output.JSON, Output.YAML):
        import sys

        from phalanx.model.loading import dump_json, dump_yaml

        document = best_document(found)
        sys.stdout.write(dump_json(document) + "\n" if output == Output.JSON else dump_yaml(document))
        return
    metric = sweep.spec.objective.metric
    console.print(f"{found.name} (trial {found.number}): {metric}={found.value:.6g}", highlight=False)
    for key, value in found.parameters.items():
        console.print(f"  {key}: {escape(str(value))}", highlight=False)


def delete_sweep(client: Client | KubernetesClient | RemoteClient, name: str) -> None:
    """Delete a sweep and its trial jobs."""
    trials = client.ops.delete_sweep(client.namespace, name)
    console.print(f"sweep/{name} deleted")
    if trials:
        # In trial order (lr-9 before lr-10), not as text.
        ordered = sorted(trials, key=lambda trial: (len(trial), trial))
        console.print(f"with its trial jobs: {', '.join(ordered)}")
