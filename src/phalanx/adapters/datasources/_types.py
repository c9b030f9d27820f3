"""The plain types of the dataset-source adapter: what to fetch, what was written, and how it failed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SourceKind = Literal["path", "url", "sql", "script"]

#: The leaf each part of a source is named by in error fields, appended to ``SourceRequest.field`` (the names of
#: ``phalanx.model.datasets.DatasetSource``: ``path``, ``url``, ``sql{url, query}``, ``script.command``).
FIELD_LEAVES: dict[str, str] = {
    "path": "path",
    "url": "url",
    "sql_url": "sql.url",
    "query": "sql.query",
    "command": "script.command",
}


@dataclass(frozen=True, slots=True)
class SourceRequest:
    """Where a dataset comes from: one of a local path, a URL, an SQL query or a script.

    Attributes:
        kind: which of the fields below is the source.
        path: a local file or directory, absolute or relative to ``base_dir``.
        url: http(s) (streamed through httpx) or any fsspec URL (``s3://``, ``gs://``, ``memory://``, ``file://``).
        sql_url: a SQLAlchemy URL (``sqlite:///…`` built in, ``postgresql://…`` with the postgres extra).
        query: the SQL query whose rows become ``data.parquet``.
        command: a command that writes the dataset into ``$PHALANX_DATASET_OUTPUT`` (also its working directory).
        field: the field path of the source in the user's spec; errors name ``<field>.<leaf>`` (``FIELD_LEAVES``).
    """

    kind: SourceKind
    path: str | None = None
    url: str | None = None
    sql_url: str | None = None
    query: str | None = None
    command: tuple[str, ...] = ()
    field: str = "spec.source"


@dataclass(frozen=True, slots=True)
class DataFile:
    """One file of a materialised dataset: its posix path relative to the dataset root, size and sha256 (hex)."""

    path: str
    bytes: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Materialized:
    """A dataset written to its destination: its files, total size, content version and one line of lineage."""

    files: tuple[DataFile, ...]
    bytes: int
    version: str
    lineage: str


class SourceError(Exception):
    """A source could not be materialised. ``field`` names the spec field, ``message`` what happened and the fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def field_of(request: SourceRequest, part: str | None = None) -> str:
    """The field path an error about ``part`` of ``request`` names (the source itself when ``part`` is None).

    ``request.field`` may name the source (``spec.source``) or already one of its leaves
    (``spec.source.sql.query``); either way the result names the leaf that is at fault.
    """
    base = request.field
    for leaf in sorted(set(FIELD_LEAVES.values()), key=len, reverse=True):
        if base.endswith("." + leaf):
            base = base[: -len(leaf) - 1]
            break
    if part is None:
        return base
    return f"{base}.{FIELD_LEAVES[part]}"
