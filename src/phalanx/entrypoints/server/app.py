"""The FastAPI application: Kubernetes-shaped routes over ``services.operations``, for any backend.

``create_app(backend)`` serves, for each kind of ``kinds.RESOURCES`` (paths under ``/apis/phalanx.dev/v1alpha1``):

- namespaced kinds: ``GET|POST namespaces/{namespace}/{plural}`` (list, create), ``GET|DELETE
  namespaces/{namespace}/{plural}/{name}``, and ``GET {plural}`` (every namespace);
- cluster-scoped kinds (JobType, Queue): ``GET|POST {plural}``, ``GET|DELETE {plural}/{name}``.

Routes only translate: a create is ``Operations.submit`` of the one posted document (the validation door every
write goes through), a delete is the operation of its kind (a job's replicas are stopped, a Sweep takes its
trials with it, a Dataset that unfinished jobs read is refused): 200 when the object is gone, 202 while it is
still being deleted (the embedded runtime stops a job's replicas before it removes the job). Lists take
``labelSelector``, ``fieldSelector``, ``limit`` and ``continue`` (``selectors``, ``fields``, ``paging``), and
``watch=true`` (``watch``: the list's changes as server-sent events). Every refusal is a ``Status``
(``statuses``): 400 a bad query or path, 404 no such object or resource (naming those there are), 409 the name
is taken or the operation is refused, 422 a spec the door refused (each problem at its field path; nothing is
stored).

A posted object has no directory of the caller's: on the embedded runtime its relative paths (a command, an
``outputs.storeTo``) start where the control plane runs, and a Pipeline's components must be inline.

``GET /metrics`` (Prometheus) and the timing of every request are added by ``metrics.add_metrics_routes``.

Routes are plain functions run in the server's thread pool: the port is synchronous (SQLite, the API server's
client), and a slow call holds one worker, not the event loop. The request body is read on the loop, then
parsed and submitted in the pool, or in threads of the creates' own (``create_threads``: one over a local store,
whose writes take one lock anyway).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, create_model
from starlette.concurrency import run_in_threadpool

from phalanx.entrypoints.server.access import Access, Authorize, Scope, bearer_token
from phalanx.entrypoints.server.dashboard import add_dashboard_routes
from phalanx.entrypoints.server.encoding import list_response, object_json, object_response
from phalanx.entrypoints.server.fallbacks import add_error_handlers, no_route
from phalanx.entrypoints.server.fields import fields_match, parse_field_selector
from phalanx.entrypoints.server.history import HistoryReader, add_history_routes
from phalanx.entrypoints.server.kinds import PREFIX, RESOURCES, Resource
from phalanx.entrypoints.server.metrics import add_metrics_routes
from phalanx.entrypoints.server.paging import PagingError, page_of, page_of_listed
from phalanx.entrypoints.server.replacing import add_replace_routes
from phalanx.entrypoints.server.selectors import SelectorError, parse_label_selector
from phalanx.entrypoints.server.statuses import ApiError, Status, invalid
from phalanx.entrypoints.server.subresources import add_subresource_routes
from phalanx.entrypoints.server.views import add_view_routes
from phalanx.entrypoints.server.watch import add_watch_routes
from phalanx.model.base import API_VERSION
from phalanx.model.errors import FieldError, SpecError, short
from phalanx.model.kfp_ir import is_kfp_ir
from phalanx.model.names import check_dns_label
from phalanx.model.textfiles import MAX_FILE_BYTES
from phalanx.services.operations import JobExistsError, OperationError, Operations, not_found_message
from phalanx.services.port import LabelSelector, NotFoundError, ServedBackend, Stored

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

#: What a refusal's ``responses`` entry says in the OpenAPI document, by code.
_REFUSALS: dict[int | str, dict[str, Any]] = {
    code: {"model": Status, "description": text}
    for code, text in (
        (400, "A bad query parameter or path segment (named)."),
        (401, "Not authenticated (when the server authorizes requests)."),
        (403, "Not allowed (when the server authorizes requests)."),
        (404, "No such object or resource."),
    )
}


#: How many other objects a 404 names (``not_found_message`` names as many).
_NAMED_OTHERS = 20

Selector = Annotated[
    str, Query(alias="labelSelector", description="key=value or key (has the label), comma-separated, e.g. team=ml")
]
Fields = Annotated[
    str,
    Query(
        alias="fieldSelector",
        description="metadata.name, metadata.namespace, status.phase or spec.scheduling.queue with =, == or !=, "
        "comma-separated, e.g. status.phase=Running",
    ),
]
Limit = Annotated[int, Query(ge=0, description="At most this many objects (0: all).")]
Token = Annotated[str, Query(alias="continue", description="The metadata.continue of the previous page.")]


class ListMeta(BaseModel):
    """A list's metadata: where the next page starts, and how many objects follow this page."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    continue_: str | None = Field(default=None, alias="continue")
    remaining_item_count: int | None = Field(default=None, alias="remainingItemCount")


