"""The pydantic base shared by every API object: camelCase on the wire, snake_case in Python, no unknown keys.

Unknown keys are errors, not silently dropped: a misspelt ``backofLimit`` must not quietly run a job with the
default policy.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

API_GROUP = "phalanx.dev"
API_VERSION = f"{API_GROUP}/v1alpha1"


class ApiModel(BaseModel):
    """Base for every API structure: camelCase aliases, strict keys, assignment validated."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_assignment=True,
        use_enum_values=True,
    )

    def to_dict(self) -> dict[str, Any]:
        """The wire form: camelCase keys, JSON-compatible values, unset optionals left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
