"""Documents that arrive already parsed (JSON through the local API, mappings through the SDK) meet the same
limits as a file before validation walks them: no RecursionError anywhere in model parsing."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.model.errors import SpecError
from phalanx.model.loading import builtin_jobtypes, check_documents
from phalanx.services.operations import validate_documents

pytestmark = pytest.mark.timeout(30)


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def job(**template: Any) -> dict[str, Any]:
    return {
        "kind": "TrainingJob",
        "metadata": {"name": "j"},
        "spec": {"type": "generic", "replicas": {"worker": {"template": {"command": ["true"], **template}}}},
    }


def sentences(documents: list[Any], source: str | None = "api") -> list[str]:
    with pytest.raises(SpecError) as caught:
        validate_documents(documents, builtin_jobtypes(), source=source)
    return [str(error) for error in caught.value.errors]


def test_a_list_nested_a_hundred_thousand_deep_gets_the_depth_error() -> None:
    # args is a list of strings: pydantic reports the first item, whose every repr used to recurse.
    assert sentences([job(args=nested(100_000))]) == [
        "api: document 1 nests lists and mappings more than 100 deep; at most 100 levels are allowed"
    ]


def test_a_mapping_nested_deep_in_a_second_document_names_that_document() -> None:
    deep: dict[str, Any] = {}
    for _ in range(5_000):
        deep = {"a": deep}
    assert sentences([job(), job(env=deep)], source=None) == [
        "document 2 nests lists and mappings more than 100 deep; at most 100 levels are allowed"
    ]


def test_shared_values_count_once_per_use() -> None:
    # The SDK can hand over the Python form of an alias bomb: one list used nine times at each of nine levels.
    value: list[Any] = ["lol"] * 9
    for _ in range(8):
        value = [value] * 9
    assert sentences([job(args=value)]) == [
        "api: document 1 takes the submission past 100,000 values; at most 100,000 are allowed"
    ]


def test_a_value_that_contains_itself_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert sentences([job(args=loop)]) == [
        "api: document 1 nests lists and mappings more than 100 deep; at most 100 levels are allowed"
    ]


def test_more_than_five_hundred_documents_are_refused() -> None:
    assert sentences([job()] * 501) == ["api: 501 documents were given; at most 500 are allowed in one submission"]


def test_documents_within_the_limits_pass() -> None:
    check_documents([job(args=[str(n) for n in range(1000)], env={"A": "1"})] * 50, source="api")
    check_documents([{"a": nested(99)}], source="api")