def _list_model(resource: Resource) -> type[BaseModel]:
    """``TrainingJobList`` and the like, for the OpenAPI document."""
    return create_model(
        f"{resource.kind}List",
        __doc__=f"A page of {resource.plural}, in namespace and name order.",
        apiVersion=(str, API_VERSION),
        kind=(str, f"{resource.kind}List"),
        metadata=(ListMeta, ...),
        items=(list[resource.model], ...),  # type: ignore[name-defined]  # a model class known at run time
    )


def create_app(
    backend: ServedBackend,
    *,
    authorize: Authorize | None = None,
    registry: CollectorRegistry | None = None,
    history: HistoryReader | None = None,
    create_threads: int | None = None,
) -> FastAPI:
    """The REST API over ``backend``; ``authorize`` decides each request (None: every request is served).

    Args:
        backend: the port the operations run over (a state directory's store, a cluster).
        authorize: called with what each request asks before the backend is touched (``access``).
        registry: the metrics ``/metrics`` serves besides the state's and the API's (the control plane's
            scheduler counts, with ``phalanx up --listen``); None: only those (``metrics``).
        history: the job history the history routes read (None: they say the server keeps none).
        create_threads: how many threads of their own run the creates (POSTs); None: the server's shared thread
            pool, for a backend whose calls wait on a network (a cluster's API server). A local SQLite store
            wants 1: its writes take the file's one write lock anyway, and a POST's validation holds the GIL, so
            the pool's dozens of threads only took the GIL from each other (futex waits and context switches:
            half of a POST's CPU under 200 concurrent clients).
    """
    app = FastAPI(
        title="Phalanx API",
        version=API_VERSION,
        description="TrainingJobs, JobTypes, Queues, Datasets, Sweeps, Pipelines and PipelineRuns, Kubernetes-shaped.",
        separate_input_output_schemas=False,  # one schema per kind: the body posted is the object read back
        # FastAPI's /docs and /redoc pages load their scripts from a CDN at run time: not on a machine offline.
        docs_url=None,
        redoc_url=None,
    )
    routes = _Routes(Operations(backend), authorize, create_threads=create_threads)
    for resource in RESOURCES:
        routes.add(app, resource)
    add_view_routes(app, routes.ops, authorize)
    add_metrics_routes(app, backend, authorize, registry)
    add_subresource_routes(app, routes.ops, authorize)
    add_replace_routes(app, routes.ops, authorize)
    add_history_routes(app, history, authorize)
    add_error_handlers(app)
    add_dashboard_routes(app)
    add_watch_routes(app, backend, authorize)
    # Last, so it only sees what no route matched: an unknown plural, or a kind at the wrong scope.
    app.add_api_route(
        PREFIX + "/{rest:path}",
        no_route,
        methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
        include_in_schema=False,
    )
    return app


