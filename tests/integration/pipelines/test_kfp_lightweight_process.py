"""A kfp v2 lightweight component, compiled by the real SDK and converted by Phalanx, run as the real process a step
runs: `sh -ec` writes the function's source to a file and `python3 -m kfp.dsl.executor_main` reads the executor
input Phalanx made; its artifacts land where Phalanx said and its return value comes back through the output file.

No ``from __future__ import annotations``: the kfp SDK reads the component's annotations as objects.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kfp import compiler, dsl
from kfp.dsl import Dataset, Input, Model, Output, OutputPath

from phalanx.core.pipelines.kfp_executor import executor_input, executor_outputs, uses_executor_input
from phalanx.core.pipelines.kfp_ir import pipeline_from_ir
from phalanx.core.pipelines.placeholders import default_paths, resolve_command
from phalanx.model.kfp_component import parse_component

pytestmark = pytest.mark.integration


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def fit(rows: Input[Dataset], epochs: int, scale: float, model: Output[Model], seen: OutputPath(int)) -> str:
    with open(rows.path) as source:
        values = [int(line) for line in source if line.strip()]
    with open(model.path, "w") as sink:
        sink.write(f"weights {sum(values) * scale * epochs}")
    with open(seen, "w") as sink:
        sink.write(str(len(values)))
    return f"fitted {len(values)} rows x {epochs}"


@dsl.container_component
def make_rows(rows: Output[Dataset]):
    return dsl.ContainerSpec(image="python:3.11", command=["sh", "-c", 'seq 3 > "$0"', rows.path])


@dsl.pipeline(name="fit-once")
def pipeline(epochs: int = 2):
    fit(rows=make_rows().outputs["rows"], epochs=epochs, scale=0.5)


def test_the_converted_command_runs_the_function_with_phalanx_paths(tmp_path: Path) -> None:
    target = tmp_path / "ir.yaml"
    compiler.Compiler().compile(pipeline, str(target))
    converted = pipeline_from_ir(yaml.safe_load(target.read_text()))
    [make, step] = converted["spec"]["steps"]
    assert make["name"] == "make-rows"
    assert step["arguments"] == {
        "rows": "{{steps.make-rows.outputs.rows}}",
        "epochs": "{{params.epochs}}",
        "scale": "0.5",
    }
    component = parse_component(step["component"]["inline"])
    assert uses_executor_input(component)

    # What the earlier step wrote, staged where the controller would put it.
    rows = tmp_path / "staged" / "rows"
    rows.parent.mkdir()
    rows.write_text("1\n2\n3\n")
    inputs, outputs = default_paths(component, inputs_dir=str(tmp_path / "in"), outputs_dir=str(tmp_path / "out"))
    output_file = tmp_path / "out" / "executor_output.json"
    values = {"epochs": "3", "scale": "0.5"}
    text = executor_input(
        component, values=values, artifacts={"rows": str(rows)}, output_paths=outputs, output_file=str(output_file)
    )
    resolved = resolve_command(
        component,
        values=values,
        artifacts={"rows": str(rows)},
        input_paths=inputs,
        output_paths=outputs,
        executor_input=text,
    )
    # The step's python3 is this environment's, which has the kfp runtime.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        [*resolved.command, *resolved.args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(resolved.outputs_by_path["model"]).read_text() == "weights 9.0"
    assert Path(resolved.outputs_by_path["seen"]).read_text() == "3"
    assert executor_outputs(output_file.read_text(), component) == {"Output": "fitted 3 rows x 3"}
