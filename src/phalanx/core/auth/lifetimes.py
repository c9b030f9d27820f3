"""A token's lifetime as people write it (``90m``, ``12h``, ``30d``, ``2w``), read into a ``timedelta``.

One number and one unit, nothing else: ``1d12h`` or ``1.5d`` are refused with a sentence rather than guessed at.
The bound (10 years) keeps the expiry a date every store and ``datetime`` can hold.
"""

from __future__ import annotations

import re
from datetime import timedelta

_LIFETIME = re.compile(r"([0-9]{1,6})([mhdw])")
_UNITS = {"m": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}
MAX_LIFETIME = timedelta(days=3650)


def parse_lifetime(text: str) -> timedelta:
    """``30d`` -> 30 days.

    Raises:
        ValueError: naming the format and an example when ``text`` is not one, or is zero or over ten years.
    """
    match = _LIFETIME.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"expires {text!r} is not a lifetime: write a whole number and a unit m, h, d or w, e.g. 30d or 12h"
        )
    lifetime = int(match.group(1)) * _UNITS[match.group(2)]
    if not timedelta(0) < lifetime <= MAX_LIFETIME:
        raise ValueError(f"expires {text!r} must be more than nothing and at most 3650d (ten years)")
    return lifetime