class _Routes:
    """The handlers of every kind, over one ``Operations``."""

    def __init__(self, ops: Operations, authorize: Authorize | None, *, create_threads: int | None = None) -> None:
        self.ops = ops
        self.authorize = authorize
        # Started on the first create; its idle threads end when the app is collected (ThreadPoolExecutor's own).
        self._creating = (
            ThreadPoolExecutor(create_threads, thread_name_prefix="rest-create") if create_threads is not None else None
        )

    async def _in_create_thread(self, resource: Resource, namespace: str | None, raw: bytes) -> bytes:
        """``_create`` in a create thread (or the shared pool), with the request's context variables, as anyio's."""
        if self._creating is None:
            return await run_in_threadpool(self._create, resource, namespace, raw)
        call = functools.partial(contextvars.copy_context().run, self._create, resource, namespace, raw)
        return await asyncio.get_running_loop().run_in_executor(self._creating, call)

    def add(self, app: FastAPI, resource: Resource) -> None:
        """Register the routes of one kind."""
        collection = (
            f"{PREFIX}/namespaces/{{namespace}}/{resource.plural}"
            if resource.namespaced
            else (f"{PREFIX}/{resource.plural}")
        )
        item = collection + "/{name}"
        tag = resource.kind
        body = {
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{resource.kind}"}}},
            }
        }
        app.add_api_route(
            collection,
            self._lister(resource),
            methods=["GET"],
            tags=[tag],
            summary=f"List {resource.plural}",
            response_model=_list_model(resource),
            responses=_REFUSALS,
            operation_id=f"list{resource.kind}",
        )
        app.add_api_route(
            collection,
            self._creator(resource),
            methods=["POST"],
            tags=[tag],
            summary=f"Create a {resource.kind}",
            status_code=201,
            responses={
                201: {"model": resource.model, "description": "Created."},
                **_REFUSALS,
                409: {"model": Status, "description": "The name is taken."},
                422: {"model": Status, "description": "The spec is invalid (each problem at its field path)."},
            },
            openapi_extra=body,
            operation_id=f"create{resource.kind}",
        )
        app.add_api_route(
            item,
            self._getter(resource),
            methods=["GET"],
            tags=[tag],
            summary=f"Read a {resource.kind}",
            responses={200: {"model": resource.model, "description": "The object."}, **_REFUSALS},
            operation_id=f"read{resource.kind}",
        )
        app.add_api_route(
            item,
            self._deleter(resource),
            methods=["DELETE"],
            tags=[tag],
            summary=f"Delete a {resource.kind}",
            responses={
                200: {"model": resource.model, "description": "Deleted: the object as it was."},
                202: {"model": resource.model, "description": "Being deleted (its replicas stop first): as it is now."},
                **_REFUSALS,
                409: {"model": Status, "description": "Refused (e.g. objects still use it)."},
            },
            operation_id=f"delete{resource.kind}",
        )
        if resource.namespaced:
            app.add_api_route(
                f"{PREFIX}/{resource.plural}",
                self._lister(resource, every_namespace=True),
                methods=["GET"],
                tags=[tag],
                summary=f"List {resource.plural} of every namespace",
                response_model=_list_model(resource),
                responses=_REFUSALS,
                operation_id=f"list{resource.kind}ForAllNamespaces",
            )

    # -- the handlers: thin closures per kind, so the OpenAPI document names each kind's paths -------------------

    def _lister(self, resource: Resource, *, every_namespace: bool = False) -> Callable[..., Response]:
        if resource.namespaced and not every_namespace:

            def list_namespaced(  # nosec B107  # an empty default, not a secret
                request: Request,
                namespace: str,
                label_selector: Selector = "",
                field_selector: Fields = "",
                limit: Limit = 0,
                token: Token = "",
            ) -> Response:
                return self._list(request, resource, namespace, (label_selector, field_selector), limit, token)

            return list_namespaced

        def list_cluster_wide(  # nosec B107  # an empty default, not a secret
            request: Request,
            label_selector: Selector = "",
            field_selector: Fields = "",
            limit: Limit = 0,
            token: Token = "",
        ) -> Response:
            return self._list(request, resource, None, (label_selector, field_selector), limit, token)

        return list_cluster_wide

    def _getter(self, resource: Resource) -> Callable[..., Response]:
        if resource.namespaced:

            def get_namespaced(request: Request, namespace: str, name: str) -> Response:
                return object_response(self._existing(request, "get", resource, namespace, name))

            return get_namespaced

        def get_cluster_scoped(request: Request, name: str) -> Response:
            return object_response(self._existing(request, "get", resource, None, name))

        return get_cluster_scoped

    def _deleter(self, resource: Resource) -> Callable[..., Response]:
        if resource.namespaced:

            def delete_namespaced(request: Request, namespace: str, name: str) -> Response:
                return self._delete(request, resource, namespace, name)

            return delete_namespaced

        def delete_cluster_scoped(request: Request, name: str) -> Response:
            return self._delete(request, resource, None, name)

        return delete_cluster_scoped

    def _creator(self, resource: Resource) -> Callable[..., Any]:
        async def create(request: Request, namespace: str | None) -> Response:
            if namespace is not None:
                _check_segment(namespace, "namespace")
            self._authorize(request, "create", resource, namespace, None)
            raw = await request.body()
            created = await self._in_create_thread(resource, namespace, raw)
            return Response(created, status_code=201, media_type="application/json")

        if resource.namespaced:

            async def create_namespaced(request: Request, namespace: str) -> Response:
                return await create(request, namespace)

            return create_namespaced

        async def create_cluster_scoped(request: Request) -> Response:
            return await create(request, None)

        return create_cluster_scoped

    def _list(
        self,
        request: Request,
        resource: Resource,
        namespace: str | None,
        selector_texts: tuple[str, str],
        limit: int,
        token: str,
    ) -> Response:
        if namespace is not None:
            _check_segment(namespace, "namespace")
        scope = self._authorize(request, "list", resource, namespace, None)
        try:
            selector = parse_label_selector(selector_texts[0])
            fields = parse_field_selector(selector_texts[1])
        except SelectorError as err:
            raise ApiError(400, str(err)) from None
        namespaces = scope.namespaces if scope is not None else None if namespace is None else {namespace}
        try:
            if fields:
                listed = self._list_all(resource, namespaces, selector)
                matching = [obj for obj in listed if fields_match(fields, obj.to_dict())]
                page = page_of_listed(matching, limit=limit, token=token or None)
            else:
                page = page_of(
                    self.ops.backend, resource.model, namespaces, labels=selector, limit=limit, token=token or None
                )
        except PagingError as err:
            raise ApiError(400, str(err)) from None
        metadata: dict[str, Any] = {}
        if page.next_token is not None:
            metadata = {"continue": page.next_token}
            if page.remaining is not None:
                metadata["remainingItemCount"] = page.remaining
        return list_response(resource.kind, metadata, page.items)

    def _list_all(
        self, resource: Resource, namespaces: frozenset[str] | set[str] | None, selector: LabelSelector | None
    ) -> list[Stored]:
        """Every object of ``resource`` in ``namespaces`` (None: all) that ``selector`` selects."""
        backend, model = self.ops.backend, resource.model
        if namespaces is None:
            return backend.list(model, None, labels=selector)  # type: ignore[type-var]  # Stored kinds are Readable
        found: list[Stored] = []
        for name in sorted(namespaces):
            found += backend.list(model, name, labels=selector)  # type: ignore[type-var]  # Stored kinds are Readable
        return found

    def _delete(self, request: Request, resource: Resource, namespace: str | None, name: str) -> Response:
        obj = self._existing(request, "delete", resource, namespace, name)
        try:
            self._delete_object(resource, obj)
        except NotFoundError:
            raise self._not_found(resource, namespace, name) from None
        except OperationError as err:
            raise ApiError(409, str(err), kind=resource.kind, name=name) from None
        # A job whose replicas are still stopping is deleted gracefully: 202 and the object as it is now (its
        # deletionTimestamp set), as the Kubernetes API answers a deletion still under way.
        still = resource.find(self.ops.backend, namespace, name)
        if still is not None and still.metadata.uid == obj.metadata.uid:
            return object_response(still, status_code=202)
        return object_response(obj)

    # -- what the handlers share ------------------------------------------------------------------------------

    def _authorize(
        self, request: Request, verb: str, resource: Resource, namespace: str | None, name: str | None
    ) -> Scope | None:
        """Raise the refusal, if any; the namespaces a list of every namespace is narrowed to (None: not)."""
        if self.authorize is None:
            return None
        token = bearer_token(request.headers.get("authorization"))
        answer = self.authorize(Access(verb, resource.kind, namespace, name, token))
        if isinstance(answer, Scope):
            return answer
        if answer is not None:
            raise ApiError(answer.code, answer.message, kind=resource.kind, name=name)
        return None

    def _existing(self, request: Request, verb: str, resource: Resource, namespace: str | None, name: str) -> Stored:
        if namespace is not None:
            _check_segment(namespace, "namespace")
        _check_segment(name, "name")
        self._authorize(request, verb, resource, namespace, name)
        try:
            found = resource.find(self.ops.backend, namespace, name)
        except OperationError as err:  # stored but unreadable (quarantined), or the backend failed
            raise ApiError(409, str(err), kind=resource.kind, name=name) from None
        if found is None:
            raise self._not_found(resource, namespace, name)
        return found

    def _not_found(self, resource: Resource, namespace: str | None, name: str) -> ApiError:
        if namespace is not None:
            # The message names the first 20: a page of them, not a parse of a namespace of 10,000 jobs per 404.
            page = self.ops.backend.list_page(resource.model, [namespace], limit=_NAMED_OTHERS)  # type: ignore[type-var]  # Stored kinds are Readable
            others: list[Stored] = list(page.items)
        else:  # cluster-scoped kinds are few
            others = sorted(
                self.ops.backend.list(resource.model, namespace),  # type: ignore[type-var]  # Stored kinds are Readable
                key=lambda o: o.metadata.name,
            )
        noun = resource.kind.lower()
        if namespace is None:
            names = ", ".join(o.metadata.name for o in others[:_NAMED_OTHERS])
            message = f"{noun} {name} not found; " + (
                f"{resource.plural}: {names}" if names else f"there are no {resource.plural}"
            )
        else:
            message = not_found_message(noun, namespace, name, others)
        return ApiError(404, message, kind=resource.kind, name=name)

    def _delete_object(self, resource: Resource, obj: Stored) -> None:
        ops, meta = self.ops, obj.metadata
        deletions: dict[str, Callable[[], object]] = {
            "TrainingJob": lambda: ops.delete_job(meta.namespace, meta.name),
            "Queue": lambda: ops.delete_queue(meta.name),
            "Dataset": lambda: ops.delete_dataset(meta.namespace, meta.name),
            "Sweep": lambda: ops.delete_sweep(meta.namespace, meta.name),
            "Pipeline": lambda: ops.delete_pipeline(meta.namespace, meta.name),
            "PipelineRun": lambda: ops.delete_pipelinerun(meta.namespace, meta.name),
        }
        delete = deletions.get(resource.kind)
        if delete is not None:
            delete()
        else:  # a JobType: nothing else goes with it (jobs keep the spec they were admitted with)
            ops.backend.delete(resource.model, meta.namespace, meta.name, uid=meta.uid)

    def _create(self, resource: Resource, namespace: str | None, raw: bytes) -> bytes:
        """The created object's JSON: as the backend's create returned it, or read back where it returned none."""
        document = _document(raw)
        name = _check_document(document, resource, namespace)
        try:
            # Validated first on its own to see what it makes: a document may become another kind than it says
            # (a compiled KFP pipeline has no kind and becomes a Pipeline), and a POST makes one object of its path.
            parsed = self.ops.validate([document], namespace=namespace)
        except SpecError as err:
            raise invalid(err.errors, kind=resource.kind, name=name) from None
        made = [type(obj).__name__ for obj in parsed]
        if made != [resource.kind]:
            problem = FieldError(
                "kind", f"the document makes {', '.join(made) or 'nothing'}; this path takes one {resource.kind}"
            )
            raise invalid([problem], kind=resource.kind, name=name)
        name = parsed[0].metadata.name
        if resource.find(self.ops.backend, namespace, name) is not None:
            raise _exists(resource, namespace, name)
        try:
            # The objects validated above: the door's whole cost once per POST, not twice.
            (submitted,) = self.ops.submit_validated(parsed)
        except SpecError as err:
            raise invalid(err.errors, kind=resource.kind, name=name) from None
        except JobExistsError as err:
            raise ApiError(409, str(err), reason="AlreadyExists", kind=resource.kind, name=name) from None
        except OperationError as err:
            raise ApiError(409, str(err), kind=resource.kind, name=name) from None
        if submitted.stored is not None and resource.kind != "Dataset":  # a Dataset's answer masks its URLs
            return json.dumps(submitted.stored, separators=(",", ":"), ensure_ascii=False).encode()
        created = resource.find(self.ops.backend, namespace, name)
        if created is None:  # deleted between the write and this read
            raise self._not_found(resource, namespace, name)
        return object_json(created)


