"""RFC 7386 merge patches applied as the API server applies them, for the in-memory APIs of unit tests."""

from __future__ import annotations

import copy
from typing import Any


def merge(target: Any, patch: Any) -> Any:
    """``target`` with ``patch`` merged in: a None value removes the key, a dict merges, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result
