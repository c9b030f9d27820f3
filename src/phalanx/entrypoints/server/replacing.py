"""``PUT`` of a Queue, JobType, Dataset or Pipeline: give the stored object the body's spec, labels and annotations.

What ``phalanx submit`` of an existing object does locally (``Operations.apply``, ``kubectl apply``'s way), over
the API: the port's ``replace``, which the HTTP backend (``services.remote``) needs and no other route serves.
Paths are the kinds' item paths (``PREFIX/queues/{name}``, ``PREFIX/namespaces/{namespace}/datasets/{name}``...).

The body goes through the same validation door as a create (``Operations.validate``: every problem a 422 cause at
its field path, nothing written), its kind, name and namespace must be the path's, and the object must exist
(404). A ``metadata.resourceVersion`` in the body is a precondition: the stored object moved on since that
version was read is a 409 ``Conflict`` (read it again); without one, the spec is applied to whatever is stored.
Its status stays; a Dataset given a new spec is materialised again. Jobs, Sweeps and PipelineRuns are not
replaced: their specs run as submitted (delete and submit again). The verb is ``update``: an editor of the
namespace, an admin of every namespace for the cluster-scoped kinds.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from phalanx.entrypoints.server.access import Access, Authorize, Refusal, bearer_token
from phalanx.entrypoints.server.kinds import PREFIX, RESOURCES, Resource
from phalanx.entrypoints.server.statuses import ApiError, Status, invalid
from phalanx.model.base import API_VERSION
from phalanx.model.errors import FieldError, SpecError, short
from phalanx.model.names import check_dns_label
from phalanx.model.textfiles import MAX_FILE_BYTES
from phalanx.services.operations import OperationError, Operations

#: The kinds ``Operations.apply`` gives a new spec; the others run as submitted.
REPLACEABLE = ("Queue", "JobType", "Dataset", "Pipeline")


def add_replace_routes(app: FastAPI, ops: Operations, authorize: Authorize | None) -> None:
    """Register ``PUT`` on the item path of each replaceable kind (before the app's catch-all)."""
    for resource in (r for r in RESOURCES if r.kind in REPLACEABLE):
        item = (
            f"{PREFIX}/namespaces/{{namespace}}/{resource.plural}/{{name}}"
            if resource.namespaced
            else f"{PREFIX}/{resource.plural}/{{name}}"
        )
        tags: list[str | Enum] = [resource.kind]
        app.add_api_route(
            item,
            _replacer(ops, authorize, resource),
            methods=["PUT"],
            tags=tags,
            summary=f"Replace a {resource.kind}'s spec, labels and annotations",
            responses={
                200: {"model": resource.model, "description": "The object as written."},
                **{code: {"model": Status, "description": text} for code, text in _REFUSALS},
            },
            openapi_extra={
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{resource.kind}"}}},
                }
            },
            operation_id=f"replace{resource.kind}",
        )


_REFUSALS = (
    (400, "A bad body, path segment or query parameter (named)."),
    (401, "Not authenticated (when the server authorizes requests)."),
    (403, "Not allowed (when the server authorizes requests)."),
    (404, "No such object."),
    (409, "It changed since the body's resourceVersion was read."),
    (422, "The spec is invalid (each problem at its field path)."),
)


def _replacer(ops: Operations, authorize: Authorize | None, resource: Resource) -> Any:
    async def replace(request: Request, namespace: str | None, name: str) -> JSONResponse:
        for value, what in ((namespace, "namespace"), (name, "name")):
            if value is not None:
                try:
                    check_dns_label(value, what)
                except ValueError as err:
                    raise ApiError(400, f"the path's {what}: {err}") from None
        if authorize is not None:
            token = bearer_token(request.headers.get("authorization"))
            refusal = authorize(Access("update", resource.kind, namespace, name, token))
            if isinstance(refusal, Refusal):  # a Scope narrows only lists of every namespace
                raise ApiError(refusal.code, refusal.message, kind=resource.kind, name=name)
        raw = await request.body()
        written = await run_in_threadpool(_replace, ops, resource, namespace, name, raw)
        return JSONResponse(written.to_dict())

    if resource.namespaced:

        async def replace_namespaced(request: Request, namespace: str, name: str) -> JSONResponse:
            return await replace(request, namespace, name)

        return replace_namespaced

    async def replace_cluster_scoped(request: Request, name: str) -> JSONResponse:
        return await replace(request, None, name)

    return replace_cluster_scoped


