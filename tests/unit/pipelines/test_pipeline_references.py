"""The {{...}} reference language and when conditions."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phalanx.core.pipelines.references import (
    Condition,
    Constant,
    ItemRef,
    OutputRef,
    ParamRef,
    Reference,
    ReferenceSyntaxError,
    evaluate,
    parse_condition,
    parse_reference,
    render,
    scan,
    substitute,
    whole_reference,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("params.lr", ParamRef("lr")),
        (" item ", ItemRef()),
        ("steps.prepare.outputs.shard list", OutputRef("prepare", "shard list")),
        ("steps.a-b.outputs.x", OutputRef("a-b", "x")),
    ],
)
def test_the_three_references(text: str, expected: Reference) -> None:
    assert parse_reference(text) == expected


@pytest.mark.parametrize("text", ["params.", "steps.a.outputs.", "inputs.x", "item.field", "steps.A.outputs.x", ""])
def test_anything_else_is_refused_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(ReferenceSyntaxError, match=r"use \{\{params.NAME\}\}"):
        parse_reference(text)


def test_scan_reports_every_bad_reference_and_keeps_the_good_ones() -> None:
    found, problems = scan("{{params.a}} {{nope}} {{steps.s.outputs.o}} {{")
    assert found == [ParamRef("a"), OutputRef("s", "o")]
    assert len(problems) == 2 and "not closed" in problems[1]


def test_whole_reference_only_when_the_text_is_one_reference() -> None:
    assert whole_reference(" {{steps.s.outputs.o}} ") == OutputRef("s", "o")
    assert whole_reference("x{{params.a}}") is None
    assert whole_reference("{{params.a}}{{params.b}}") is None


@given(st.text(alphabet=st.characters(blacklist_characters="{}"), max_size=30), st.text(max_size=30))
def test_substitution_keeps_text_and_never_rescans_values(prefix: str, value: str) -> None:
    result = substitute(f"{prefix}{{{{params.x}}}}{prefix}", lambda reference: value)
    assert result == f"{prefix}{value}{prefix}"


NO_COMMA = st.characters(blacklist_characters=",")


@given(
    st.recursive(
        # no commas in strings: `", " not in text` below tells compact JSON apart only then (a key ", " failed it)
        st.none() | st.booleans() | st.integers() | st.text(NO_COMMA, max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(NO_COMMA, max_size=3), inner, max_size=3),
        max_leaves=8,
    )
)
def test_render_is_the_string_or_compact_json(value: object) -> None:
    text = render(value)  # type: ignore[arg-type]
    if isinstance(value, str):
        assert text == value
    else:
        assert json.loads(text) == value and ", " not in text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{{steps.train.outputs.accuracy}} > 0.8", Condition(OutputRef("train", "accuracy"), ">", Constant("0.8"))),
        ("{{params.mode}}=='fast'", Condition(ParamRef("mode"), "==", Constant("fast"))),
        ("{{item}} <= {{params.n}}", Condition(ItemRef(), "<=", ParamRef("n"))),
        ("{{steps.a.outputs.x > y}} != 1", Condition(OutputRef("a", "x > y"), "!=", Constant("1"))),
    ],
)
def test_conditions_parse(text: str, expected: Condition) -> None:
    assert parse_condition(text) == expected


@pytest.mark.parametrize("text", ["{{params.a}}", "1 < 2 < 3", "{{params.a}}x > 1", "{{bad}} > 1", "> 1"])
def test_bad_conditions_are_refused(text: str) -> None:
    with pytest.raises(ReferenceSyntaxError):
        parse_condition(text)


@pytest.mark.parametrize(
    ("left", "op", "right", "holds"),
    [
        ("10", ">", "9", True),
        ("0.80", "==", "0.8", True),
        ("a", "==", "a", True),
        ("a", "!=", "b", True),
        ("1e3", ">=", "1000", True),
        ("2", "<", "1", False),
    ],
)
def test_numbers_compare_as_numbers_strings_as_strings(left: str, op: str, right: str, holds: bool) -> None:
    condition = Condition(ParamRef("x"), op, Constant(right))
    assert evaluate(condition, lambda reference: left) is holds


def test_ordering_strings_is_an_error_not_a_silent_answer() -> None:
    with pytest.raises(ReferenceSyntaxError, match="compares numbers only"):
        evaluate(Condition(ParamRef("x"), "<", Constant("b")), lambda reference: "a")


@pytest.mark.parametrize(
    ("text", "meant"),
    [("{{params.count}} => 10", ">="), ("{{params.a}} =< 1", "<="), ("{{params.a}} = 'x'", "=="), ("1 <> 2", "!=")],
)
def test_a_mistyped_operator_is_named_with_the_one_meant(text: str, meant: str) -> None:
    # A new user typed `=>`: the message blamed the left side ("'{{params.count}} =': a side of a condition...").
    with pytest.raises(ReferenceSyntaxError) as caught:
        parse_condition(text)
    message = str(caught.value)
    assert "is not a comparison operator" in message and f"use {meant!r}" in message, message
