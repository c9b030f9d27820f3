"""Any value anywhere in a Kubeflow document is either accepted or refused with field errors, never a crash.

Every path of every example document (tests/data/kubeflow) gets each of a few values of the wrong shape; the one
validation door must answer with a SpecError (the CLI prints it as a sentence per field) or accept the document.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.model.errors import SpecError
from phalanx.model.loading import builtin_jobtypes, read_documents
from phalanx.services.operations import convert_documents, validate_documents

DATA = Path(__file__).parents[2] / "data" / "kubeflow"
JOBTYPES = builtin_jobtypes()
ODD_VALUES: list[Any] = [None, 0, -1, "x", True, [], {}, [None], {"": None}, 1.5]


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into a document: mapping keys and list indexes."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield (*prefix, index)
            yield from paths(item, (*prefix, index))


def replaced(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    copied = copy.deepcopy(document)
    target = copied
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return copied


@pytest.mark.parametrize("name", sorted(p.stem for p in DATA.glob("*.yaml")))
def test_no_value_anywhere_crashes_the_door(name: str) -> None:
    documents = read_documents(DATA / f"{name}.yaml")
    tried = 0
    for position, document in enumerate(documents):
        for path in paths(document):
            for value in ODD_VALUES:
                changed = [*documents]
                changed[position] = replaced(document, path, value)
                try:
                    validate_documents(changed, JOBTYPES)
                    convert_documents(changed, JOBTYPES)
                except SpecError as err:
                    assert err.errors, (path, value)
                tried += 1
    assert tried > 100
