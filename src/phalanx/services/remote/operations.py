"""``HttpBackend``: the backend port (``services.port.OperationsBackend``) over a Phalanx server's REST API.

The CLI's verbs and the SDK run the one ``Operations`` over it, as over a state directory or a cluster: reads are
``GET``s (lists page through ``continue``), writes are the API's ``POST``/``DELETE`` and a job's ``halt`` and
``resume``, events, replicas and logs its subresources (``entrypoints.server.subresources``). The server is the
door: it validates every object posted again, with its own backend's rules, and decides who may do what.

What the server answers becomes what the port promises (``port_error``):

- 404 -> ``NotFoundError`` (a read answers None);
- 409 -> ``AlreadyExistsError`` (reason ``AlreadyExists``) or ``ConflictError``, or the operation's refusal
  (``OperationError``) where the port has no conflict to report;
- 422 -> ``SpecError``, each cause at its field path, as a local submission prints it;
- 401/403 -> ``AccessError``: one sentence saying which token (where it came from) and what it may not do;
- no answer -> ``OperationError`` naming the URL.

Not served over the API yet, each refused with a sentence: reading or evicting node caches.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any, NoReturn

from phalanx.adapters.kubernetes.crds import KINDS
from phalanx.adapters.rest.client import RestClient, RestError, UnreachableError
from phalanx.model.base import in_phases
from phalanx.model.errors import FieldError, SpecError
from phalanx.model.events import Event
from phalanx.model.jobs import TrainingJob
from phalanx.model.replicas import Replica
from phalanx.services.dataset_views import CacheEntryView, NodeCacheView
from phalanx.services.operations import OperationError, Operations
from phalanx.services.port import (
    AlreadyExistsError,
    ConflictError,
    CursorError,
    JobCount,
    LabelSelector,
    ListPage,
    LogChunk,
    LogCursor,
    NotFoundError,
    Readable,
    Stored,
    WithStatus,
    count_jobs_of,
    page_in_memory,
    selector_text,
)

#: Each kind's plural and scope, as the server's paths name them (the CRDs' table, as ``entrypoints.server.kinds``).
PLURALS = {kind.model.__name__: kind.plural for kind in KINDS} | {"Node": "nodes"}
NAMESPACED = frozenset(kind.model.__name__ for kind in KINDS if kind.scope == "Namespaced")
#: How long ``remove_finished`` waits for a finished job's name to be free (the server stops nothing: it is done).
REMOVE_WAIT_SECONDS = 30.0
REMOVE_POLL_SECONDS = 0.2


class AccessError(OperationError):
    """The server refused the caller's token (401) or what it asked (403); the message says which token and what."""


