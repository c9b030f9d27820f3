"""The limits of one spec file, met by hostile files: alias bombs, deep nesting, huge files, too many documents.

Each refusal is one sentence naming the file, the document and the limit, and comes before the expanded objects
exist: the loader's constructor is never reached for a refused document. pytest-timeout guards against a hang;
no test measures time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml.constructor

from phalanx.model.errors import SpecError, short
from phalanx.model.loading import parse_documents, read_documents

pytestmark = pytest.mark.timeout(30)


def refusal(text: str, source: str = "bomb.yaml") -> str:
    with pytest.raises(SpecError) as caught:
        parse_documents(text, source=source)
    errors = caught.value.errors
    assert len(errors) == 1, errors
    assert errors[0].path == ""
    return errors[0].message


@pytest.fixture
def nothing_constructed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Fails the test if any YAML document is turned into Python objects."""
    built: list[Any] = []

    def spy(self: Any, node: Any) -> Any:
        built.append(node)
        raise AssertionError(f"a refused document was constructed: {node.start_mark}")

    monkeypatch.setattr(yaml.constructor.BaseConstructor, "construct_document", spy)
    yield built
    assert built == []


def laughs(levels: int, width: int = 9) -> str:
    """The billion-laughs file: each level a list of ``width`` aliases to the level below (9 levels: 9**9)."""
    lines = ["a0: &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    lines += [f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * width) + "]" for n in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_is_refused_before_anything_is_built(nothing_constructed: list[Any]) -> None:
    text = laughs(9)
    assert len(text.encode()) < 700

    # a0..a3 hold 8,200 values; a4 (line 5) adds 66,430 more, a5 (line 6) 597,871: the line that crosses.
    assert refusal(text) == (
        "bomb.yaml: document 1 takes the file past 100,000 values once its aliases are expanded (at line 6); "
        "at most 100,000 are allowed"
    )


def test_the_values_limit_counts_the_whole_file_not_each_document(nothing_constructed: list[Any]) -> None:
    # Three documents of 40,001 values each: the third crosses 100,000.
    document = "[" + ", ".join(["1"] * 40_000) + "]\n"
    text = "---\n".join([document] * 3)
    assert refusal(text) == (
        "bomb.yaml: document 3 takes the file past 100,000 values once its aliases are expanded (at line 5); "
        "at most 100,000 are allowed"
    )


def test_a_file_just_under_the_values_limit_loads() -> None:
    documents = parse_documents("items: [" + ", ".join(["1"] * 99_990) + "]\n", source="big.yaml")
    assert len(documents[0]["items"]) == 99_990


def test_an_alias_inside_the_value_it_names_is_refused(nothing_constructed: list[Any]) -> None:
    assert refusal("kind: Queue\nloop: &x [1, *x]\n") == (
        "bomb.yaml: document 1 uses the alias *x inside the value it names (at line 2), a value without end; "
        "remove the alias"
    )


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param("[" * 10_000 + "]" * 10_000, 1, id="flow-lists-10000"),
        pytest.param("{a: " * 10_000 + "1" + "}" * 10_000, 1, id="flow-mappings-10000"),
        pytest.param("".join(f"{'  ' * n}k:\n" for n in range(150)) + "  " * 150 + "v\n", 101, id="block-150"),
        pytest.param("[" * 100_000 + "]" * 100_000, 1, id="json-100000"),
    ],
)
def test_deep_nesting_is_refused_at_the_first_level_past_the_limit(
    text: str, line: int, nothing_constructed: list[Any]
) -> None:
    assert refusal(text) == (
        f"bomb.yaml: document 1 nests lists and mappings more than 100 deep (at line {line}); "
        "at most 100 levels are allowed"
    )


def test_an_alias_that_nests_the_file_too_deep_is_refused(nothing_constructed: list[Any]) -> None:
    # 60 levels anchored, then used 60 levels down: 120 once expanded although no line is more than 61 deep.
    deep = "[" * 60 + "]" * 60
    text = f"a: &deep {deep}\nb: {'[' * 59}*deep{']' * 59}\n"
    assert refusal(text) == (
        "bomb.yaml: document 1 nests lists and mappings more than 100 deep (at line 2); at most 100 levels are allowed"
    )


