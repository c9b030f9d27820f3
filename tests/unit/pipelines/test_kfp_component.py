"""KFP v1 component.yaml files: accepted as KFP 1.8 reads them, refused by path otherwise, digested stably.

The files under tests/data/kfp are our own, written in the upstream format (kubeflow/pipelines 1.8.15's
components.json_schema.json and _structures.py).
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.model.errors import SpecError
from phalanx.model.kfp_component import (
    component_digest,
    file_name_of,
    parse_component,
    type_name,
)
from phalanx.model.kfp_placeholders import (
    ConcatPlaceholder,
    IfPlaceholder,
    InputPathPlaceholder,
    InputValuePlaceholder,
    IsPresentPlaceholder,
    OutputPathPlaceholder,
)

DATA = Path(__file__).parents[2] / "data" / "kfp"


def load(name: str) -> dict[str, Any]:
    document = yaml.safe_load((DATA / name).read_text())
    assert isinstance(document, dict)
    return document


def minimal(**container: Any) -> dict[str, Any]:
    return {
        "inputs": [{"name": "rows"}, {"name": "flag", "optional": True}],
        "outputs": [{"name": "out"}],
        "implementation": {"container": {"image": "registry.example/x:1", **container}},
    }


def problems(document: Any, **kwargs: Any) -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_component(document, **kwargs)
    return [str(error) for error in caught.value.errors]


def test_the_reference_example_parses_into_typed_placeholders() -> None:
    component = parse_component(load("evaluate.yaml"))
    args = component.implementation.container.args or []
    assert isinstance(args[0], ConcatPlaceholder)
    assert args[0].concat == ["--model=", InputPathPlaceholder(input_path="model")]
    assert args[2] == InputPathPlaceholder(input_path="eval data")
    assert args[4] == InputValuePlaceholder(input_value="batch size")
    assert isinstance(args[5], IfPlaceholder)
    assert args[5].if_.cond == IsPresentPlaceholder(is_present="min accuracy")
    assert args[5].if_.then == ["--gate", InputValuePlaceholder(input_value="min accuracy")]
    assert args[5].if_.else_ is None
    assert args[7] == OutputPathPlaceholder(output_path="report")
    assert [item.name for item in component.inputs] == ["model", "eval data", "batch size", "min accuracy"]
    assert component.input("min accuracy") is not None and component.input("min accuracy").optional  # type: ignore[union-attr]
    assert component.input("nope") is None


def test_every_container_field_of_the_format_is_accepted() -> None:
    component = parse_component(load("train.yaml"))
    container = component.implementation.container
    assert component.metadata is not None and component.metadata.labels == {"stage": "train"}
    # Unquoted YAML defaults become the strings KFP's str() writes.
    assert [item.default for item in component.inputs[1:4]] == ["3", "0.01", "True"]
    assert type_name(component.inputs[0].type) == "GCSPath"
    assert component.inputs[0].type == {"GCSPath": {"data_type": "CSV"}}
    assert type_name(component.inputs[1].type) == "Integer"
    assert type_name(component.outputs[2].type) == "String"
    assert container.file_outputs == {"log": "/logs/train.log"}
    assert container.env is not None and container.env["FIXED"] == "yes"
    # A single then/else item is kept as a list of one.
    shuffle = (container.args or [])[5]
    assert isinstance(shuffle, IfPlaceholder)
    assert shuffle.if_.then == ["--shuffle"] and shuffle.if_.else_ == ["--no-shuffle"]


@pytest.mark.parametrize("name", ["evaluate.yaml", "train.yaml"])
def test_the_wire_form_round_trips(name: str) -> None:
    component = parse_component(load(name))
    again = parse_component(component.to_dict())
    assert again == component
    assert again.to_dict() == component.to_dict()
    assert "if" in str(component.to_dict())  # the upstream key, not the Python name if_


def test_unquoted_scalars_in_a_command_line_become_strings() -> None:
    component = parse_component(minimal(args=["--epochs", 10, 0.5, True]))
    assert component.implementation.container.args == ["--epochs", "10", "0.5", "True"]


@pytest.mark.parametrize(
    ("file", "expected"),
    [
        (
            "refused/graph.yaml",
            ["implementation.graph: graph components are not supported; write the graph as a Phalanx Pipeline"],
        ),
        (
            "refused/v2_placeholders.yaml",
            [
                "implementation.container.args[1].inputUri: v2-compatible placeholders are not supported",
                "implementation.container.args[3].outputUri: v2-compatible placeholders are not supported",
            ],
        ),
        (
            "refused/misspelt.yaml",
            [
                "inputs[0].optinal: unknown field; did you mean 'optional'?",
                "implementation.container.args[0].inputVal: unknown placeholder; did you mean 'inputValue'?",
                "implementation.container.comand: unknown field; did you mean 'command'?",
                "implementation.container.args[1].outputPath: the component has no output 'outt'; did you mean 'out'?",
            ],
        ),
    ],
    ids=["graph", "v2-placeholders", "misspelt-keys-and-names-in-one-pass"],
)
def test_refused_files_name_every_problem_by_path(file: str, expected: list[str]) -> None:
    found = problems(load(file), source=file)
    assert len(found) == len(expected)
    for message, start in zip(sorted(found), sorted(expected), strict=True):
        assert message.startswith(start), message


@pytest.mark.parametrize(
    ("document", "path", "words"),
    [
        (minimal(args=[{"inputValue": "nope"}]), "implementation.container.args[0].inputValue", "no input 'nope'"),
        (minimal(args=[{"inputPath": "row"}]), "implementation.container.args[0].inputPath", "did you mean 'rows'"),
        (minimal(args=[{"outputPath": "rows"}]), "implementation.container.args[0].outputPath", "no output 'rows'"),
        (
            minimal(args=[{"concat": ["a", {"if": {"cond": {"isPresent": "x"}, "then": ["b"]}}]}]),
            "implementation.container.args[0].concat[1].if.cond.isPresent",
            "no input 'x'",
        ),
        (
            minimal(args=[{"if": {"cond": True, "then": [], "else": [{"inputValue": "y"}]}}]),
            "implementation.container.args[0].if.else[0].inputValue",
            "no input 'y'",
        ),
        (minimal(args=[{"isPresent": "flag"}]), "implementation.container.args[0]", "only allowed as an if condition"),
        (minimal(args=[{"inputValue": "rows", "extra": 1}]), "implementation.container.args[0]", "one key"),
        (minimal(args=[["nested"]]), "implementation.container.args[0]", "placeholder with one key"),
        (minimal(args=[{"concat": "x"}]), "implementation.container.args[0].concat", "must be a list"),
        (minimal(args=[{"inputValue": 3}]), "implementation.container.args[0].inputValue", "name of an input"),
        (
            minimal(args=[{"if": {"cond": "maybe", "then": []}}]),
            "implementation.container.args[0].if.cond",
            "true or false",
        ),
        (
            minimal(args=[{"if": {"cond": True}}]),
            "implementation.container.args[0].if.then",
            "required field is missing",
        ),
        (
            minimal(args=[{"if": {"cond": True, "then": [], "elze": []}}]),
            "implementation.container.args[0].if.elze",
            "unknown",
        ),
        (
            minimal(args=[{"if": {"cond": {"inputPath": "rows"}, "then": []}}]),
            "implementation.container.args[0].if.cond",
            "isPresent",
        ),
        (minimal(args=[{"inputUri": "rows"}]), "implementation.container.args[0].inputUri", "v2-compatible"),
        (minimal(env={"A-B": "x"}), "implementation.container.env.A-B", "letters, digits and _"),
        (minimal(env={"PHALANX_RANK": "x"}), "implementation.container.env.PHALANX_RANK", "reserved"),
        (minimal(env={"OK": {"inputValue": "gone"}}), "implementation.container.env.OK.inputValue", "no input 'gone'"),
        (minimal(fileOutputs={"missing": "/x"}), "implementation.container.fileOutputs.missing", "no output"),
        (minimal(image=""), "implementation.container.image", "at least 1"),
        ({**minimal(), "inputs": [{"name": "a"}, {"name": "a"}]}, "inputs[1].name", "unique"),
        ({**minimal(), "inputs": [{"name": "a b"}, {"name": "a_b"}]}, "inputs[1].name", "share the file name 'a_b'"),
        ({**minimal(), "outputs": [{"name": "o"}, {"name": "o"}]}, "outputs[1].name", "unique"),
        ({**minimal(), "inputs": [{"name": "t", "type": {"A": {}, "B": {}}}]}, "inputs[0].type", "one key"),
        ({**minimal(), "inputs": [{"name": "t", "type": {"A": "csv"}}]}, "inputs[0].type", "parameters of type 'A'"),
        ({**minimal(), "inputs": [{"name": "t", "type": ["A"]}]}, "inputs[0].type", ""),
        ({**minimal(), "inputs": [{"type": "A"}]}, "inputs[0].name", "required"),
        ({**minimal(), "version": "x"}, "version", "unknown field"),
        ({**minimal(), "implementation": {"container": {"image": "i"}, "extra": 1}}, "implementation.extra", "unknown"),
        ({"inputs": []}, "implementation", "required"),
    ],
)
def test_each_bad_field_is_refused_at_its_path(document: dict[str, Any], path: str, words: str) -> None:
    found = problems(document)
    matching = [message for message in found if message.split(": ", 1)[0] == path]
    assert matching, found
    assert words in matching[0]


def test_errors_carry_the_prefix_of_an_inline_component() -> None:
    found = problems(minimal(args=[{"inputValue": "nope"}]), prefix=("spec", "steps", 2, "component", "inline"))
    assert found[0].startswith("spec.steps[2].component.inline.implementation.container.args[0].inputValue: ")


def test_a_document_that_is_not_a_mapping_is_refused_in_one_sentence() -> None:
    assert problems(["a"], prefix=("spec", "component")) == [
        "spec.component: a component must be a mapping with inputs, outputs and implementation"
    ]


def test_nul_bytes_in_names_are_refused() -> None:
    found = problems(minimal(args=[{"inputValue": "ro\x00ws"}]))
    assert found == ["implementation.container.args[0].inputValue: must not contain a NUL byte (\\x00); remove it"]


@pytest.mark.parametrize(
    ("name", "file"), [("eval data", "eval_data"), ("a/b", "a_b"), ("ok-1.x", "ok-1.x"), ("ü  x", "_x")]
)
def test_file_names_follow_kfps_sanitising(name: str, file: str) -> None:
    assert file_name_of(name) == file


# --- digest ---------------------------------------------------------------------------------------------------


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: _shuffled(item, rng) for key, item in items}
    if isinstance(value, list):
        return [_shuffled(item, rng) for item in value]
    return value


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32))
def test_the_digest_ignores_key_order(seed: int) -> None:
    document = load("train.yaml")
    assert component_digest(parse_component(_shuffled(document, random.Random(seed)))) == component_digest(
        parse_component(document)
    )


def test_the_digest_ignores_documentation_only() -> None:
    document = load("train.yaml")
    edited = copy.deepcopy(document)
    edited["name"] = "Renamed"
    edited["description"] = "Other words."
    edited["metadata"] = {"annotations": {"author": "someone else"}}
    edited["inputs"][0]["description"] = "changed"
    assert component_digest(parse_component(edited)) == component_digest(parse_component(document))


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["implementation"]["container"].update(image="registry.example/phalanx-train:0.4"),
        lambda d: d["implementation"]["container"]["args"].append("--verbose"),
        lambda d: d["implementation"]["container"]["env"].update(FIXED="no"),
        lambda d: d["inputs"][1].update(default=4),
        lambda d: d["inputs"][4].update(optional=False),
        lambda d: d["outputs"][0].update(type="Artifact"),
        lambda d: d["inputs"].append({"name": "extra", "optional": True}),
    ],
    ids=["image", "args", "env", "default", "optional", "output-type", "new-input"],
)
def test_the_digest_changes_with_anything_that_runs(change: Any) -> None:
    document = load("train.yaml")
    edited = copy.deepcopy(document)
    change(edited)
    before, after = component_digest(parse_component(document)), component_digest(parse_component(edited))
    assert before != after
    assert len(after) == 64 and int(after, 16) >= 0


def test_a_document_nested_past_the_file_limits_is_one_sentence() -> None:
    nested: Any = "x"
    for _ in range(5000):
        nested = {"concat": [nested]}
    found = problems(minimal(args=[nested]), prefix=("spec", "component"))
    assert len(found) == 1
    assert found[0].startswith("spec.component: document 1 nests lists and mappings more than 100 deep")


def test_input_uses_cover_every_branch_and_the_environment() -> None:
    uses = parse_component(load("train.yaml")).input_uses()
    assert uses == {
        "training data": {"inputPath"},
        "epochs": {"inputValue"},
        "learning rate": {"inputValue"},
        "shuffle": {"inputValue"},
        "warm start": {"isPresent", "inputPath"},
        "run label": {"inputValue"},
    }
    assert parse_component(minimal()).input_uses() == {"rows": frozenset(), "flag": frozenset()}
