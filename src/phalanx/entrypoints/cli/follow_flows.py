"""`phalanx run` on a Sweep or a PipelineRun: follow it to its end, a line per change, and its exit code.

`run` follows a TrainingJob with ``follow``; a file whose runnable object is a Sweep (or a Katib Experiment) or a
PipelineRun has no job of its own, and `run` printed ``created`` and exited 0 at once, as if it had finished.
Here the object is read through the operations (``ops.get_sweep``, ``ops.get_pipelinerun``), so the embedded
runtime and a cluster are followed alike, every half second (its status changes once per controller pass).
Each trial, or step instance, gets a line when it first shows up and whenever what is shown of it changes
(its phase, value, outputs, the reason it stopped); the object's own phase gets a line too. A trial or step
whose job has not started yet says why, in its job's own sentence (waiting for quota, fitting no node...), so a
wait is never silent; nor is one for a control plane (on the embedded runtime, ``alive`` says whether one runs: a
line when it goes, another when one is back). At the end: its message (for a sweep, its best trial and
parameters) and the exit code: 0 succeeded, 1 failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

from phalanx.entrypoints.cli.output import Writer, escape
from phalanx.entrypoints.cli.styles import styled_phase

if TYPE_CHECKING:
    from phalanx.model.pipelines import PipelineRun, PipelineSpec
    from phalanx.model.sweeps import Sweep
    from phalanx.services.operations import Operations

POLL_SECONDS = 0.5
ENDED = ("Succeeded", "Failed")
# A job in these phases has not started its processes: its message says what it waits for.
NOT_STARTED = frozenset({"Pending", "Queued", "Admitted", "Downloading", "Halted"})


def no_reason(job: str) -> str:
    """For callers that do not look at jobs."""
    del job
    return ""


def sweep_lines(sweep: Sweep, waiting: Callable[[str], str] = no_reason) -> dict[str, str]:
    """Each trial -> what is shown of it: phase, objective value once it ended, why it stopped, failed or waits."""
    metric = sweep.spec.objective.metric
    lines = {}
    for result in sorted(sweep.status.results, key=lambda r: r.number):
        text = f"{escape(result.name)}  {styled_phase(result.phase)}"
        if result.value is not None and result.phase != "Running":  # not each report: a line per change of phase
            text += f"  {escape(metric)}={result.value:.6g}"
        if result.reason:
            text += f"  [dim]{escape(result.reason[:200])}[/]"
        elif result.phase == "Pending" and (why := waiting(result.name)):
            text += f"  [dim]{escape(why[:200])}[/]"
        lines[result.name] = text
    lines[""] = f"sweep/{escape(sweep.metadata.name)}  {styled_phase(sweep.status.phase)}"  # after its trials
    return lines


def run_lines(
    run: PipelineRun, waiting: Callable[[str], str] = no_reason, sweeps: Collection[str] = ()
) -> dict[str, str]:
    """Each step instance -> what is shown of it: phase, cache hit, its job while it runs, outputs, why it failed.

    ``sweeps``: the steps whose object is a Sweep (``model.pipelines.sweep_steps``), named as such.
    """
    from phalanx.entrypoints.cli.render_pipelines import outputs_line

    lines = {}
    for entry in run.status.instances:
        name = entry.step if entry.item is None else f"{entry.step}[{entry.item}]"
        text = f"{escape(name)}  {styled_phase(entry.phase)}"
        if entry.cache_hit:
            text += "  [cyan]cached[/]"
        elif entry.job and entry.phase == "Running" and entry.step in sweeps:
            text += f"  sweep {escape(entry.job)} (attempt {entry.attempts})"
        elif entry.job and entry.phase == "Running":
            text += f"  job {escape(entry.job)} (attempt {entry.attempts})"
            if why := waiting(entry.job):
                text += f"  [dim]{escape(why[:200])}[/]"
        if entry.outputs:
            text += f"  {escape(outputs_line(entry))}"
        if entry.phase == "Failed" and entry.message:
            text += f"  [dim]{escape(entry.message[:300])}[/]"
        lines[name] = text
    lines[""] = f"pipelinerun/{escape(run.metadata.name)}  {styled_phase(run.status.phase)}"  # after its steps
    return lines


def always_alive() -> bool:
    """On a cluster the operator runs the controllers; whether it runs is not the CLI's to see."""
    return True


