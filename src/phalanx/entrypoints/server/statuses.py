"""Every error the API answers, as a Kubernetes ``Status``: a code, a reason and one sentence that names the field.

A spec refused at the validation door keeps each of its problems as a cause (``details.causes[].field``, the
field's path in the document, as ``phalanx submit`` prints it); other refusals name the query parameter or path
segment at fault in the message. No traceback ever reaches a caller: an unexpected failure is a 500 whose message
points at the server's log.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from phalanx.model.errors import FieldError

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    500: "InternalError",
    503: "ServiceUnavailable",
}


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class StatusCause(_Wire):
    """One problem of a refused spec: the field's path and what to do about it."""

    field: str
    message: str
    reason: str = "FieldValueInvalid"


class StatusDetails(_Wire):
    """What a refusal is about: the object (kind, name) and, for a spec, each problem."""

    kind: str | None = None
    name: str | None = None
    causes: list[StatusCause] = Field(default_factory=list)


class Status(_Wire):
    """A refusal, shaped as Kubernetes writes one (``kind: Status``, ``status: Failure``)."""

    api_version: str = "v1"
    kind: str = "Status"
    status: str = "Failure"
    message: str
    reason: str
    code: int
    details: StatusDetails | None = None


class ApiError(Exception):
    """A request the API refuses: the HTTP code, the sentence, and what it is about."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        kind: str | None = None,
        name: str | None = None,
        causes: Sequence[FieldError] = (),
    ) -> None:
        super().__init__(message)
        self.status = Status(
            message=message,
            reason=reason or REASONS.get(code, "Unknown"),
            code=code,
            details=StatusDetails(
                kind=kind, name=name, causes=[StatusCause(field=c.path, message=c.message) for c in causes]
            )
            if kind or name or causes
            else None,
        )

    @property
    def code(self) -> int:
        """The HTTP status code."""
        return self.status.code


def invalid(errors: Sequence[FieldError], *, kind: str | None, name: str | None) -> ApiError:
    """A 422 for a spec the door refused: every problem a cause, the message all of them in one line each."""
    noun = f"{kind} {name}" if kind and name else (kind or "the object")
    problems = "; ".join(f"{e.path}: {e.message}" if e.path else e.message for e in errors)
    return ApiError(422, f"{noun} is invalid: {problems}", kind=kind, name=name, causes=errors)


def wire(status: Status) -> dict[str, object]:
    """The JSON body of a Status."""
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)
