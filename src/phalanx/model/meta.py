"""Kubernetes-shaped object metadata, the same in every backend.

``uid``, ``resourceVersion``, ``generation`` and the timestamps are owned by the store: clients may send them
but the store overwrites them. ``resourceVersion`` is the optimistic-concurrency token.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field, ValidationInfo, field_validator

from phalanx.model.base import ApiModel
from phalanx.model.names import MAX_NAME_LENGTH, check_dns_label

__all__ = ["MAX_NAME_LENGTH", "ObjectMeta", "check_dns_label"]


class ObjectMeta(ApiModel):
    """Identity and bookkeeping of an API object."""

    name: str
    namespace: str = "default"
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: str | None = None
    resource_version: str | None = None
    generation: int = 0
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None

    @field_validator("name", "namespace")
    @classmethod
    def _dns_label(cls, value: str, info: ValidationInfo) -> str:
        return check_dns_label(value, info.field_name or "name")
