"""Event: a record of something that happened to an object, for `describe` and for auditing."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from phalanx.model.base import ApiModel
from phalanx.model.meta import ObjectMeta


class Event(ApiModel):
    """One event, Kubernetes style."""

    nul_bytes_allowed = True  # observed free text: it may quote a program's output

    object_kind: str
    object_name: str
    namespace: str = "default"
    type: Literal["Normal", "Warning"] = "Normal"
    reason: str
    message: str
    time: datetime

    @classmethod
    def about(
        cls, kind: str, meta: ObjectMeta, reason: str, message: str, time: datetime, *, warning: bool = False
    ) -> Event:
        """An event about the object ``meta`` names: a Warning with ``warning``, else Normal."""
        return cls(
            object_kind=kind,
            object_name=meta.name,
            namespace=meta.namespace,
            type="Warning" if warning else "Normal",
            reason=reason,
            message=message,
            time=time,
        )
