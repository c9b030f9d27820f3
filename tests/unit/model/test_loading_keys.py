"""Duplicate mapping keys are refused with their path and line, in spec files and in the built-in JobTypes.

YAML parsers keep the last of two equal keys; a second ``spec:`` then silently replaced the first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.model import loading
from phalanx.model.errors import FieldError, SpecError
from phalanx.model.loading import parse_documents

pytestmark = pytest.mark.timeout(30)


def duplicates(text: str) -> list[FieldError]:
    with pytest.raises(SpecError) as caught:
        parse_documents(text, source="dup.yaml")
    assert caught.value.source == "dup.yaml"
    return caught.value.errors


@pytest.mark.parametrize(
    ("text", "path", "where"),
    [
        pytest.param(
            "metadata: {name: j}\nspec:\n  type: generic\nspec:\n  type: pytorch\n",
            "spec",
            "at lines 2 and 4",
            id="top-level",
        ),
        pytest.param(
            "spec:\n  replicas:\n    worker: {count: 1}\n    chief: {count: 1}\n    worker: {count: 2}\n",
            "spec.replicas.worker",
            "at lines 3 and 5",
            id="nested",
        ),
        pytest.param(
            "items:\n  - {a: 1, b: 2}\n  - {a: 1,\n     a: 2}\n", "items[1].a", "at lines 3 and 4", id="in-a-list"
        ),
        pytest.param('{"spec": {"x": 1, "x": 2}}', "spec.x", "on line 1", id="json"),
        pytest.param("a: 1\n0x1: 2\n1: 3\n'1': 4\n", "1", "at lines 2 and 3", id="equal-once-read"),
    ],
)
def test_a_duplicate_key_is_refused_with_its_path_and_lines(text: str, path: str, where: str) -> None:
    assert duplicates(text) == [FieldError(path, f"key given twice, {where}; keep one of them")]


def test_every_duplicate_of_every_document_is_reported_at_once() -> None:
    text = "kind: Queue\nkind: Queue\n---\nmetadata: {name: a}\nspec: {a: 1}\nspec: {a: 2}\nmetadata: {name: b}\n"
    assert [str(error) for error in duplicates(text)] == [
        "kind: document 1: key given twice, at lines 1 and 2; keep one of them",
        "spec: document 2: key given twice, at lines 5 and 6; keep one of them",
        "metadata: document 2: key given twice, at lines 4 and 7; keep one of them",
    ]


def test_a_merge_key_may_be_overridden_by_the_mapping_it_merges_into() -> None:
    text = "base: &base {cpu: 1, memory: 1Gi}\nrole: {<<: *base, cpu: 2}\n"
    assert parse_documents(text, source="merge.yaml")[0]["role"] == {"cpu": 2, "memory": "1Gi"}


def test_the_builtin_jobtypes_are_read_by_the_same_strict_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "jobtypes"
    folder.mkdir()
    (folder / "twice.yaml").write_text(
        "apiVersion: phalanx.dev/v1alpha1\nkind: JobType\nmetadata: {name: twice}\n"
        "spec:\n  roles: {worker: {minCount: 1}}\n  roles: {chief: {minCount: 1}}\n"
    )
    monkeypatch.setattr(loading.resources, "files", lambda package: tmp_path)
    loader = loading._load_builtin_jobtypes.__wrapped__

    with pytest.raises(SpecError) as caught:
        loader()

    assert caught.value.source == "twice.yaml"
    assert [str(e) for e in caught.value.errors] == ["spec.roles: key given twice, at lines 5 and 6; keep one of them"]


def test_the_shipped_jobtypes_still_load() -> None:
    assert sorted(loading._load_builtin_jobtypes.__wrapped__()) == [
        "generic",
        "jax",
        "mpi",
        "paddle",
        "pytorch",
        "tensorflow",
        "xgboost",
    ]
