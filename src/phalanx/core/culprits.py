"""Finding the items that make a computation over a whole set fail, so the rest can go on without them.

The scheduler's cycle is one computation over every pending job: one job whose numbers break it (a quantity
too large for the arrays, a bug meeting an unusual spec) would stop every job from being scheduled. Rather
than guessing which input is to blame, ``find_culprits`` asks the computation itself, on smaller sets.

It assumes that a set containing a failing subset fails (adding an item never repairs a failure). Each
culprit costs about log2(n) + 1 trials, so a cycle with one bad job among a thousand runs about eleven times.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def find_culprits(items: Sequence[T], fails: Callable[[Sequence[T]], bool]) -> list[T] | None:
    """The items without which ``fails`` no longer fails, in their order.

    Args:
        items: the whole set, on which ``fails`` is true.
        fails: runs the computation on a subset (keeping the order) and says whether it failed.

    Returns:
        The culprits: ``fails`` is false on ``items`` without them. None when ``fails`` is true even on the
        empty set: the failure is not caused by any item.
    """
    if fails(()):
        return None
    culprits: list[T] = []
    kept: list[T] = []  # items known to pass together
    remaining = list(items)
    while remaining and fails([*kept, *remaining]):
        # The shortest prefix of ``remaining`` that fails with ``kept`` ends with a culprit.
        low, high = 1, len(remaining)
        while low < high:
            middle = (low + high) // 2
            if fails([*kept, *remaining[:middle]]):
                high = middle
            else:
                low = middle + 1
        culprits.append(remaining[low - 1])
        kept.extend(remaining[: low - 1])
        remaining = remaining[low:]
    return culprits