def nothing_to_follow(submitted: Sequence[tuple[str, str]]) -> str | None:
    """What `run` says when the file it submitted makes nothing that runs: (kind, name) of each object made.

    A Pipeline alone is the usual case (a user expecting it to run, as `kfp run` would): it needs a PipelineRun.
    """
    pipelines = [name for kind, name in submitted if kind == "Pipeline"]
    if not pipelines:
        return None
    return (
        f"nothing to run: the file makes pipeline {pipelines[0]} but no PipelineRun; run it with a PipelineRun "
        f"naming it (kind: PipelineRun, spec.pipelineRef.name: {pipelines[0]}), in this file or another"
    )


def flow_made(made: Sequence[tuple[str, str, str]], console: Writer) -> tuple[str, str, str] | None:
    """The Sweep or PipelineRun `run` follows among what a file made ((kind, namespace, name), in its order).

    None when there is none, once it has said why nothing will run where that is the case (a Pipeline alone).
    """
    for kind, namespace, name in made:
        if kind in ("Sweep", "PipelineRun"):
            return kind, namespace, name
    hint = nothing_to_follow([(kind, name) for kind, _, name in made])
    if hint is not None:
        console.print(f"[yellow]{escape(hint)}[/]")
    return None


def follow_flow(
    ops: Operations,
    kind: str,
    namespace: str,
    name: str,
    console: Writer,
    alive: Callable[[], bool] = always_alive,
    *,
    started: float | None = None,
) -> int:
    """Follow Sweep or PipelineRun ``name`` until it succeeds or fails; return 0 or 1.

    ``alive``: whether a control plane runs the controllers now (checked each poll). ``started``: the
    ``time.monotonic()`` the lines' elapsed times count from (when it was submitted; default: now).
    """
    from phalanx.model.pipelines import sweep_steps
    from phalanx.services.operations import OperationError

    def waiting(job_name: str) -> str:
        """Why job ``job_name`` has not started, or ``""`` (started, or not a job: a pipeline's sweep step)."""
        try:
            job = ops.get_job(namespace, job_name)
        except OperationError:
            return ""
        return (job.status.message or "") if str(job.status.phase) in NOT_STARTED else ""

    start = time.monotonic() if started is None else started
    sweeps: frozenset[str] | None = None  # a run's sweep steps, read with its pipeline once
    shown: dict[str, str] = {}
    was_alive = True
    while True:
        if alive() != was_alive:
            was_alive = not was_alive
            news = (
                "a control plane runs again; following"
                if was_alive
                else "no control plane is running: nothing moves until one starts (`phalanx up`)"
            )
            console.print(f"{time.monotonic() - start:8.2f}s  [yellow]{news}[/]")
        try:
            if kind == "Sweep":
                sweep = ops.get_sweep(namespace, name)
                phase, message, lines = str(sweep.status.phase), sweep.status.message, sweep_lines(sweep, waiting)
            else:
                run = ops.get_pipelinerun(namespace, name)
                if sweeps is None and any(e.job and e.phase == "Running" for e in run.status.instances):
                    sweeps = sweep_steps(_run_spec(ops, run))  # read once, when a step's object is first shown
                phase, message = str(run.status.phase), run.status.message or ""
                lines = run_lines(run, waiting, sweeps or ())
        except OperationError as err:  # deleted while followed: say so rather than wait forever
            console.print(f"[bold red]error:[/] {escape(str(err))}")
            return 1
        for key, text in lines.items():
            if shown.get(key) != text:
                console.print(f"{time.monotonic() - start:8.2f}s  {text}")
                shown[key] = text
        if phase in ENDED:
            word = "sweep" if kind == "Sweep" else "pipelinerun"
            console.print(f"{word} {escape(name)} {styled_phase(phase)}: {escape(message)}")
            if kind == "Sweep":
                _best(sweep, console)
            return 0 if phase == "Succeeded" else 1
        time.sleep(POLL_SECONDS)


def _run_spec(ops: Operations, run: PipelineRun) -> PipelineSpec | None:
    """The steps ``run`` runs: inline, or its stored Pipeline's (None when that cannot be read)."""
    from phalanx.services.operations import OperationError

    if run.spec.pipeline_spec is not None:
        return run.spec.pipeline_spec
    if run.spec.pipeline_ref is None:
        return None
    try:
        return ops.get_pipeline(run.metadata.namespace, run.spec.pipeline_ref.name).spec
    except OperationError:
        return None


def _best(sweep: Sweep, console: Writer) -> None:
    best = sweep.status.best_trial
    if best is not None:
        console.print(f"best: {escape(best.name)}  {escape(sweep.spec.objective.metric)}={best.value:.6g}")
        for parameter, value in best.parameters.items():
            console.print(f"  {escape(parameter)}: {escape(str(value))}")