def _replace(ops: Operations, resource: Resource, namespace: str | None, name: str, raw: bytes) -> Any:
    """Check the body against the path and the stored object, validate it, apply it; the object as written."""
    document = _body(raw)
    _check_names(document, resource, namespace, name)
    existing = resource.find(ops.backend, namespace, name)
    if existing is None:
        where = f"{namespace}/{name}" if namespace else name
        raise ApiError(
            404, f"{resource.kind.lower()} {where} not found; create it with POST", kind=resource.kind, name=name
        )
    read = (document.get("metadata") or {}).get("resourceVersion")
    if read is not None and str(read) != existing.metadata.resource_version:
        raise ApiError(
            409,
            f"{resource.kind.lower()} {name} changed since resourceVersion {short(str(read))} was read (it is at "
            f"{existing.metadata.resource_version}); read it again and retry",
            reason="Conflict",
            kind=resource.kind,
            name=name,
        )
    try:
        parsed = ops.validate([document], namespace=namespace)
    except SpecError as err:
        raise invalid(err.errors, kind=resource.kind, name=name) from None
    if [type(obj).__name__ for obj in parsed] != [resource.kind]:
        made = ", ".join(type(obj).__name__ for obj in parsed) or "nothing"
        problem = FieldError("kind", f"the document makes {made}; this path takes one {resource.kind}")
        raise invalid([problem], kind=resource.kind, name=name)
    try:
        ops.apply(parsed[0])
    except OperationError as err:
        raise ApiError(409, str(err), kind=resource.kind, name=name) from None
    written = resource.find(ops.backend, namespace, name)
    if written is None:  # deleted between the write and this read
        raise ApiError(404, f"{resource.kind.lower()} {name} was deleted meanwhile", kind=resource.kind, name=name)
    return written


def _body(raw: bytes) -> dict[str, Any]:
    if len(raw) > MAX_FILE_BYTES:
        raise ApiError(413, f"the body is {len(raw)} bytes, past the {MAX_FILE_BYTES} a spec may have; send less")
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):
        raise ApiError(400, "the body is not JSON; send one object as JSON") from None
    if not isinstance(document, dict):
        raise ApiError(400, f"the body is a JSON {type(document).__name__}, not an object; send one object")
    return document


def _check_names(document: dict[str, Any], resource: Resource, namespace: str | None, name: str) -> None:
    """The body's kind, name and namespace must be the path's (422 naming each field that is not)."""
    kind = document.setdefault("kind", resource.kind)
    document.setdefault("apiVersion", API_VERSION)
    metadata = document.setdefault("metadata", {})
    problems: list[FieldError] = []
    if kind != resource.kind:
        problems.append(FieldError("kind", f"is {short(kind)}, and this path replaces a {resource.kind}"))
    if not isinstance(metadata, dict):
        raise invalid([FieldError("metadata", "must be a mapping")], kind=resource.kind, name=name)
    if metadata.setdefault("name", name) != name:
        problems.append(FieldError("metadata.name", f"is {short(metadata['name'])}, and the path's name is {name}"))
    given = metadata.get("namespace")
    if given is not None and not resource.namespaced:
        problems.append(FieldError("metadata.namespace", f"a {resource.kind} is cluster-scoped: leave it out"))
    elif given is not None and given != namespace:
        problems.append(FieldError("metadata.namespace", f"is {short(given)}, and the path's namespace is {namespace}"))
    if problems:
        raise invalid(problems, kind=resource.kind, name=name)
