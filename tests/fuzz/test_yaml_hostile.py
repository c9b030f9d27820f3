"""Hostile YAML at the file door: bombs, depth, size, many documents, encodings, duplicate keys, tags, anchors.

Each file of the corpus's YAML cases is read with ``read_documents`` and validated as ``phalanx submit`` does,
in a forked child with a time and memory limit (``isolation``). It must end in one clean answer within the
limit: refused with a ``SpecError`` (short messages, with a line for duplicate keys), or accepted where the
corpus allows it. A hang, a crash or any other exception is a finding.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fuzz.corpus import ACCEPT, ANY, REFUSE, Case, yaml_cases
from fuzz.isolation import isolated
from phalanx.model.errors import SpecError
from phalanx.model.loading import builtin_jobtypes, read_documents
from phalanx.services.operations import validate_documents

#: A refusal of a hostile file takes milliseconds; this is what a user would call a hang.
SECONDS_PER_FILE = 10.0
MAX_MESSAGE = 2_000


def read_and_validate(path: Path) -> tuple[str, list[str]]:
    """What `phalanx submit --dry-run` does with a file, as (verdict, error lines)."""
    try:
        documents = read_documents(path)
        validate_documents(documents, builtin_jobtypes(), source=str(path))
    except SpecError as err:
        return REFUSE, [str(error) for error in err.errors]
    return ACCEPT, []


@pytest.mark.parametrize("case", yaml_cases(), ids=lambda case: case.name)
def test_a_hostile_file_gets_one_clean_answer_in_time(case: Case, tmp_path: Path) -> None:
    path = tmp_path / case.filename
    path.write_bytes(case.content)
    outcome = isolated(read_and_validate, path, timeout=SECONDS_PER_FILE)
    assert outcome.kind == "returned", f"{case.name}: {outcome.kind} {outcome.value or ''}\n{outcome.error}"
    verdict, errors = outcome.value
    if case.verdict != ANY:
        assert verdict == case.verdict, f"{case.name}: {verdict}, expected {case.verdict}; errors: {errors[:3]}"
    for error in errors:
        assert 0 < len(error) <= MAX_MESSAGE, f"{case.name}: a message of {len(error)} characters: {error[:200]}"
    if case.name.startswith("duplicate-") and case.verdict == REFUSE:
        assert any("line" in error for error in errors), f"{case.name}: the duplicate key's line is not named: {errors}"


def _python_tag_ran(marker: Path) -> Any:
    text = f"kind: TrainingJob\nx: !!python/object/apply:os.mkdir ['{marker}']\n"
    try:
        from phalanx.model.loading import parse_documents

        parse_documents(text)
    except SpecError:
        pass
    return marker.exists()


def test_a_python_tag_is_refused_without_running_anything(tmp_path: Path) -> None:
    marker = tmp_path / "made-by-yaml"
    outcome = isolated(_python_tag_ran, marker, timeout=SECONDS_PER_FILE)
    assert outcome.kind == "returned", outcome.error
    assert outcome.value is False, "a !!python/object tag ran code: the loader is not the safe one"
