"""Dataset: data declared once, materialised from its source, versioned by content, attached to jobs.

A Dataset names where its data comes from (exactly one source) and how jobs get it: ``replicate`` (every
replica gets all of it, e.g. the trials of a sweep) or ``shard`` (each replica a disjoint part, balanced by
bytes, following its rank). Phalanx materialises it once and records the content version (a SHA-256 over its
files), its size and its lineage in ``status``. A job attaches datasets under ``spec.datasets``
(``DatasetMount``); its replicas find them through ``PHALANX_DATASET_<NAME>_PATH`` (docs/datasets.md).

This module is the API object only; what materialises and stages datasets comes with the dataset manager.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from phalanx.model.base import ApiModel
from phalanx.model.meta import ObjectMeta, check_dns_label


class Distribution(StrEnum):
    """How a dataset reaches a job's replicas."""

    REPLICATE = "replicate"
    SHARD = "shard"


class CachePolicyName(StrEnum):
    """What a node's cache does once full (``core.data.cache``)."""

    NO_REPLACEMENT = "noReplacement"
    LRU = "lru"


def _no_parent_steps(value: str) -> str:
    if not value:
        raise ValueError("must not be empty; give a file or directory, e.g. /data/mnist or outputs/model")
    if ".." in PurePosixPath(value).parts:
        raise ValueError(f"{value!r} steps out of its directory with '..'; name the path without '..'")
    return value


def _relative(value: str) -> str:
    value = _no_parent_steps(value)
    if value.startswith("/"):
        raise ValueError(f"{value!r} is absolute; name a path inside the job's outputs, e.g. 'model'")
    return value


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]+://\S+$")


def _has_parent_step(path: str) -> bool:
    return ".." in re.split(r"[\\/?#]", path)


def _url(value: str) -> str:
    if not _URL.match(value):
        raise ValueError(
            f"{value!r} is not a URL with a scheme; write e.g. https://host/data.csv, s3://bucket/prefix/ or "
            "gs://bucket/prefix/ (for a file on the machine, use path)"
        )
    if _has_parent_step(value.split("://", 1)[1]):
        raise ValueError(f"{value!r} steps out of its directory with '..'; name the object without '..'")
    return value


def _sql_url(value: str) -> str:
    if value.startswith("sqlite") and _has_parent_step(value.split(":", 1)[1]):
        raise ValueError(f"{value!r} names its database file with '..'; give the path without '..'")
    return value


def _dataset_name(value: str) -> str:
    return check_dns_label(value, "dataset name")


SafePath = Annotated[str, AfterValidator(_no_parent_steps)]
RelativePath = Annotated[str, AfterValidator(_relative)]
DatasetName = Annotated[str, AfterValidator(_dataset_name)]
Url = Annotated[str, AfterValidator(_url)]


class SqlSource(ApiModel):
    """Rows of a query, stored as Parquet."""

    url: Annotated[str, AfterValidator(_sql_url)] = Field(
        min_length=1, description="SQLAlchemy URL, e.g. sqlite:///data.db or postgresql://host/db"
    )
    query: str = Field(min_length=1, description="the SELECT whose rows make the dataset")


class ScriptSource(ApiModel):
    """A command that writes the dataset into ``$PHALANX_DATASET_OUTPUT``."""

    command: list[str] = Field(min_length=1, description="program and arguments, e.g. [python, make_data.py]")


class JobOutputSource(ApiModel):
    """An output of a finished job."""

    job: DatasetName = Field(description="the TrainingJob, in the Dataset's namespace")
    output: RelativePath = Field(default=".", description="a path inside the job's outputs; '.' for all of them")


