"""`describe pipelinerun`'s tree: steps in run order, items of a fan-out, phase, duration, cache hit, attempts."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from tests.unit.pipelines.test_pipeline_controller import SWEEP_SPEC, World, fan_pipeline, play_fan, run_document

from phalanx.entrypoints.cli.follow_flows import run_lines
from phalanx.entrypoints.cli.render_pipelines import duration, outputs_line, pipelinerun_tree
from phalanx.model.pipelines import Pipeline, StepPhase, StepStatus, sweep_steps


def text_of(world: World, run: str) -> str:
    pipeline = world.backend.get(Pipeline, "default", "fan")
    assert pipeline is not None
    console = Console(record=True, width=160, color_system=None)
    console.print(pipelinerun_tree(world.run(run), pipeline.spec, now=datetime(2026, 11, 26, 12, 1, tzinfo=UTC)))
    return console.export_text()


def test_a_running_fan_out_shows_each_item_and_the_steps_still_waiting(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.submit(fan_pipeline(retries=2), run_document("r1"))
    world.settle()
    world.finish("r1-make-1", {"shards": '["a", "b"]', "data": {"x": "1"}})
    world.settle()
    lines = text_of(world, "r1").splitlines()
    assert lines[0].split() == ["r1", "Running"]
    make = next(line for line in lines if "make " in line)
    assert "Succeeded" in make and "attempt 1/1" in make and "job r1-make-1" in make
    work = next(line for line in lines if line.strip(" ├└─│").startswith("work "))
    assert "fan-out over 2 items" in work and "after make" in work and "2 Running" in work
    assert any("work[1]" in line and "Running" in line and "attempt 1/3" in line and "item b" in line for line in lines)
    assert any(line.strip(" ├└─│").startswith("join") and "Waiting" in line for line in lines)


def test_a_cached_rerun_says_cached_for_every_step(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.submit(fan_pipeline(), run_document("r1"))
    play_fan(world, "r1")
    world.submit(fan_pipeline(), run_document("r2"))
    world.settle()
    text = text_of(world, "r2")
    # counted on the step lines: the outputs' locations hold the test's folder, whose name says "cached" too
    assert sum("Succeeded  cached" in line for line in text.splitlines()) == 4 and "Succeeded" in text.splitlines()[0]


def test_duration_counts_to_now_while_running() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    entry = StepStatus(step="a", phase=StepPhase.RUNNING, start_time=start)
    assert duration(entry, datetime(2026, 1, 1, 0, 3, 5, tzinfo=UTC)) == "3m05s"
    done = entry.model_copy(update={"completion_time": datetime(2026, 1, 1, 0, 0, 42, tzinfo=UTC)})
    assert duration(done, datetime(2026, 1, 2, tzinfo=UTC)) == "42s"
    assert duration(StepStatus(step="a", phase=StepPhase.SKIPPED), start) == "-"


def test_a_finished_step_shows_its_outputs_values_and_artifact_locations(tmp_path: Path) -> None:
    # docs/pipelines.md: `describe pipelinerun` gives each output's value or location (a new user looked for the
    # totals of the example's fan-out there and found only the job names).
    world = World(tmp_path)
    world.submit(fan_pipeline(), run_document("r1"))
    world.settle()
    world.finish("r1-make-1", {"shards": '["a", "b"]', "data": {"x": "1"}})
    world.settle()
    flat = "".join(text_of(world, "r1").replace("│", "").split())  # rich wraps long paths; compare unwrapped
    location = world.run("r1").status.instances[0].outputs["data"]
    assert 'outputs:shards=["a","b"]' in flat, flat
    assert f"data->{location}" in flat, flat


def test_a_long_output_value_is_cut_to_one_line() -> None:
    entry = StepStatus(step="a", phase=StepPhase.SUCCEEDED, outputs={"text": "x" * 500, "n": "7"})
    line = outputs_line(entry)
    assert "n=7" in line and len(line) < 200 and "…" in line


def test_a_sweep_step_is_named_a_sweep_while_it_runs_in_run_and_describe(tmp_path: Path) -> None:
    """A new user's trial: `run` of a pipeline with a tuning step called its Sweep a "job"."""
    world = World(tmp_path)
    tuned = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": "fan"},  # the name text_of reads
        "spec": {"steps": [{"name": "tune", "sweep": {"spec": SWEEP_SPEC}}]},
    }
    world.submit(tuned, run_document("r1", pipeline="fan"))
    world.settle()
    pipeline = world.backend.get(Pipeline, "default", "fan")
    assert pipeline is not None and sweep_steps(pipeline.spec) == {"tune"}
    [tune] = [line for line in text_of(world, "r1").splitlines() if "tune" in line and "Running" in line]
    assert "sweep r1-tune-1" in tune and "job " not in tune
    shown = run_lines(world.run("r1"), sweeps=sweep_steps(pipeline.spec))["tune"]
    assert "sweep r1-tune-1 (attempt 1)" in shown, shown