def _check_segment(value: str, what: str) -> None:
    """Refuse a path segment that no object's namespace or name can be (400, naming it)."""
    try:
        check_dns_label(value, what)
    except ValueError as err:
        raise ApiError(400, f"the path's {what}: {err}") from None


def _document(raw: bytes) -> dict[str, Any]:
    """The posted object; 413 past the size of a spec file, 400 when it is not one JSON object."""
    if len(raw) > MAX_FILE_BYTES:
        raise ApiError(413, f"the body is {len(raw)} bytes, past the {MAX_FILE_BYTES} a spec may have; send less")
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as err:
        detail = str(err) if isinstance(err, json.JSONDecodeError) else "nested too deeply"
        raise ApiError(400, f"the body is not JSON ({detail}); send one object as JSON") from None
    if not isinstance(document, dict):
        raise ApiError(400, f"the body is a JSON {type(document).__name__}, not an object; send one object")
    return document


def _check_document(document: dict[str, Any], resource: Resource, namespace: str | None) -> str | None:
    """The posted object's name, once its kind and namespace agree with the path (422 naming the field if not)."""
    problems: list[FieldError] = []
    if is_kfp_ir(document):  # a compiled KFP pipeline: no kind, no metadata; it becomes a Pipeline at the door
        if resource.kind == "Pipeline":
            return None
        where = f"{PREFIX}/namespaces/NAMESPACE/pipelines"
        problem = FieldError("kind", f"a compiled KFP pipeline becomes a Pipeline; post it to {where}")
        raise invalid([problem], kind=resource.kind, name=None)
    kind = document.setdefault("kind", resource.kind)
    if isinstance(kind, str) and kind in resource.converts:  # a Katib Experiment: the door makes it a Sweep
        kind = resource.kind
    elif kind != resource.kind:
        problems.append(
            FieldError("kind", f"is {short(kind)}, and this path takes {resource.kind}s; post it to its own path")
        )
    document.setdefault("apiVersion", API_VERSION)
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    given = metadata.get("namespace") if isinstance(metadata, dict) else None
    if given is not None and namespace is not None and given != namespace:
        problems.append(
            FieldError(
                "metadata.namespace",
                f"is {short(given)}, and the path's namespace is {namespace}; leave it out or make them agree",
            )
        )
    if given is not None and not resource.namespaced:
        problems.append(
            FieldError("metadata.namespace", f"a {resource.kind} is cluster-scoped: leave metadata.namespace out")
        )
    if problems:
        raise invalid(problems, kind=resource.kind, name=name if isinstance(name, str) else None)
    return name if isinstance(name, str) else None


def _exists(resource: Resource, namespace: str | None, name: str) -> ApiError:
    where = f"{namespace}/{name}" if namespace else name
    return ApiError(
        409,
        f"{resource.kind.lower()} {where} already exists; delete it first or choose another metadata.name",
        reason="AlreadyExists",
        kind=resource.kind,
        name=name,
    )
