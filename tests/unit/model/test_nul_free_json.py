"""The NUL-byte checks skipped for JSON text that cannot hold a NUL (``model.base.nul_free_context``): a stored row
or the defaulted job read back from its own JSON. JSON writes a NUL only as the escape \\u0000, so text without
that escape decodes to NUL-free strings; text with it is checked field by field as before."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from phalanx.adapters.store._parsing import parse_row
from phalanx.model.base import NUL_FREE, nul_free_context
from phalanx.model.jobs import TrainingJob


def job_text(command: list[str]) -> str:
    document: dict[str, Any] = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "j", "namespace": "default", "resourceVersion": "3"},
        "spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": {"command": command}}}},
    }
    return json.dumps(document)


def test_text_without_the_escape_is_nul_free_and_text_with_it_is_not() -> None:
    assert nul_free_context('{"a": "plain"}') == {NUL_FREE: True}
    assert nul_free_context(b'{"a": "plain"}') == {NUL_FREE: True}
    assert nul_free_context('{"a": "x\\u0000y"}') is None
    assert nul_free_context(b'{"a": "x\\u0000y"}') is None
    # An escaped backslash followed by "u0000" is no NUL, but is checked anyway: only a cost, never a miss.
    assert nul_free_context('{"a": "\\\\u0000"}') is None


def test_a_stored_row_with_a_nul_in_a_command_is_still_refused_with_its_path() -> None:
    text = job_text(["py\x00thon"])
    assert "\\u0000" in text  # json.dumps writes the NUL as its escape
    obj, problem = parse_row(TrainingJob, "default", "j", 3, text)
    assert obj is None
    assert "spec.replicas.worker.template.command[0]" in problem and "NUL" in problem


def test_a_nul_free_row_parses_the_same_with_and_without_the_checks() -> None:
    text = job_text(["python", "train.py"])
    obj, problem = parse_row(TrainingJob, "default", "j", 3, text)
    assert problem == "" and obj is not None
    assert obj == TrainingJob.model_validate_json(text)
    assert obj.spec.replicas["worker"].template.command == ["python", "train.py"]


def test_the_context_only_skips_the_nul_checks_not_the_other_rules() -> None:
    text = job_text(["python"]).replace('"count": 1', '"count": -1')
    with pytest.raises(ValidationError, match="count"):
        TrainingJob.model_validate_json(text, context=nul_free_context(text))
