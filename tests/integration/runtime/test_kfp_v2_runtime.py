"""A pipeline written with the kfp v2 SDK and compiled by it runs on the real embedded runtime, its IR file as is.

The pipeline (compiled here by the real kfp SDK): a container component writes a numbers file (an artifact) and
its line count (an output parameter); a lightweight Python component fans out over a literal list, reading the
artifact and its item and returning a number; a second lightweight component fans those in (dsl.Collected) and
returns a verdict; dsl.If/dsl.Else pick one of two container steps on it. The lightweight steps run
``python3 -m kfp.dsl.executor_main`` in real processes: the ``python3`` on the control plane's PATH is this test
environment's, which has the kfp package (the test extras).

No ``from __future__ import annotations``: the kfp SDK reads the components' annotations as objects.
"""

import os
import sys
from pathlib import Path

import pytest
import yaml
from kfp import compiler, dsl
from kfp.dsl import Dataset, Input, Output

from conftest import Runtime
from phalanx.model.pipelines import PipelineRun, RunPhase
from support.waiting import wait_until

pytestmark = pytest.mark.integration
IMAGE = "python:3.11"


@dsl.container_component
def make_numbers(count: int, numbers: Output[Dataset], lines: dsl.OutputPath(int)):
    return dsl.ContainerSpec(
        image=IMAGE,
        command=["sh", "-c", 'seq "$0" > "$1" && wc -l < "$1" | tr -d " " > "$2"', count, numbers.path, lines],
    )


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def scaled_sum(numbers: Input[Dataset], factor: int) -> int:
    with open(numbers.path) as source:
        return factor * sum(int(line) for line in source if line.strip())


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def verdict(totals: list, threshold: int) -> str:
    return "big" if max(totals) > threshold else "small"


@dsl.container_component
def note(marker: str, text: str):
    return dsl.ContainerSpec(image=IMAGE, command=["sh", "-c", 'printf "%s" "$1" > "$0"', marker, text])


@dsl.pipeline(name="kfp-v2-e2e")
def pipeline(count: int = 4, threshold: int = 20, marker_big: str = "", marker_small: str = ""):
    made = make_numbers(count=count)
    with dsl.ParallelFor([1, 2, 3]) as factor:
        sums = scaled_sum(numbers=made.outputs["numbers"], factor=factor)
    judged = verdict(totals=dsl.Collected(sums.output), threshold=threshold)
    with dsl.If(judged.output == "big"):
        note(marker=marker_big, text=judged.output)
    with dsl.Else():
        note(marker=marker_small, text=judged.output)


def wait_finished(runtime: Runtime, name: str, timeout: float = 180.0) -> PipelineRun:
    def finished() -> PipelineRun | None:
        with runtime.client() as client:
            run = client.ops.get_pipelinerun("default", name)
        return run if run.status.phase in (RunPhase.SUCCEEDED, RunPhase.FAILED) else None

    run = wait_until(finished, timeout=timeout, message=f"pipelinerun {name} to finish")
    assert run.status.phase == RunPhase.SUCCEEDED, (run.status.message, runtime.cli("describe", "plr", name).stdout)
    return run


def test_a_kfp_v2_compiled_pipeline_with_lightweight_components_runs_to_succeeded(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The lightweight steps' `python3` must be one with the kfp runtime: this environment's.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    ir = runtime.work_dir / "kfp_v2_e2e.yaml"
    compiler.Compiler().compile(pipeline, str(ir))
    # `phalanx convert` prints the Pipeline the IR becomes (offline, nothing created).
    printed = yaml.safe_load(runtime.cli("convert", str(ir), check=True).stdout)
    assert printed["kind"] == "Pipeline" and printed["metadata"]["name"] == "kfp-v2-e2e"
    runtime.start_control_plane()
    submitted = runtime.cli("submit", "-f", str(ir), check=True).stdout
    assert "pipeline/kfp-v2-e2e" in submitted
    big, small = runtime.work_dir / "big.txt", runtime.work_dir / "small.txt"
    run = runtime.work_dir / "run.yaml"
    run.write_text(
        "apiVersion: phalanx.dev/v1alpha1\nkind: PipelineRun\nmetadata: {name: first}\n"
        f"spec: {{pipelineRef: {{name: kfp-v2-e2e}}, arguments: {{marker_big: '{big}', marker_small: '{small}'}}}}\n"
    )
    runtime.cli("submit", "-f", str(run), check=True)
    finished = wait_finished(runtime, "first")
    by_step = {(entry.step, entry.item): entry for entry in finished.status.instances}
    # seq 4 -> 1+2+3+4 = 10 per factor; the container's output parameter read from its file.
    assert by_step[("make-numbers", None)].outputs["lines"].strip() == "4"
    assert [by_step[("scaled-sum", item)].outputs["Output"] for item in range(3)] == ["10", "20", "30"]
    assert by_step[("verdict", None)].outputs["Output"] == "big"
    assert by_step[("note", None)].phase == "Succeeded"
    assert by_step[("note-2", None)].phase == "Skipped"
    assert big.read_text() == "big" and not small.exists()


EXAMPLES = Path(__file__).parents[3] / "examples" / "pipelines"


def test_the_pipeline_examples_run_as_documented(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    runtime.start_control_plane()
    # docs/pipelines.md: the compiled kfp v2 example and its run, the v1 component files' pipeline and its run.
    runtime.cli("submit", "-f", str(EXAMPLES / "kfp_v2_pipeline.yaml"), check=True)
    runtime.cli("submit", "-f", str(EXAMPLES / "kfp_v2_run.yaml"), check=True)
    runtime.cli("submit", "-f", str(EXAMPLES / "v1_components.yaml"), check=True)
    kfp = wait_finished(runtime, "kfp-v2-demo-1")
    outputs = {(entry.step, entry.item): entry.outputs for entry in kfp.status.instances}
    # count 20: 1..20 sums to 210, times factors 1, 2, 3; over the threshold 100, so the If branch ran.
    assert [outputs[("scaled-sum", item)]["Output"] for item in range(3)] == ["210", "420", "630"]
    assert outputs[("report", None)]["Output"] == "big"
    v1 = wait_finished(runtime, "v1-components-1")
    totals = {(entry.step, entry.item): entry.outputs.get("total") for entry in v1.status.instances}
    assert [totals[("sums", item)] for item in range(3)] == ["210", "420", "630"]
    assert totals[("big", None)] == "21000"
