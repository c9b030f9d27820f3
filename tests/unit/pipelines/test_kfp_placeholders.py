"""Resolving a KFP v1 component's command line: KFP 1.8's semantics, errors by path, nothing shell-like."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.core.pipelines.placeholders import ResolvedCommand, default_paths, resolve_command
from phalanx.model.errors import SpecError
from phalanx.model.kfp_component import ComponentSpec, parse_component

DATA = Path(__file__).parents[2] / "data" / "kfp"
ARTIFACTS = {"model": "/art/model", "eval data": "/art/eval"}
OUTPUTS = {"report": "/out/report/data"}


def component(name: str) -> ComponentSpec:
    return parse_component(yaml.safe_load((DATA / name).read_text()))


def inline(args: list[Any], *, inputs: list[dict[str, Any]] | None = None, **container: Any) -> ComponentSpec:
    return parse_component(
        {
            "inputs": inputs
            if inputs is not None
            else [{"name": "x", "optional": True}, {"name": "y", "optional": True}],
            "outputs": [{"name": "out"}],
            "implementation": {"container": {"image": "i", "args": args, **container}},
        }
    )


def resolve(spec: ComponentSpec, values: dict[str, str] | None = None, **kwargs: Any) -> ResolvedCommand:
    return resolve_command(
        spec,
        values=values or {},
        artifacts=kwargs.pop("artifacts", {}),
        input_paths=kwargs.pop("input_paths", {}),
        output_paths=kwargs.pop("output_paths", {"out": "/o/out"}),
        **kwargs,
    )


def failures(spec: ComponentSpec, values: dict[str, str] | None = None, **kwargs: Any) -> list[str]:
    with pytest.raises(SpecError) as caught:
        resolve(spec, values, **kwargs)
    return [str(error) for error in caught.value.errors]


def test_the_reference_example_without_the_optional_input() -> None:
    resolved = resolve(component("evaluate.yaml"), artifacts=ARTIFACTS, output_paths=OUTPUTS)
    assert resolved.command == ("python3", "-m", "phalanx_eval")
    assert resolved.args == (
        "--model=/art/model", "--data", "/art/eval", "--batch-size", "64", "--report", "/out/report/data"
    )  # fmt: skip
    assert resolved.inputs_by_value == {"batch size"}
    assert resolved.inputs_by_path == ARTIFACTS
    assert resolved.outputs_by_path == OUTPUTS
    assert resolved.value_files == {}


def test_the_reference_example_with_the_optional_input_and_an_overridden_default() -> None:
    values = {"min accuracy": "0.9", "batch size": "128"}
    resolved = resolve(component("evaluate.yaml"), values, artifacts=ARTIFACTS, output_paths=OUTPUTS)
    assert resolved.args == (
        "--model=/art/model", "--data", "/art/eval", "--batch-size", "128",
        "--gate", "0.9", "--report", "/out/report/data",
    )  # fmt: skip
    assert resolved.inputs_by_value == {"batch size", "min accuracy"}


def test_the_full_example_resolves_env_if_else_and_legacy_file_outputs() -> None:
    spec = component("train.yaml")
    inputs, outputs = default_paths(spec, inputs_dir="/in", outputs_dir="/out")
    resolved = resolve(
        spec,
        {"shuffle": "false"},
        artifacts={"training data": "/art/rows.csv"},
        input_paths=inputs,
        output_paths=outputs,
    )
    assert resolved.args == (
        "--data", "/art/rows.csv", "--epochs", "3", "--lr=0.01", "--no-shuffle", "--tag=-run",
        "--model-out", "/out/model/data", "--metrics-out", "/out/metrics/data",
    )  # fmt: skip
    # RUN_LABEL's input is absent and optional: the variable is left out, not set to "".
    assert resolved.env == {"TRAIN_EPOCHS": "3", "FIXED": "yes"}
    assert resolved.outputs_by_path == {
        "model": "/out/model/data",
        "metrics": "/out/metrics/data",
        "log": "/logs/train.log",
    }


def test_a_value_read_as_a_file_is_written_there_first() -> None:
    spec = inline([{"inputPath": "x"}, {"inputValue": "x"}])
    resolved = resolve(spec, {"x": "hello"}, input_paths={"x": "/in/x/data", "y": "/in/y/data"})
    assert resolved.args == ("/in/x/data", "hello")
    assert resolved.value_files == {"/in/x/data": "hello"}
    assert resolved.inputs_by_path == {"x": "/in/x/data"}  # y is absent: nothing staged for it


@pytest.mark.parametrize(
    ("cond", "values", "expected"),
    [
        (True, {}, ("then",)),
        (False, {}, ("else",)),
        ("Yes", {}, ("then",)),
        ("off", {}, ("else",)),
        ({"isPresent": "x"}, {"x": ""}, ("then",)),  # present even when empty
        ({"isPresent": "x"}, {}, ("else",)),
        ({"inputValue": "x"}, {"x": "True"}, ("then",)),
        ({"inputValue": "x"}, {"x": "0"}, ("else",)),
        ({"inputValue": "x"}, {}, ("else",)),  # an absent optional input reads as false
    ],
)
def test_if_conditions_read_as_kfp_reads_them(cond: Any, values: dict[str, str], expected: tuple[str, ...]) -> None:
    spec = inline([{"if": {"cond": cond, "then": ["then"], "else": ["else"]}}])
    assert resolve(spec, values).args == expected


def test_a_missing_else_resolves_to_nothing_and_branches_splice_several_items() -> None:
    spec = inline(["a", {"if": {"cond": {"isPresent": "x"}, "then": ["--x", {"inputValue": "x"}]}}, "b"])
    assert resolve(spec).args == ("a", "b")
    assert resolve(spec, {"x": "1"}).args == ("a", "--x", "1", "b")


def test_absent_optional_inputs_vanish_from_lists_and_concats() -> None:
    spec = inline([{"inputValue": "x"}, {"inputPath": "y"}, {"concat": ["<", {"inputValue": "x"}, ">"]}])
    assert resolve(spec).args == ("<>",)


def test_concat_joins_an_if_and_outputs_into_one_argument() -> None:
    spec = inline(
        [{"concat": ["--o=", {"outputPath": "out"}, {"if": {"cond": {"isPresent": "x"}, "then": [",", "x"]}}]}]
    )
    assert resolve(spec).args == ("--o=/o/out",)
    assert resolve(spec, {"x": "1"}).args == ("--o=/o/out,x",)


def test_an_input_given_only_as_a_file_cannot_be_used_by_value() -> None:
    spec = inline([{"inputValue": "x"}])
    assert failures(spec, artifacts={"x": "/art/x"}, prefix=("spec", "steps", 1, "component")) == [
        "spec.steps[1].component.implementation.container.args[0].inputValue: input 'x' is given as a file "
        "(an artifact), not a value; read it with {inputPath: x}, or pass a value for it"
    ]


def test_arguments_are_checked_against_the_interface_at_the_arguments_path() -> None:
    spec = inline([{"inputValue": "x"}], inputs=[{"name": "x"}, {"name": "d", "default": "1"}])
    found = failures(spec, {"z": "1"}, arguments_at=("spec", "steps", 0, "arguments"))
    assert found == [
        "spec.steps[0].arguments.z: the component has no input 'z' (its inputs: 'x', 'd'); remove it or fix the name",
        "spec.steps[0].arguments.x: the component's input 'x' is required; pass an argument for it "
        "(or give the input a default, or optional: true)",
    ]


@pytest.mark.parametrize(
    ("args", "kwargs", "path", "words"),
    [
        ([{"outputPath": "out"}], {"output_paths": {}}, "args[0].outputPath", "no path was given for output 'out'"),
        ([{"inputPath": "x"}], {"values": {"x": "v"}}, "args[0].inputPath", "no local path was given for input 'x'"),
        (
            [{"if": {"cond": {"inputValue": "x"}, "then": []}}],
            {"values": {"x": "perhaps"}},
            "args[0].if.cond.inputValue",
            "the value of input 'x' is 'perhaps', which is neither true nor false",
        ),
    ],
)
def test_resolution_problems_name_the_placeholder(
    args: list[Any], kwargs: dict[str, Any], path: str, words: str
) -> None:
    found = failures(inline(args), kwargs.pop("values", None), **kwargs)
    assert len(found) == 1
    assert found[0].startswith(f"implementation.container.{path}: {words}"), found


def test_an_env_value_must_be_one_string() -> None:
    spec = inline([], env={"PAIR": {"if": {"cond": True, "then": ["a", "b"]}}})
    assert failures(spec) == ["implementation.container.env.PAIR: resolves to 2 strings; an environment value is one"]


def test_default_paths_follow_kfps_layout() -> None:
    inputs, outputs = default_paths(component("evaluate.yaml"), inputs_dir="/in", outputs_dir="/out/")
    assert inputs == {
        "model": "/in/model/data",
        "eval data": "/in/eval_data/data",
        "batch size": "/in/batch_size/data",
        "min accuracy": "/in/min_accuracy/data",
    }
    assert outputs == {"report": "/out/report/data"}


# --- properties -----------------------------------------------------------------------------------------------

TEXT = st.text(st.characters(exclude_characters="\x00"), max_size=20)


@settings(max_examples=200, deadline=None)
@given(value=TEXT, literal=TEXT)
def test_values_are_passed_verbatim_never_split_or_interpreted(value: str, literal: str) -> None:
    spec = inline([literal, {"inputValue": "x"}, {"concat": [literal, {"inputValue": "x"}, literal]}])
    assert resolve(spec, {"x": value}).args == (literal, value, literal + value + literal)


@settings(max_examples=100, deadline=None)
@given(present=st.lists(st.booleans(), min_size=2, max_size=2), values=st.lists(TEXT, min_size=2, max_size=2))
def test_isPresent_if_equals_presence(present: list[bool], values: list[str]) -> None:  # noqa: N802
    spec = inline(
        [
            {"if": {"cond": {"isPresent": name}, "then": [f"{name}=", {"inputValue": name}], "else": [f"no {name}"]}}
            for name in ("x", "y")
        ]
    )
    given_values = {name: value for name, value, on in zip(("x", "y"), values, present, strict=True) if on}
    expected: list[str] = []
    for name in ("x", "y"):
        expected += [f"{name}=", given_values[name]] if name in given_values else [f"no {name}"]
    resolved = resolve(spec, given_values)
    assert resolved.args == tuple(expected)
    assert resolved.inputs_by_value == set(given_values)


def test_a_value_with_a_nul_byte_is_refused_on_the_command_line_but_may_be_written_to_a_file() -> None:
    assert failures(inline([{"inputValue": "x"}]), {"x": "a\x00b"}) == [
        "implementation.container.args[0].inputValue: the value of input 'x' holds a NUL byte (\\x00), "
        "which a command line cannot carry"
    ]
    resolved = resolve(inline([{"inputPath": "x"}]), {"x": "a\x00b"}, input_paths={"x": "/in/x"})
    assert resolved.value_files == {"/in/x": "a\x00b"}


def test_an_input_cannot_be_both_a_value_and_a_file() -> None:
    assert failures(inline(["a"]), {"x": "1"}, artifacts={"x": "/art/x"}) == [
        "arguments.x: input 'x' is given both a value and a file; pass one of them"
    ]
