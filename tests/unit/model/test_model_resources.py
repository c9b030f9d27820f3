"""Quantities: Kubernetes notation in, exact integers out, and back."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phalanx.model.resources import (
    CPU_QUANTITY_PATTERN,
    MEMORY_QUANTITY_PATTERN,
    QuantityError,
    ResourceVector,
    format_cpu,
    format_memory,
    parse_cpu,
    parse_memory,
)


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        pytest.param(2, 2000, id="int-cores"),
        pytest.param(1.5, 1500, id="float-cores"),
        pytest.param("500m", 500, id="millicores"),
        pytest.param("2", 2000, id="string-cores"),
        pytest.param("0.25", 250, id="string-fraction"),
        pytest.param(" 3 ", 3000, id="spaces"),
    ],
)
def test_cpu_quantities_parse_to_millicores(text: object, milli: int) -> None:
    assert parse_cpu(text) == milli


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        pytest.param("2x", "millicores", id="unknown-unit"),
        pytest.param("0.0005", "finer than one millicore", id="too-fine"),
        pytest.param(True, "invalid CPU quantity", id="bool"),
        pytest.param("abc", "invalid CPU quantity", id="text"),
        pytest.param([1], "invalid CPU quantity", id="list"),
    ],
)
def test_bad_cpu_quantities_say_what_is_valid(text: object, hint: str) -> None:
    with pytest.raises(QuantityError, match=hint):
        parse_cpu(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        pytest.param("4Gi", 4 * 2**30, id="gibibytes"),
        pytest.param("512Mi", 512 * 2**20, id="mebibytes"),
        pytest.param("1G", 10**9, id="gigabytes"),
        pytest.param("1.5Gi", 3 * 2**29, id="fractional"),
        pytest.param(1024, 1024, id="bytes-int"),
        pytest.param("100", 100, id="bytes-string"),
    ],
)
def test_memory_quantities_parse_to_bytes(text: object, size: int) -> None:
    assert parse_memory(text) == size


@pytest.mark.parametrize("text", ["4GB", "1Gib", "lots", "-1Gi"], ids=["GB", "Gib", "word", "negative"])
def test_bad_memory_quantities_are_rejected(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_memory(text)


@given(st.integers(min_value=1, max_value=10**7))
def test_cpu_round_trips_through_its_rendering(milli: int) -> None:
    assert parse_cpu(format_cpu(milli)) == milli


@given(st.integers(min_value=1, max_value=2**50))
def test_memory_round_trips_through_its_rendering(size: int) -> None:
    assert parse_memory(format_memory(size)) == size


def test_vectors_add_subtract_scale_and_fit() -> None:
    a = ResourceVector(cpu_milli=1500, memory=2**30, gpu=1)
    b = ResourceVector(cpu_milli=500, memory=2**29, gpu_milli=250)
    assert a + b - b == a
    assert a.scaled(3) == ResourceVector(4500, 3 * 2**30, 3, 0)
    assert b.fits_in(a + b)
    assert not a.fits_in(b)
    assert a.describe() == "cpu=1500m memory=1Gi gpu=1"


# The quantity patterns carried by the JSON schema (and so by the CRDs) must accept what the parsers accept.
QUANTITY_TEXT = st.text(alphabet="0123456789.mkKMGTPiE ", max_size=8)


@given(QUANTITY_TEXT)
def test_the_cpu_pattern_accepts_exactly_the_notation_parse_cpu_accepts(text: str) -> None:
    try:
        parse_cpu(text)
        parsed = True
    except QuantityError as err:
        parsed = "finer than one millicore" in str(err)  # notation fine; the amount is refused by the parser
    assert parsed == bool(re.search(CPU_QUANTITY_PATTERN, text))


@given(QUANTITY_TEXT)
def test_the_memory_pattern_accepts_exactly_the_notation_parse_memory_accepts(text: str) -> None:
    try:
        parse_memory(text)
        parsed = True
    except QuantityError:
        parsed = False
    assert parsed == bool(re.search(MEMORY_QUANTITY_PATTERN, text))
