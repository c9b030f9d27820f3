"""Binding a run's arguments to the pipeline's parameters, each value read as its type."""

from __future__ import annotations

import pytest
from tests.unit.pipelines.builders import pipeline

from phalanx.core.pipelines.parameters import bind_parameters, type_problem
from phalanx.model.errors import SpecError
from phalanx.model.pipelines import ParameterType


@pytest.mark.parametrize(
    ("value", "kind", "ok"),
    [
        ("12", "Integer", True),
        ("1.5", "Integer", False),
        ("1e-3", "Float", True),
        ("nan", "Float", False),
        ("inf", "Float", False),
        ("True", "Boolean", True),
        ("yes", "Boolean", False),
        ('{"a": 1}', "JsonObject", True),
        ("[1]", "JsonObject", False),
        ("[1, 2]", "JsonArray", True),
        ("1,2", "JsonArray", False),
        ("", "String", True),
    ],
)
def test_a_value_reads_as_its_type_or_says_why(value: str, kind: str, ok: bool) -> None:
    assert (type_problem(value, ParameterType(kind)) is None) is ok


def test_arguments_override_defaults() -> None:
    spec = pipeline().param("lr", "Float", "0.01").param("name").job("a").spec()
    assert bind_parameters(spec, {"lr": "0.5", "name": "x"}) == {"lr": "0.5", "name": "x"}


def test_every_binding_problem_is_named_at_its_argument() -> None:
    spec = pipeline().param("lr", "Float", "0.01").param("epochs", "Integer").job("a").spec()
    with pytest.raises(SpecError) as caught:
        bind_parameters(spec, {"lr": "fast", "lrr": "1"})
    errors = {error.path: error.message for error in caught.value.errors}
    assert errors == {
        "spec.arguments.lrr": "the pipeline has no parameter 'lrr'; it has: epochs, lr",
        "spec.arguments.epochs": "parameter 'epochs' has no default: give it a value, e.g. arguments: {epochs: ...}",
        "spec.arguments.lr": "must be a number (type Float), got 'fast'",
    }
