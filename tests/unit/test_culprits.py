"""find_culprits: the items that make a computation over a set fail, found with few trials."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pytest

from phalanx.core.culprits import find_culprits


def fails_with(bad: set[int], trials: list[int] | None = None) -> Callable[[Sequence[int]], bool]:
    """A computation that fails when any item of ``bad`` is in the set (and counts its runs)."""

    def fails(items: Sequence[int]) -> bool:
        if trials is not None:
            trials.append(len(items))
        return any(item in bad for item in items)

    return fails


@pytest.mark.parametrize(
    ("items", "bad"),
    [
        pytest.param(list(range(1)), {0}, id="the-only-item"),
        pytest.param(list(range(10)), {0}, id="first"),
        pytest.param(list(range(10)), {9}, id="last"),
        pytest.param(list(range(10)), {4}, id="middle"),
        pytest.param(list(range(100)), {3, 57, 98}, id="three-apart"),
        pytest.param(list(range(20)), {7, 8}, id="neighbours"),
        pytest.param(list(range(6)), set(range(6)), id="every-item"),
    ],
)
def test_every_culprit_and_nothing_else_is_found_in_order(items: list[int], bad: set[int]) -> None:
    assert find_culprits(items, fails_with(bad)) == sorted(bad)


def test_a_failure_that_no_item_causes_is_reported_as_none() -> None:
    assert find_culprits([1, 2, 3], lambda items: True) is None


def test_a_failure_that_needs_two_items_together_blames_the_later_one() -> None:
    # Neither 2 nor 5 fails alone; together they do (e.g. their sum overflows): one of them must go.
    def fails(items: Sequence[int]) -> bool:
        return 2 in items and 5 in items

    culprits = find_culprits(list(range(8)), fails)
    assert culprits == [5]
    assert not fails([i for i in range(8) if i not in culprits])


def test_one_culprit_among_a_thousand_costs_about_log2_trials() -> None:
    trials: list[int] = []
    assert find_culprits(list(range(1000)), fails_with({613}, trials)) == [613]
    # The empty set, the whole set, a binary search of the prefix, and the set without the culprit.
    assert len(trials) <= math.ceil(math.log2(1000)) + 3
