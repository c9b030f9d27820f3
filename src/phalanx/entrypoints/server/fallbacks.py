"""What the API answers where no route of a kind applies, and the framework's own errors, each as a ``Status``.

``no_route`` takes every path under the API prefix that no route matched and says what it means: an unknown
plural (naming the known ones), a kind at the wrong scope (naming its path), a subresource not served, a verb the
path does not take (405, naming those it does). ``add_error_handlers`` turns ``ApiError``, a query parameter of
the wrong type, a path outside the API, a store that cannot be used for now (503) and any unexpected failure
(500, no traceback) into Statuses.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from phalanx.adapters.store.errors import StoreError
from phalanx.entrypoints.server.kinds import BY_PLURAL, PREFIX, known_plurals
from phalanx.entrypoints.server.statuses import ApiError, wire
from phalanx.entrypoints.server.subresources import SUBRESOURCES
from phalanx.model.errors import short


def no_route(request: Request, rest: str) -> JSONResponse:
    """What an unmatched path under the API means: an unknown plural, a kind at the wrong scope, a wrong verb."""
    parts = [part for part in rest.split("/") if part]
    namespaced_path = bool(parts) and parts[0] == "namespaces"
    plural = (parts[2] if len(parts) >= 3 else "") if namespaced_path else (parts[0] if parts else "")
    resource = BY_PLURAL.get(plural)
    path = short(request.url.path, 200)
    if resource is None:
        raise ApiError(404, f"no resource {short(plural)} at {path}; the resources are: {known_plurals()}")
    if namespaced_path and not resource.namespaced:
        raise ApiError(
            404, f"{resource.plural} are cluster-scoped: use {PREFIX}/{resource.plural}, without a namespace"
        )
    if not namespaced_path and resource.namespaced:
        raise ApiError(404, f"{resource.plural} are namespaced: use {PREFIX}/namespaces/NAMESPACE/{resource.plural}")
    depth = len(parts) - (3 if namespaced_path else 1)  # 0: the collection, 1: an object
    if depth > 1:
        served = SUBRESOURCES.get(resource.plural)
        have = (
            f"{resource.plural} have these subresources: {', '.join(served)}"
            if served
            else (f"{resource.plural} have no subresources")
        )
        raise ApiError(404, f"no route {path}; {have}")
    allowed = "GET or DELETE" if depth == 1 else "GET or POST"
    raise ApiError(405, f"{request.method} is not allowed on {path}; use {allowed}")


def add_error_handlers(app: FastAPI) -> None:
    """Every error as a Status; the framework's own (no route, a query parameter of the wrong type) too."""

    def api_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return JSONResponse(wire(exc.status), status_code=exc.code)

    def request_invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        problems = []
        for error in exc.errors():
            where = [str(part) for part in error.get("loc", ()) if part not in ("query", "path", "header", "body")]
            got = f", got {short(error['input'])}" if "input" in error else ""
            problems.append(f"{'.'.join(where) or 'the request'}: {error.get('msg', 'is invalid')}{got}")
        return JSONResponse(wire(ApiError(400, "; ".join(problems)).status), status_code=400)

    def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 404:
            message = f"no route {short(request.url.path, 200)}; the API is under {PREFIX} ({known_plurals()})"
        else:
            message = f"{request.method} {short(request.url.path, 200)}: {exc.detail}"
        return JSONResponse(wire(ApiError(exc.status_code, message).status), status_code=exc.status_code)

    def store_failed(_: Request, exc: Exception) -> JSONResponse:
        message = f"the state store cannot be used for now ({exc}); try again"
        return JSONResponse(wire(ApiError(503, message).status), status_code=503)

    def unexpected(_: Request, exc: Exception) -> JSONResponse:
        message = f"the server failed ({type(exc).__name__}); its log has the details"
        return JSONResponse(wire(ApiError(500, message).status), status_code=500)

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, request_invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(StoreError, store_failed)
    app.add_exception_handler(Exception, unexpected)