class DatasetSource(ApiModel):
    """Where the data comes from: exactly one of the fields."""

    path: SafePath | None = Field(default=None, description="a local file or directory")
    url: Url | None = Field(default=None, description="http(s)://, or an object store: s3://, gs:// (extras)")
    sql: SqlSource | None = None
    script: ScriptSource | None = None
    from_job: JobOutputSource | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> DatasetSource:
        given = [name for name in ("path", "url", "sql", "script", "fromJob") if self._value(name) is not None]
        if len(given) != 1:
            found = ", ".join(given) if given else "none"
            raise ValueError(
                f"give exactly one of path, url, sql, script, fromJob (found: {found}), e.g. path: /data/mnist"
            )
        return self

    def _value(self, name: str) -> object:
        return {"path": self.path, "url": self.url, "sql": self.sql, "script": self.script, "fromJob": self.from_job}[
            name
        ]

    @property
    def kind(self) -> str:
        """The source's kind: path, url, sql, script or fromJob."""
        return next(name for name in ("path", "url", "sql", "script", "fromJob") if self._value(name) is not None)


class DatasetCache(ApiModel):
    """How nodes cache the dataset."""

    policy: CachePolicyName = CachePolicyName.NO_REPLACEMENT


class DatasetSpec(ApiModel):
    """The source and how jobs get the data."""

    source: DatasetSource
    distribution: Distribution = Distribution.REPLICATE
    cache: DatasetCache = Field(default_factory=DatasetCache)


class DatasetPhase(StrEnum):
    """Where materialisation stands."""

    PENDING = "Pending"
    MATERIALIZING = "Materializing"
    READY = "Ready"
    FAILED = "Failed"


class DatasetStatus(ApiModel):
    """What was materialised, by Phalanx."""

    nul_bytes_allowed = True  # observed free text: it may quote a program's output

    phase: DatasetPhase = DatasetPhase.PENDING
    version: str | None = Field(default=None, description="content hash, sha256:<hex> over the files")
    bytes: int = Field(default=0, ge=0)
    files: int = Field(default=0, ge=0)
    lineage: str | None = Field(default=None, description="which source, query or job made this version")
    message: str | None = None
    materialized_time: datetime | None = None
    observed_generation: int | None = Field(default=None, description="the spec generation this status is for")
    nodes: list[str] = Field(default_factory=list, description="the nodes whose cache holds this version")


#: Longest value a Kubernetes label may have.
LABEL_VALUE_MAX = 63


def version_label(version: str) -> str:
    """A content version as a node-label value: ``sha256:<64 hex>`` -> ``sha256-<first 56 hex>``.

    Label values allow 63 characters and no ``:``; 56 hex digits (224 bits) still name one version. Idempotent, so
    a value already in label form is returned as it is. Also the name of the version's directory in node caches.
    """
    return version.replace(":", "-")[:LABEL_VALUE_MAX]


class Dataset(ApiModel):
    """A dataset: its source, its distribution to replicas, and the version materialised."""

    api_version: Literal["phalanx.dev/v1alpha1"] = "phalanx.dev/v1alpha1"
    kind: Literal["Dataset"] = "Dataset"
    metadata: ObjectMeta
    spec: DatasetSpec
    status: DatasetStatus = Field(default_factory=DatasetStatus)

    @property
    def settled(self) -> bool:
        """Whether ``status`` holds the outcome (Ready or Failed) of the current spec, not of an earlier one.

        A spec change moves ``metadata.generation``; until the dataset manager takes it up, ``status`` still says
        how the previous spec ended, with the previous ``observedGeneration``.
        """
        return self.status.observed_generation == self.metadata.generation and self.status.phase in (
            DatasetPhase.READY,
            DatasetPhase.FAILED,
        )


class DatasetMount(ApiModel):
    """A dataset a job reads, as listed under the job's ``spec.datasets``."""

    name: DatasetName = Field(description="how the replicas see it: PHALANX_DATASET_<NAME>_PATH")
    dataset: DatasetName | None = Field(default=None, description="the Dataset's name; default: name")
    distribution: Distribution | None = Field(default=None, description="override the Dataset's distribution")
    version: str | None = Field(default=None, description="pin a content version (sha256:...); default: the latest")

    @property
    def dataset_name(self) -> str:
        """The Dataset this mount reads."""
        return self.dataset or self.name
