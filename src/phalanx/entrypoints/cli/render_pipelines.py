"""`describe pipelinerun`'s picture: the DAG as a tree, each step with its phase, duration, cache hit and attempts.

Steps are shown in the order they run (``dag.check_pipeline``'s topological order), each with the steps it waits
for; a fanned-out step has one branch per item (``name[i]``, with the item's value). A step no pass has reached
yet is ``Waiting``. What a step instance records (``StepStatus``) is shown as it is: its job, duration (to now
while it runs), ``cached`` for a cache hit (no process ran), its attempts (``attempt 2/3`` with retries) and
its last message, then its outputs: a parameter's value (``total=210``, cut to one line) or an artifact's
location in the store (``data -> /path``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from rich.markup import escape
from rich.tree import Tree

from phalanx.core.pipelines.dag import check_pipeline, topological_order
from phalanx.core.pipelines.references import render
from phalanx.core.pipelines.validation import interfaces_of
from phalanx.entrypoints.cli.styles import styled_phase
from phalanx.model.pipelines import PipelineRun, PipelineSpec, Step, StepKind, StepStatus


def _phase(phase: str) -> str:
    return "[dim]Skipped[/]" if phase == "Skipped" else styled_phase(phase)


def duration(entry: StepStatus, now: datetime) -> str:
    """How long the instance ran (so far, while it runs): ``42s``, ``3m05s``, ``1h02m``; ``-`` when unknown."""
    if entry.start_time is None:
        return "-"
    end = entry.completion_time or now
    seconds = max(0, int((end - entry.start_time).total_seconds()))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def _order(spec: PipelineSpec) -> tuple[list[Step], dict[str, list[str]]]:
    """The steps in run order and what each waits for (the ``after`` edges alone if the graph no longer checks)."""
    names = [step.name for step in spec.steps]
    try:
        graph = check_pipeline(spec, interfaces_of(spec))
        upstream = {name: sorted(graph.upstream[name], key=names.index) for name in names}
        order = list(graph.order)
    except (ValueError, KeyError):
        upstream = {step.name: list(step.after) for step in spec.steps}
        order = list(topological_order(names, upstream)) if upstream else names
    by_name = {step.name: step for step in spec.steps}
    return [by_name[name] for name in order if name in by_name], upstream


def _label(entry: StepStatus, retries: int, now: datetime, name: str, noun: str = "job") -> str:
    parts = [f"[bold]{escape(name)}[/]", _phase(str(entry.phase))]
    if entry.cache_hit:
        parts.append("[cyan]cached[/]")
    else:
        parts.append(duration(entry, now))
        if entry.attempts:
            parts.append(f"attempt {entry.attempts}/{retries + 1}")
    if entry.job:
        parts.append(f"{noun} {escape(entry.job)}")
    return "  ".join(parts)


def pipelinerun_tree(run: PipelineRun, spec: PipelineSpec | None, now: datetime | None = None) -> Tree:
    """The run as a tree: one branch per step (run order), one leaf per item of a fanned-out step."""
    now = now or datetime.now(UTC)
    title = f"[bold]{escape(run.metadata.name)}[/]  {_phase(str(run.status.phase))}"
    tree = Tree(title)
    entries: dict[tuple[str, int | None], StepStatus] = {(e.step, e.item): e for e in run.status.instances}
    if spec is None:
        for recorded in run.status.instances:
            name = recorded.step if recorded.item is None else f"{recorded.step}[{recorded.item}]"
            tree.add(_with_message(_label(recorded, 0, now, name), recorded))
        return tree
    steps, upstream = _order(spec)
    for step in steps:
        noun = "sweep" if step.kind == StepKind.SWEEP else "job"
        waits = f"  [dim]after {', '.join(upstream[step.name])}[/]" if upstream.get(step.name) else ""
        whole = entries.get((step.name, None))
        items = run.status.fanouts.get(step.name)
        if whole is not None:
            tree.add(_with_message(_label(whole, step.retries, now, step.name, noun) + waits, whole))
        elif items is not None:
            done = [e for (name, item), e in entries.items() if name == step.name and item is not None]
            phases = _summary([str(e.phase) for e in done], len(items))
            branch = tree.add(f"[bold]{escape(step.name)}[/]  {phases}  fan-out over {len(items)} items{waits}")
            for index, value in enumerate(items):
                entry = entries.get((step.name, index))
                label = f"{step.name}[{index}]"
                shown = escape(render(value))[:40]
                if entry is None:
                    branch.add(f"{escape(label)}  [dim]Waiting[/]  item {shown}")
                else:
                    label_text = _label(entry, step.retries, now, label, noun)
                    branch.add(_with_message(f"{label_text}  item {shown}", entry))
        else:
            tree.add(f"[bold]{escape(step.name)}[/]  [dim]Waiting[/]{waits}")
    return tree


def _summary(phases: Sequence[str], total: int) -> str:
    counted = {phase: phases.count(phase) for phase in dict.fromkeys(phases)}
    text = ", ".join(f"{count} {_phase(phase)}" for phase, count in counted.items())
    waiting = total - len(phases)
    return ", ".join(part for part in (text, f"{waiting} [dim]Waiting[/]" if waiting else "") if part) or "-"


def outputs_line(entry: StepStatus) -> str:
    """``outputs: total=210; data -> /store/.../data``: a value cut at 60 characters, a location whole."""
    shown = []
    for name, value in entry.outputs.items():
        if name in entry.output_digests:  # an artifact: its location, which the user opens or copies
            shown.append(f"{name} -> {value}")
        else:
            one_line = " ".join(value.split())
            shown.append(f"{name}={one_line[:60]}…" if len(one_line) > 60 else f"{name}={one_line}")
    return "outputs: " + "; ".join(shown)


def _with_message(label: str, entry: StepStatus) -> str:
    # docs/pipelines.md promises each output's value or location here; a user reads the run's results from it.
    lines = [label]
    if entry.message:
        lines.append(f"[dim]{escape(entry.message[:300])}[/]")
    if entry.outputs:
        lines.append(escape(outputs_line(entry)))
    return "\n".join(lines)
