"""Pipeline and PipelineRun nouns of ``phalanx``: `get`, `describe pipeline`, `delete`; `describe pipelinerun`'s place.

``describe_pipelinerun`` prints a minimal status here; the pipeline controller's work (issue 17: the DAG as a
tree with each step's phase, duration and cache hit) replaces it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from phalanx.entrypoints.cli.options import Output, print_objects
from phalanx.entrypoints.cli.output import console

if TYPE_CHECKING:
    from phalanx.entrypoints.client import Client
    from phalanx.entrypoints.kubernetes.client import KubernetesClient
    from phalanx.entrypoints.remote_client import RemoteClient
    from phalanx.model.pipelines import Pipeline, PipelineRun, PipelineSpec, Step

#: Step phases after which a step instance does no more.
_FINISHED = frozenset({"Succeeded", "Failed", "Skipped"})


def steps_done(run: PipelineRun) -> int:
    """Steps whose every instance (one per item when fanned out) is finished."""
    by_step: dict[str, list[str]] = {}
    for instance in run.status.instances:
        by_step.setdefault(instance.step, []).append(str(instance.phase))
    return sum(1 for phases in by_step.values() if all(phase in _FINISHED for phase in phases))


def run_pipeline(run: PipelineRun, pipelines: dict[str, Pipeline]) -> PipelineSpec | None:
    """The spec a run runs: inline, or the stored Pipeline it names (None when that is gone)."""
    if run.spec.pipeline_spec is not None:
        return run.spec.pipeline_spec
    assert run.spec.pipeline_ref is not None
    found = pipelines.get(run.spec.pipeline_ref.name)
    return found.spec if found is not None else None


def pipelines_table(pipelines: list[Pipeline], *, namespaces: bool = False) -> Table:
    """`phalanx get pipelines`: NAME STEPS AGE."""
    from phalanx.entrypoints.cli.render import age

    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ["NAME", "STEPS", "AGE"]
    for column in ["NAMESPACE", *columns] if namespaces else columns:
        table.add_column(column)
    for pipeline in pipelines:
        row = [pipeline.metadata.name, str(len(pipeline.spec.steps)), age(pipeline.metadata.creation_timestamp)]
        table.add_row(*([pipeline.metadata.namespace, *row] if namespaces else row))
    return table


def pipelineruns_table(
    runs: list[PipelineRun], pipelines: dict[tuple[str, str], Pipeline], *, namespaces: bool = False
) -> Table:
    """`phalanx get pipelineruns`: NAME PIPELINE PHASE STEPS (done/total) AGE."""
    from phalanx.entrypoints.cli.render import age
    from phalanx.entrypoints.cli.styles import styled_phase

    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ["NAME", "PIPELINE", "PHASE", "STEPS", "AGE"]
    for column in ["NAMESPACE", *columns] if namespaces else columns:
        table.add_column(column)
    for run in runs:
        namespace = run.metadata.namespace
        ref = run.spec.pipeline_ref
        stored = {name: p for (ns, name), p in pipelines.items() if ns == namespace}
        spec = run_pipeline(run, stored)
        total = str(len(spec.steps)) if spec is not None else "?"
        row = [
            run.metadata.name,
            ref.name if ref is not None else "(inline)",
            styled_phase(run.status.phase),
            f"{steps_done(run)}/{total}",
            age(run.metadata.creation_timestamp),
        ]
        table.add_row(*([namespace, *row] if namespaces else row))
    return table


def show_pipelines(
    client: Client | KubernetesClient | RemoteClient, name: str | None, output: Output, everywhere: bool
) -> None:
    """Print the pipelines (only ``name``; every namespace's when ``everywhere``) as a table or as YAML/JSON."""
    ops = client.ops
    pipelines = (
        [ops.get_pipeline(client.namespace, name)]
        if name
        else ops.list_pipelines(None if everywhere else client.namespace)
    )
    if output in (Output.YAML, Output.JSON):
        print_objects(pipelines, output)
    elif not pipelines:
        where = "any namespace" if everywhere else client.namespace
        console.print(
            f"No pipelines in {where}: submit one with `phalanx submit -f pipeline.yaml` (see docs/pipelines.md)."
        )
    else:
        console.print(pipelines_table(pipelines, namespaces=everywhere))


def show_pipelineruns(
    client: Client | KubernetesClient | RemoteClient, name: str | None, output: Output, everywhere: bool
) -> None:
    """Print the pipeline runs (only ``name``; every namespace's when ``everywhere``) as a table or as YAML/JSON."""
    ops = client.ops
    namespace = None if everywhere else client.namespace
    runs = [ops.get_pipelinerun(client.namespace, name)] if name else ops.list_pipelineruns(namespace)
    if output in (Output.YAML, Output.JSON):
        print_objects(runs, output)
    elif not runs:
        where = "any namespace" if everywhere else client.namespace
        console.print(
            f"No pipeline runs in {where}: submit one with `phalanx submit -f run.yaml` (see docs/pipelines.md)."
        )
    else:
        pipelines = {(p.metadata.namespace, p.metadata.name): p for p in ops.list_pipelines(namespace)}
        console.print(pipelineruns_table(runs, pipelines, namespaces=everywhere))


def describe_pipeline(client: Client | KubernetesClient | RemoteClient, name: str) -> None:
    """`phalanx describe pipeline NAME`: its parameters, and its steps with their kind and dependencies."""
    from phalanx.core.pipelines.components import COMPONENT_PATHS_ANNOTATION
    from phalanx.entrypoints.cli.render import age

    pipeline = client.ops.get_pipeline(client.namespace, name)
    meta, spec = pipeline.metadata, pipeline.spec
    console.print(f"[bold]Name:[/]       {meta.name}")
    console.print(f"[bold]Namespace:[/]  {meta.namespace}")
    console.print(f"[bold]Age:[/]        {age(meta.creation_timestamp)}")
    if spec.parameters:
        parameters = Table(title="Parameters", box=None, title_justify="left", header_style="bold", pad_edge=False)
        for column in ("NAME", "TYPE", "DEFAULT"):
            parameters.add_column(column)
        for parameter in spec.parameters:
            default = "-" if parameter.default is None else escape(parameter.default)
            parameters.add_row(parameter.name, str(parameter.type), default)
        console.print(parameters)
    else:
        console.print("[bold]Parameters:[/] none")
    try:
        paths = json.loads(meta.annotations.get(COMPONENT_PATHS_ANNOTATION, "{}"))
    except ValueError:
        paths = {}
    steps = Table(title="Steps", box=None, title_justify="left", header_style="bold", pad_edge=False)
    for column in ("NAME", "KIND", "AFTER", "DETAIL"):
        steps.add_column(column)
    for step, upstream in _dependencies(spec):
        detail = []
        if step.component is not None:
            inline = step.component.inline or {}
            label = paths.get(step.name) if isinstance(paths, dict) else None
            detail.append(str(label or inline.get("name") or "inline component"))
        if step.parallel_for is not None:
            detail.append("parallelFor")
        if step.when is not None:
            detail.append(f"when {step.when}")
        if step.retries:
            detail.append(f"retries {step.retries}")
        steps.add_row(step.name, str(step.kind), ", ".join(upstream) or "-", escape("; ".join(detail)) or "-")
    console.print(steps)


def _dependencies(spec: PipelineSpec) -> list[tuple[Step, list[str]]]:
    """Each step (file order) with the steps it waits for: its data references and ``after`` (``core`` decides)."""
    from phalanx.core.pipelines.dag import check_pipeline
    from phalanx.core.pipelines.validation import interfaces_of

    try:
        graph = check_pipeline(spec, interfaces_of(spec))
    except ValueError:  # stored before a rule tightened: show the after edges alone
        return [(step, list(step.after)) for step in spec.steps]
    order = {name: position for position, name in enumerate(s.name for s in spec.steps)}
    return [(step, sorted(graph.upstream[step.name], key=order.__getitem__)) for step in spec.steps]


def describe_pipelinerun(client: Client | KubernetesClient | RemoteClient, name: str) -> None:
    """`phalanx describe pipelinerun NAME`: the DAG as a tree, then the run's Events.

    Each step shows its phase, duration, cache hit, attempts, fan-out items and message.
    """
    from phalanx.entrypoints.cli.render import age, events_table
    from phalanx.entrypoints.cli.render_pipelines import pipelinerun_tree
    from phalanx.entrypoints.cli.styles import styled_phase

    described = client.ops.describe_pipelinerun(client.namespace, name)
    run = described.run
    ref = run.spec.pipeline_ref
    console.print(f"[bold]Name:[/]       {run.metadata.name}")
    console.print(f"[bold]Namespace:[/]  {run.metadata.namespace}")
    console.print(f"[bold]Pipeline:[/]   {ref.name if ref is not None else '(inline)'}")
    console.print(f"[bold]Phase:[/]      {styled_phase(run.status.phase)}")
    console.print(f"[bold]Age:[/]        {age(run.metadata.creation_timestamp)}")
    if run.spec.arguments:
        shown = ", ".join(f"{key}={value}" for key, value in sorted(run.spec.arguments.items()))
        console.print(f"[bold]Arguments:[/]  {escape(shown)}")
    if run.status.message:
        console.print(f"[bold]Message:[/]    {escape(run.status.message)}")
    if described.spec is None and ref is not None:
        console.print(f"[yellow]pipeline {ref.name} is not stored any more: steps are shown as recorded[/]")
    console.print(pipelinerun_tree(run, described.spec))
    console.print(events_table(described.events, run.metadata.creation_timestamp))


def delete_pipeline(client: Client | KubernetesClient | RemoteClient, name: str) -> None:
    """Delete a pipeline no run names."""
    client.ops.delete_pipeline(client.namespace, name)
    console.print(f"pipeline/{name} deleted")


def delete_pipelinerun(client: Client | KubernetesClient | RemoteClient, name: str) -> None:
    """Delete a pipeline run with its step jobs."""
    deleted = client.ops.delete_pipelinerun(client.namespace, name)
    console.print(f"pipelinerun/{name} deleted")
    if deleted:
        console.print(f"with: {', '.join(deleted)}")
