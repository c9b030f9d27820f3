"""Event: a record of something that happened to an object, for `describe` and for auditing."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from phalanx.model.base import ApiModel


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
