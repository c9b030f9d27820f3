"""Trial jobs from the template: substitution, names, labels, and the submit-time check as a TrainingJob."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.core.sweeps.substitute import (
    PARAMETERS_ANNOTATION,
    SWEEP_LABEL,
    TRIAL_NUMBER_LABEL,
    active_parameters,
    check_assignment,
    render,
    sample_assignment,
    substitute,
    trial_document,
    validate_sweep,
)
from phalanx.model.errors import SpecError
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.sweeps import parse_sweep
from phalanx.model.validation import validate_job

JOBTYPES = builtin_jobtypes()


def test_values_are_rendered_canonically() -> None:
    assert [render(3), render(1e-5), render(0.1), render(0.30000000000000004), render("adam")] == [
        "3",
        "1e-05",
        "0.1",
        "0.3",
        "adam",
    ]


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_rendered_double_reads_back_within_twelve_digits(value: float) -> None:
    assert math.isclose(float(render(value)), value, rel_tol=1e-11, abs_tol=0.0)


def test_a_trial_document_has_its_values_name_and_labels(doc: dict[str, Any]) -> None:
    sweep = parse_sweep(doc)
    document = trial_document(sweep, 7, {"lr": 0.001, "layers": 3, "batch": 64, "optimizer": "sgd", "momentum": 0.9})
    template = document["spec"]["replicas"]["worker"]["template"]
    assert template["command"] == ["python", "train.py", "--lr", "0.001", "--layers", "3"]
    assert template["env"] == {"OPTIMIZER": "sgd", "MOMENTUM": "0.9"}
    assert document["metadata"]["name"] == "lr-search-7"
    annotated = parse_sweep({**doc, "metadata": {"name": "s", "namespace": "team-a"}})
    annotated.spec.trial.metadata.annotations["where"] = (
        "${trial.namespace}/${trial.name}#${trial.number}@${sweep.name}"
    )
    where = trial_document(annotated, 4, {"lr": 0.1, "layers": 1, "batch": 32, "optimizer": "adam"})["metadata"]
    assert (where["annotations"]["where"], where["namespace"]) == ("team-a/s-4#4@s", "team-a")
    assert document["metadata"]["labels"] == {
        "team": "x",
        "trial": "lr-search-7",
        SWEEP_LABEL: "lr-search",
        TRIAL_NUMBER_LABEL: "7",
    }
    job = validate_job(document, JOBTYPES)
    assert job.spec.replicas["worker"].template.args == [] and job.metadata.namespace == "default"


def test_an_inactive_conditional_parameter_renders_empty(doc: dict[str, Any]) -> None:
    sweep = parse_sweep(doc)
    document = trial_document(sweep, 0, {"lr": 0.1, "layers": 1, "batch": 32, "optimizer": "adam"})
    assert document["spec"]["replicas"]["worker"]["template"]["env"]["MOMENTUM"] == ""


def test_a_condition_makes_a_parameter_active_only_under_its_values(doc: dict[str, Any]) -> None:
    spec = parse_sweep(doc).spec
    assert "momentum" not in active_parameters(spec, {"optimizer": "adam"})
    assert "momentum" in active_parameters(spec, {"optimizer": "sgd"})
    assert sample_assignment(spec) == {"lr": 1e-5, "layers": 1, "batch": 32, "optimizer": "adam"}


def test_a_condition_on_an_inactive_parameter_is_inactive_too(doc: dict[str, Any]) -> None:
    doc["spec"]["parameters"].append(
        {"name": "nesterov", "type": "categorical", "values": ["yes", "no"], "when": {"momentum": 0.9}}
    )
    # momentum is a double: conditions name categorical or discrete parameters only.
    with pytest.raises(SpecError):
        parse_sweep(doc)
    doc["spec"]["parameters"][-1]["when"] = {"optimizer": "sgd"}
    doc["spec"]["parameters"].append(
        {"name": "dampening", "type": "double", "min": 0.0, "max": 1.0, "when": {"nesterov": "no"}}
    )
    spec = parse_sweep(doc).spec
    assert "dampening" not in active_parameters(spec, {"optimizer": "adam", "nesterov": "no"})
    assert "dampening" in active_parameters(spec, {"optimizer": "sgd", "nesterov": "no"})


def test_keys_and_non_strings_are_never_rewritten() -> None:
    values = {("params", "x"): "1"}
    tree = {"${params.x}": ["${params.x}", 3, None, True, {"k": "a${params.x}b${params.x}"}]}
    assert substitute(tree, values) == {"${params.x}": ["1", 3, None, True, {"k": "a1b1"}]}
    assert substitute("${HOME} ${params.y}", values) == "${HOME} ${params.y}"


TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="$"), max_size=20)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    pieces=st.lists(st.one_of(TEXT, st.sampled_from(["a", "b", "c"])), max_size=8),
    values=st.fixed_dictionaries({"a": TEXT, "b": TEXT, "c": TEXT}),
)
def test_substitution_replaces_exactly_each_reference(pieces: list[str], values: dict[str, str]) -> None:
    # Build a string from literal text and references; the expected result is the same join with values.
    template = "".join(f"${{params.{p}}}" if p in values and p == p.strip() and len(p) == 1 else p for p in pieces)
    expected = "".join(values[p] if p in values and len(p) == 1 else p for p in pieces)
    assert substitute(template, {("params", k): v for k, v in values.items()}) == expected


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    st.recursive(
        st.one_of(st.integers(), TEXT, st.none()),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
        max_leaves=20,
    )
)
def test_a_tree_without_references_is_unchanged(tree: Any) -> None:
    assert substitute(tree, {("params", "x"): "1"}) == tree


def test_the_design_example_passes_the_submit_check(doc: dict[str, Any]) -> None:
    assert validate_sweep(doc, JOBTYPES).metadata.name == "lr-search"


def test_a_template_that_is_no_training_job_is_refused_under_spec_trial(doc: dict[str, Any]) -> None:
    template = doc["spec"]["trial"]["spec"]
    template["replicas"]["worker"]["count"] = "${params.layers}"  # fine: the sample is 1
    template["replicas"]["worker"]["template"]["workingDir"] = "../${trial.name}"
    template["runPolicy"] = {"backoffLimitt": 1}
    with pytest.raises(SpecError) as caught:
        validate_sweep(doc, JOBTYPES)
    assert [str(e) for e in caught.value.errors] == [
        "spec.trial.spec.runPolicy.backoffLimitt: unknown field; did you mean 'backoffLimit'? (checked with each "
        "parameter at its first value or minimum)"
    ]
    del template["runPolicy"]
    with pytest.raises(SpecError) as caught:
        validate_sweep(doc, JOBTYPES)
    (error,) = caught.value.errors
    assert error.path == "spec.trial.spec.replicas.worker.template.workingDir"
    assert error.message.startswith("must not contain '..'")


def test_a_substituted_value_that_breaks_the_job_is_caught_with_the_sample(doc: dict[str, Any]) -> None:
    # layers' minimum is 0 here: a job with 0 workers is refused before any trial exists.
    doc["spec"]["parameters"][1]["min"] = 0
    doc["spec"]["trial"]["spec"]["replicas"]["worker"]["count"] = "${params.layers}"
    with pytest.raises(SpecError) as caught:
        validate_sweep(doc, JOBTYPES)
    assert [e.path for e in caught.value.errors] == ["spec.trial.spec.replicas.worker.count"]


def test_the_trials_parameters_are_recorded_on_its_job(doc: dict[str, Any]) -> None:
    assignment = {"lr": 0.001, "layers": 3, "batch": 64, "optimizer": "adam"}
    document = trial_document(parse_sweep(doc), 2, assignment)
    assert json.loads(document["metadata"]["annotations"][PARAMETERS_ANNOTATION]) == assignment


def test_an_assignment_is_checked_against_the_search_space(doc: dict[str, Any]) -> None:
    spec = parse_sweep(doc).spec
    good = {"lr": 0.001, "layers": 3, "batch": 64, "optimizer": "sgd", "momentum": 0.9}
    assert check_assignment(spec, good) == []
    assert check_assignment(spec, {**good, "optimizer": "adam"}) == ["momentum: inactive under its condition"]
    assert check_assignment(spec, {**good, "lr": 0.5, "layers": 2.5, "batch": 65, "extra": 1}) == [
        "extra: no such parameter",
        "lr: 0.5 is outside [1e-05, 0.1]",
        "layers: must be a whole number, got 2.5",
        "batch: 65 is not one of [32, 64, 128]",
    ]
    missing = dict(good)
    del missing["momentum"]
    assert check_assignment(spec, {**missing, "lr": "x"}) == ["lr: must be a number, got 'x'", "momentum: missing"]


def test_every_sample_assignment_is_a_point_of_its_space(doc: dict[str, Any]) -> None:
    spec = parse_sweep(doc).spec
    assert check_assignment(spec, sample_assignment(spec)) == []
