"""The embedded backend keeps the stored JobTypes parsed between submissions, and reads them again as soon as one
is created, changed or deleted, by this store or by another process's (``SqliteBackend._jobtypes``, keyed by the
store's ``kind_mark``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phalanx.adapters.store import SqliteStore
from phalanx.model.errors import SpecError
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import parse_jobtype
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SqliteBackend
from phalanx.services.operations import Operations


def jobtype(name: str, *, max_count: int) -> JobType:
    return parse_jobtype(
        {
            "kind": "JobType",
            "metadata": {"name": name},
            "spec": {"roles": {"worker": {"minCount": 1, "maxCount": max_count, "template": {"command": ["true"]}}}},
        }
    )


def job(type_name: str, count: int) -> dict[str, Any]:
    return {
        "kind": "TrainingJob",
        "metadata": {"name": "j"},
        "spec": {"type": type_name, "replicas": {"worker": {"count": count}}},
    }


@pytest.fixture
def stores(tmp_path: Path) -> tuple[SqliteStore, SqliteStore]:
    """The served store, and another on the same file: a control plane's in another process."""
    return SqliteStore(tmp_path / "state.db"), SqliteStore(tmp_path / "state.db")


def test_a_jobtype_created_changed_or_deleted_elsewhere_is_seen_by_the_next_submission(
    tmp_path: Path, stores: tuple[SqliteStore, SqliteStore]
) -> None:
    served, other = stores
    ops = Operations(SqliteBackend(served, StateLayout(tmp_path)))
    assert "tiny" not in ops.jobtypes()

    other.create(jobtype("tiny", max_count=2))
    assert ops.jobtypes()["tiny"].spec.roles["worker"].max_count == 2
    ops.validate([job("tiny", 2)])
    with pytest.raises(SpecError, match="allows at most 2, got 3"):
        ops.validate([job("tiny", 3)])

    # Submitted again with another spec (kubectl apply's way), through the other store.
    assert Operations(SqliteBackend(other, StateLayout(tmp_path))).apply(jobtype("tiny", max_count=4))
    assert ops.jobtypes()["tiny"].spec.roles["worker"].max_count == 4
    ops.validate([job("tiny", 3)])

    other.delete(JobType, "default", "tiny")
    assert "tiny" not in ops.jobtypes()
    with pytest.raises(SpecError, match="unknown job type 'tiny'"):
        ops.validate([job("tiny", 1)])


def test_unchanged_jobtypes_are_not_parsed_again(
    tmp_path: Path, stores: tuple[SqliteStore, SqliteStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    served, other = stores
    backend = SqliteBackend(served, StateLayout(tmp_path))
    other.create(jobtype("tiny", max_count=2))
    first = backend.list(JobType)
    reads: list[object] = []
    listed = served.list
    monkeypatch.setattr(served, "list", lambda *args, **kwargs: reads.append(args) or listed(*args, **kwargs))

    again = backend.list(JobType)
    other.create(jobtype("small", max_count=1))
    after = backend.list(JobType)

    assert again == first and again is not first  # a list of the caller's own, of the same JobTypes
    assert reads == [(JobType,)]  # read once: after "small" was created, not before
    assert [t.metadata.name for t in after] == ["small", "tiny"]