def test_nesting_at_the_limit_loads() -> None:
    documents = parse_documents("a: " + "[" * 99 + "]" * 99, source="deep.yaml")
    assert "a" in documents[0]


def test_a_file_past_four_mib_is_refused_before_it_is_parsed(tmp_path: Path, nothing_constructed: list[Any]) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("kind: Queue\n" + "# padding to five MiB\n" * (5 * 2**20 // 22) + "metadata: {name: q}\n")
    assert path.stat().st_size > 5 * 2**20 - 100

    with pytest.raises(SpecError) as caught:
        read_documents(path)

    assert [e.message for e in caught.value.errors] == [
        f"{path} is larger than 4 MiB (4,194,304 bytes), the most a spec file may hold; split it into several files"
    ]


def test_text_past_four_mib_is_refused_too(nothing_constructed: list[Any]) -> None:
    # The local API hands the control plane a file's text: the same limit applies there.
    assert refusal("kind: Queue\n" + "#" * (4 * 2**20) + "\n", source="api.yaml") == (
        "api.yaml is larger than 4 MiB (4,194,304 bytes), the most a spec file may hold; split it into several files"
    )


def test_more_than_five_hundred_documents_are_refused(nothing_constructed: list[Any]) -> None:
    text = "".join(f"---\nkind: Queue\nmetadata: {{name: q{n}}}\n" for n in range(600))
    with pytest.raises(SpecError) as caught:
        parse_documents(text, source="many.yaml")
    assert [e.message for e in caught.value.errors] == [
        "many.yaml holds more than 500 documents (document 501 starts at line 1501); split it into files of at most 500"
    ]


def test_five_hundred_documents_load() -> None:
    text = "".join(f"---\nkind: Queue\nmetadata: {{name: q{n}}}\n" for n in range(500))
    assert len(parse_documents(text, source="many.yaml")) == 500


def test_a_number_too_long_to_read_is_a_yaml_error_not_a_traceback() -> None:
    assert refusal("a: " + "9" * 5000 + "\n").startswith("not valid YAML at line 1, column 4: a whole number of 5000")


def test_an_impossible_date_is_a_yaml_error_not_a_traceback() -> None:
    assert refusal("a: 2020-13-45\n").startswith("not valid YAML at line 1, column 4: cannot read '2020-13-45'")


def test_a_yaml_error_says_where_what_it_was_reading_began() -> None:
    """A new user's trial: an unclosed quote was reported at the end of the file, with no word of where it opened."""
    assert refusal('kind: Queue\nmetadata: {name: "x}\n') == (
        "not valid YAML at line 3, column 1: found unexpected end of stream "
        "(while scanning a quoted scalar that starts at line 2, column 18)"
    )
    misindented = "kind: Queue\nmetadata:\n    name: q\n  labels: {}\n"
    assert refusal(misindented) == (
        "not valid YAML at line 4, column 3: did not find expected key "
        "(while parsing a block mapping that starts at line 1, column 1)"
    )


def shared_bomb(levels: int, width: int = 10) -> list[Any]:
    value: list[Any] = ["lol"] * width
    for _ in range(levels):
        value = [value] * width
    return value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(shared_bomb(10), "[[[[...], [...], [...], [...], [...], [...], [...], [...]...", id="bomb"),
        pytest.param(10**10_000, "a number of about 10001 digits", id="huge-int"),
        pytest.param("x" * 10_000_000, "'" + "x" * 56 + "...", id="huge-str"),
        pytest.param(0, "0", id="zero"),
        pytest.param({"cpu": "2"}, "{'cpu': '2'}", id="dict"),
        pytest.param([1, "a", None], "[1, 'a', None]", id="list"),
    ],
)
@pytest.mark.timeout(20, method="thread")  # repr of a bomb runs in C, where a signal cannot stop it
def test_short_shows_at_most_sixty_characters_of_any_value(value: Any, expected: str) -> None:
    text = short(value)
    assert len(text) <= 60
    assert text == expected


def test_short_survives_a_value_nested_past_any_recursion_limit() -> None:
    value: list[Any] = []
    for _ in range(100_000):
        value = [value]
    assert short(value) == "[[[[...]]]]"