class HttpBackend:
    """The port over one server's REST API, as the caller's token allows."""

    job_noun = "job"
    namespaced_kinds = NAMESPACED
    # The server's door applies its backend's refusals to every posted object; here nothing more is refused, so
    # a spec is refused once, by the server, at its field paths.
    pod_field_refusals: Mapping[str, str] = {}
    cluster_scheduling = True
    own_scheduler: str | None = "phalanx-scheduler"
    runs_images = False
    algorithms_here = False

    def __init__(self, rest: RestClient, *, token_source: str) -> None:
        """Talk to the server ``rest`` reaches.

        Args:
            rest: the REST client (its URL and token).
            token_source: where the token came from (``--token-file F``, ``PHALANX_TOKEN``, the config file, or
                none), for the sentence when the server refuses it.
        """
        self.rest = rest
        self.token_source = token_source

    # -- the read side ---------------------------------------------------------------------------------------

    def get(self, kind: type[Readable], namespace: str, name: str) -> Readable | None:
        """One object, or None when the server has none (or the caller may not know of it: 403 raises)."""
        try:
            body = self._call("GET", _item_path(kind.__name__, namespace, name))
        except NotFoundError:
            return None
        return kind.model_validate(body)

    def list(
        self,
        kind: type[Readable],
        namespace: str | None = None,
        *,
        labels: LabelSelector | None = None,
        phases: Collection[str] | None = None,
    ) -> builtins.list[Readable]:
        """The objects, every page of them (the server selects by ``labels``; ``phases`` are chosen here)."""
        params: dict[str, str] = {"labelSelector": selector_text(labels)} if labels else {}
        found: builtins.list[Readable] = []
        while True:
            body = self._call("GET", _collection_path(kind.__name__, namespace), params=params)
            found += [kind.model_validate(item) for item in body.get("items") or []]
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return in_phases(found, phases)
            params = {**params, "continue": str(token)}

    def count_jobs(self) -> dict[JobCount, int]:
        """The jobs this token may list, read and counted."""
        return count_jobs_of(self.list(TrainingJob))

    def list_page(
        self,
        kind: type[Readable],
        namespaces: Collection[str] | None = None,
        *,
        labels: LabelSelector | None = None,
        limit: int = 0,
        cursor: str | None = None,
    ) -> ListPage[Readable]:
        """A page the server pages (``limit``/``continue``; the cursor is its token), or several namespaces' here.

        For one namespace or all, the server pages; for several, their objects are read whole and paged here.
        """
        if namespaces is not None and len(namespaces) != 1 and kind.__name__ in NAMESPACED:
            objects = [obj for namespace in sorted(namespaces) for obj in self.list(kind, namespace, labels=labels)]
            return page_in_memory(objects, limit=limit, cursor=cursor)
        namespace = next(iter(namespaces)) if namespaces else None
        params: dict[str, str] = {"labelSelector": selector_text(labels)} if labels else {}
        if limit > 0:
            params["limit"] = str(limit)
        if cursor is not None:
            params["continue"] = cursor
        try:
            body = self._call("GET", _collection_path(kind.__name__, namespace), params=params)
        except OperationError as err:
            if cursor is not None and "continue" in str(err):
                raise CursorError(str(err)) from None
            raise
        metadata = body.get("metadata") or {}
        remaining = metadata.get("remainingItemCount")
        return ListPage(
            [kind.model_validate(item) for item in body.get("items") or []],
            str(metadata["continue"]) if metadata.get("continue") else None,
            int(remaining) if remaining is not None else (0 if not metadata.get("continue") else None),
        )

    def replicas_of(self, job: TrainingJob) -> builtins.list[Replica]:
        """The job's replicas (``GET .../replicas``)."""
        body = self._call("GET", _job_path(job) + "/replicas")
        return [Replica.model_validate(item) for item in body.get("items") or []]

    def events_of(self, obj: WithStatus) -> builtins.list[Event]:
        """A job's events (``GET .../events``); other kinds have no events route yet (none)."""
        if not isinstance(obj, TrainingJob):
            return []
        body = self._call("GET", _job_path(obj) + "/events")
        return [Event.model_validate(item) for item in body.get("items") or []]

    def read_log(self, job: TrainingJob, replica: str, cursor: LogCursor | None = None) -> LogChunk | None:
        """The replica's log past ``cursor`` (an offset in characters of the text the server sends), in lines."""
        text = self.log_text(job.metadata.namespace, job.metadata.name, replica)
        source = f"{job.metadata.uid}/{replica}"
        if not text and cursor is None:
            return None
        start = cursor.offset if cursor is not None and cursor.source == source and cursor.offset <= len(text) else 0
        end = text.rfind("\n", start) + 1 or start
        return LogChunk(text[start:end], LogCursor(source, end), text[end:])

    def log_text(self, namespace: str, name: str, replica: str) -> str:
        """The replica's log as the server has it now (``GET .../log``)."""
        try:
            return self.rest.request(
                "GET", f"/namespaces/{namespace}/trainingjobs/{name}/log", params={"replica": replica}
            ).text
        except (RestError, UnreachableError) as err:
            self._raise(err)

    def follow_log(self, namespace: str, name: str, replica: str) -> Iterator[str]:
        """The replica's log as it is written, until the job stops (``GET .../log?follow=true``)."""
        params = {"replica": replica, "follow": "true"}
        try:
            yield from self.rest.stream_text(f"/namespaces/{namespace}/trainingjobs/{name}/log", params=params)
        except (RestError, UnreachableError) as err:
            self._raise(err)

    def explain(self, namespace: str, name: str) -> str:
        """The server's one sentence about the job (``GET .../explain``)."""
        return str(self._call("GET", f"/namespaces/{namespace}/trainingjobs/{name}/explain").get("message", ""))

    # -- the write side ----------------------------------------------------------------------------------------

    def create(self, obj: Stored) -> dict[str, Any]:
        """``POST`` the object to its collection; the server validates it again. The server's answer."""
        kind = type(obj).__name__
        document = obj.to_dict()
        document.pop("status", None)
        if kind not in NAMESPACED:
            document.get("metadata", {}).pop("namespace", None)
        return self._call("POST", _collection_path(kind, obj.metadata.namespace), body=document)

    def replace(self, obj: Stored) -> None:
        """``PUT`` the object's spec, labels and annotations, on the resourceVersion read (``server.replacing``).

        Raises:
            ConflictError: it changed since ``obj`` was read.
            NotFoundError: it is gone.
        """
        kind = type(obj).__name__
        document = obj.to_dict()
        document.pop("status", None)
        if kind not in NAMESPACED:
            document.get("metadata", {}).pop("namespace", None)
        try:
            self.rest.json("PUT", _item_path(kind, obj.metadata.namespace, obj.metadata.name), body=document)
        except RestError as err:
            if err.code == 409 and err.reason == "Conflict":
                raise ConflictError(err.message) from None
            self._raise(err)
        except UnreachableError as err:
            self._raise(err)

    def delete(self, kind: type[Stored], namespace: str, name: str, *, uid: str | None = None) -> None:
        """``DELETE`` the object; the server runs its kind's deletion (a Sweep takes its trials with it)."""
        self._call("DELETE", _item_path(kind.__name__, namespace, name))

    def set_suspend(self, job: TrainingJob, suspend: bool) -> TrainingJob:
        """``POST .../halt`` or ``.../resume``; the job as the server wrote it."""
        body = self._call("POST", _job_path(job) + ("/halt" if suspend else "/resume"))
        return TrainingJob.model_validate(body)

    # -- the steps that differ between backends ------------------------------------------------------------------

    def delete_job(self, namespace: str, name: str) -> None:
        """``DELETE`` the job: the server stops its replicas its backend's way."""
        self._call("DELETE", _item_path("TrainingJob", namespace, name))

    def remove_finished(self, job: TrainingJob) -> None:
        """Delete a finished job and wait until its name is free.

        Raises:
            OperationError: it is still there after ``REMOVE_WAIT_SECONDS`` (its replicas are still finishing).
        """
        meta = job.metadata
        try:
            self.delete_job(meta.namespace, meta.name)
        except NotFoundError:
            return
        deadline = time.monotonic() + REMOVE_WAIT_SECONDS
        while (
            current := self.get(TrainingJob, meta.namespace, meta.name)
        ) is not None and current.metadata.uid == meta.uid:
            if time.monotonic() > deadline:
                raise OperationError(f"job {job.key} is finishing on the server; try again in a moment")
            time.sleep(REMOVE_POLL_SECONDS)

    def pending_explanation(self) -> str:
        """What the server's explain route says is asked there (``RemoteOperations.explain``); this is its fallback."""
        return "Pending: accepted by the server, waiting for its control plane to queue it."

    def cache_views(self, node: str | None) -> builtins.list[NodeCacheView]:
        """Not served to remote callers yet.

        Raises:
            OperationError: always.
        """
        raise OperationError("node caches are not served over the server's API yet; look at them on its machine")

    def evict_entries(
        self, targets: Sequence[tuple[NodeCacheView, CacheEntryView]]
    ) -> tuple[builtins.list[str], builtins.list[str]]:
        """Not served to remote callers yet.

        Raises:
            OperationError: always.
        """
        raise OperationError("evicting cache entries is not served over the server's API yet; evict on its machine")

    # -- what the methods share ------------------------------------------------------------------------------------

    def _call(
        self, method: str, path: str, *, params: Mapping[str, str] | None = None, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        try:
            return self.rest.json(method, path, params=params, body=body)
        except (RestError, UnreachableError) as err:
            self._raise(err)

    def _raise(self, err: RestError | UnreachableError) -> NoReturn:
        raise port_error(err, server=self.rest.server, token_source=self.token_source) from None


def port_error(err: RestError | UnreachableError, *, server: str, token_source: str) -> Exception:
    """What a server's refusal (or its silence) is to the port's callers; see the module."""
    if isinstance(err, UnreachableError):
        return OperationError(f"{err}; check --server (or PHALANX_SERVER) and that `phalanx server` runs there")
    if err.code == 404:
        return NotFoundError(err.message)
    if err.code == 409:
        if err.reason == "AlreadyExists":
            return AlreadyExistsError(err.message)
        return OperationError(err.message)
    if err.code == 422:
        causes = err.causes or [("", err.message)]
        return SpecError([FieldError(path, message) for path, message in causes])
    if err.code == 401:
        return AccessError(
            f"the server at {server} does not accept {token_source}: it is unknown, expired or revoked "
            f"({err.message}); ask the server's owner for a token (`phalanx token create`)"
        )
    if err.code == 403:  # "forbidden" is the word a caller that can do without (a cluster-wide list) looks for
        return AccessError(f"the server at {server} refused {token_source} (forbidden): {err.message}")
    return OperationError(f"the server at {server} answered {err.code}: {err.message}")


class RemoteOperations(Operations):
    """The user's operations over a server; the one sentence of ``explain`` is the server's."""

    backend: HttpBackend

    def __init__(self, backend: HttpBackend) -> None:
        super().__init__(backend)

    def explain(self, namespace: str, name: str) -> str:
        """The server's sentence: only it knows whether its control plane runs.

        Raises:
            OperationError: no such job.
        """
        try:
            return self.backend.explain(namespace, name)
        except NotFoundError:
            raise self.no_job(namespace, name) from None


def _collection_path(kind: str, namespace: str | None) -> str:
    plural = PLURALS[kind]
    return f"/namespaces/{namespace}/{plural}" if kind in NAMESPACED and namespace is not None else f"/{plural}"


def _item_path(kind: str, namespace: str, name: str) -> str:
    plural = PLURALS[kind]
    return f"/namespaces/{namespace}/{plural}/{name}" if kind in NAMESPACED else f"/{plural}/{name}"


def _job_path(job: TrainingJob) -> str:
    return _item_path("TrainingJob", job.metadata.namespace, job.metadata.name)
