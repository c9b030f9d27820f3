"""Kubernetes-shaped object metadata, the same in every backend.

``uid``, ``resourceVersion``, ``generation`` and the timestamps are owned by the store: clients may send them
but the store overwrites them. ``resourceVersion`` is the optimistic-concurrency token.
"""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import Field, field_validator

from phalanx.model.base import ApiModel

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME_LENGTH = 63


def check_dns_label(value: str, what: str = "name") -> str:
    """Validate a DNS-1123 label (what Kubernetes accepts as a Service name), returning it unchanged.

    Raises:
        ValueError: with the rule that was broken and an example of a valid value.
    """
    if not value:
        raise ValueError(f"{what} must not be empty; use lowercase letters, digits and '-', e.g. 'mnist-ddp'")
    if len(value) > MAX_NAME_LENGTH:
        raise ValueError(f"{what} is {len(value)} characters; at most {MAX_NAME_LENGTH} are allowed")
    if not _DNS_LABEL.match(value):
        suggestion = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-") or "my-job"
        raise ValueError(
            f"{what} {value!r} is not a DNS-1123 label: use lowercase letters, digits and '-', starting and "
            f"ending with a letter or digit, e.g. {suggestion!r}"
        )
    return value


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
    def _dns_label(cls, value: str) -> str:
        return check_dns_label(value)
