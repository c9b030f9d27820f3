"""A small, dict-level client for the Kubernetes API: what the operator, scheduler, node agent and CLI need.

Connection, authentication and TLS come from lightkube (kubeconfig files, contexts, exec plugins, in-cluster
service accounts); the requests themselves are plain JSON dicts over its httpx client. Phalanx renders its
manifests as dicts (``rendering.py``) and reads its own kinds into pydantic models (``objects.py``), so a
typed object layer in between would only add a conversion; and the scheduler's bind loop is hot.

Two things keep the operator's and the scheduler's hot paths cheap (measured: about a third of their CPU under
a burst of jobs): every thread gets its own small connection pool, because httpx's shared pool scans all of
its connections (a ``poll`` on each idle one) under one lock whenever a request starts or ends; and JSON goes
through orjson, several times faster than the standard library on the watch streams' Pod and job objects.

Errors are ``KubeApiError`` with the HTTP status and the API's reason; ``NotFoundError`` (404),
``ConflictError`` (409: a stale resourceVersion *or* an object that already exists — ``already_exists`` tells
which) and ``GoneError`` (410: a watch's resourceVersion is too old, list again) are the ones callers branch on.
"""

from __future__ import annotations

import builtins
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.kubeconfig import KubeConfig
from lightkube.core.exceptions import ConfigError

from phalanx.model.base import API_GROUP

PHALANX_VERSION = "v1alpha1"
_THROTTLE_RETRIES = 5
# One thread's pool: its requests go one at a time, but a watch holds its connection open while the watch's
# callbacks may make requests of their own. Connections kept alive spare the next request a TLS handshake, which
# costs the API server more than the request itself.
POOL_LIMITS = httpx.Limits(max_connections=8, max_keepalive_connections=4, keepalive_expiry=30.0)


@dataclass(frozen=True, slots=True)
class Resource:
    """A kind the client talks to: where it lives in the API."""

    kind: str
    plural: str
    group: str = ""
    version: str = "v1"
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``v1`` or ``group/version``, as in an object's ``apiVersion``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The URL path; ``namespace`` None on a namespaced kind means every namespace (lists and watches)."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [root]
        if self.namespaced and namespace is not None:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
            if subresource:
                parts.append(subresource)
        return "/".join(parts)


PODS = Resource("Pod", "pods")
NODES = Resource("Node", "nodes", namespaced=False)
SERVICES = Resource("Service", "services")
CONFIGMAPS = Resource("ConfigMap", "configmaps")
SECRETS = Resource("Secret", "secrets")
PERSISTENTVOLUMECLAIMS = Resource("PersistentVolumeClaim", "persistentvolumeclaims")
EVENTS = Resource("Event", "events")
NAMESPACES = Resource("Namespace", "namespaces", namespaced=False)
LEASES = Resource("Lease", "leases", group="coordination.k8s.io")
TRAININGJOBS = Resource("TrainingJob", "trainingjobs", group=API_GROUP, version=PHALANX_VERSION)
JOBTYPES = Resource("JobType", "jobtypes", group=API_GROUP, version=PHALANX_VERSION, namespaced=False)
QUEUES = Resource("Queue", "queues", group=API_GROUP, version=PHALANX_VERSION, namespaced=False)
DATASETS = Resource("Dataset", "datasets", group=API_GROUP, version=PHALANX_VERSION)
SWEEPS = Resource("Sweep", "sweeps", group=API_GROUP, version=PHALANX_VERSION)
PIPELINES = Resource("Pipeline", "pipelines", group=API_GROUP, version=PHALANX_VERSION)
PIPELINERUNS = Resource("PipelineRun", "pipelineruns", group=API_GROUP, version=PHALANX_VERSION)
#: kube-scheduler's alpha gang scheduling (Kubernetes 1.36: feature gates GenericWorkload and GangScheduling, the
#: API version served with ``--runtime-config=scheduling.k8s.io/v1alpha2=true``); docs/kubernetes.md.
PODGROUPS = Resource("PodGroup", "podgroups", group="scheduling.k8s.io", version="v1alpha2")
#: Dynamic Resource Allocation (GA in the pinned Kubernetes): GPUs as named devices (``adapters.kubernetes.dra``).
RESOURCESLICES = Resource("ResourceSlice", "resourceslices", group="resource.k8s.io", namespaced=False)
RESOURCECLAIMS = Resource("ResourceClaim", "resourceclaims", group="resource.k8s.io")
RESOURCECLAIMTEMPLATES = Resource("ResourceClaimTemplate", "resourceclaimtemplates", group="resource.k8s.io")
DEVICECLASSES = Resource("DeviceClass", "deviceclasses", group="resource.k8s.io", namespaced=False)
CRDS = Resource("CustomResourceDefinition", "customresourcedefinitions", group="apiextensions.k8s.io", namespaced=False)


class KubeApiError(Exception):
    """The API server refused a request (or could not be reached: ``status`` 0)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"HTTP {status} {reason}: {message}" if status else message)
        self.status = status
        self.reason = reason
        self.message = message


class NotFoundError(KubeApiError):
    """404: the object (or its namespace, or its kind) does not exist."""


class ConflictError(KubeApiError):
    """409: a stale resourceVersion, or creating an object that already exists."""

    @property
    def already_exists(self) -> bool:
        """True when the object exists (a create), False for an update against a stale resourceVersion."""
        return self.reason == "AlreadyExists"


class GoneError(KubeApiError):
    """410: the resourceVersion a watch started from is too old; list again."""


class KubeConfigError(KubeApiError):
    """No usable kubeconfig or in-cluster service account."""


_ERRORS: dict[int, type[KubeApiError]] = {404: NotFoundError, 409: ConflictError, 410: GoneError}


def error_from(status: int, body: Any) -> KubeApiError:
    """The exception for a failed response (``body`` is its decoded ``Status`` object, if any)."""
    if isinstance(body, Mapping):
        reason = str(body.get("reason") or "")
        message = str(body.get("message") or body)
    else:
        reason, message = "", str(body)
    return _ERRORS.get(status, KubeApiError)(status, reason, message)


def load_kubeconfig(path: str | os.PathLike[str] | None = None, context: str | None = None) -> Any:
    """Select a kubeconfig context: ``path`` if given, else in-cluster, else ``$KUBECONFIG``, else ``~/.kube/config``.

    Raises:
        KubeConfigError: nothing usable was found, or ``context`` is not in the file.
    """
    try:
        config = KubeConfig.from_file(path) if path is not None else KubeConfig.from_env()
        selected = config.get(context_name=context)
    except (ConfigError, OSError) as error:
        where = str(path) if path is not None else os.environ.get("KUBECONFIG", "~/.kube/config")
        raise KubeConfigError(0, "NoConfig", f"cannot load a kubeconfig from {where}: {error}") from error
    if selected is None:
        raise KubeConfigError(0, "NoContext", f"the kubeconfig has no context {context!r}")
    return selected


class KubeApi:
    """JSON requests against one API server. Thread-safe: each thread talks through a client of its own."""

    def __init__(self, connect: Callable[[], httpx.Client]) -> None:
        self._connect = connect
        self._local = threading.local()
        # A thread's client goes when the thread does (its sockets close when it is collected); close() closes
        # those still alive.
        self._clients: weakref.WeakSet[httpx.Client] = weakref.WeakSet()
        self._clients_lock = threading.Lock()

    @property
    def http(self) -> httpx.Client:
        """The calling thread's httpx client (created on first use)."""
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self._connect()
            with self._clients_lock:
                self._clients.add(client)
        return client

    @classmethod
    def from_kubeconfig(
        cls, path: str | os.PathLike[str] | None = None, context: str | None = None, *, timeout: float = 30.0
    ) -> KubeApi:
        """Connect as the kubeconfig's (or the in-cluster service account's) user."""
        selected = load_kubeconfig(path, context)
        params = ConnectionParams(timeout=httpx.Timeout(timeout), trust_env=False)
        return cls(lambda: httpx.Client(**params.httpx_params(selected), limits=POOL_LIMITS))

    @classmethod
    def with_token(cls, server: str, token: str, ca_file: Path, *, timeout: float = 30.0) -> KubeApi:
        """Connect with a bearer token (e.g. a ServiceAccount's, from the TokenRequest API)."""
        return cls(
            lambda: httpx.Client(
                base_url=server,
                verify=str(ca_file),
                headers={"Authorization": f"Bearer {token}"},
                timeout=timeout,
                trust_env=False,
                limits=POOL_LIMITS,
            )
        )

    def close(self) -> None:
        """Close every thread's connections."""
        with self._clients_lock:
            clients = list(self._clients)
            self._clients.clear()
        for client in clients:
            client.close()
        self._local = threading.local()

    # -- plain verbs --------------------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """One request; the decoded JSON response. Raises the ``KubeApiError`` subclass for the status."""
        content = None if body is None else orjson.dumps(body)
        headers = {"Content-Type": content_type} if content is not None else None
        for attempt in range(_THROTTLE_RETRIES + 1):
            try:
                response = self.http.request(method, path, content=content, params=params, headers=headers)
            except httpx.HTTPError as error:
                raise KubeApiError(0, "Unreachable", f"{method} {path}: {error}") from error
            if response.status_code != 429 or attempt == _THROTTLE_RETRIES:
                break
            # Throttled (API priority and fairness, or a CRD not served yet): wait as told, briefly, and retry.
            time.sleep(min(_retry_after(response), 2.0))
        if response.status_code >= 400:
            raise error_from(response.status_code, _decode(response.content))
        return orjson.loads(response.content) if response.content else None

    def get(
        self, resource: Resource, name: str, namespace: str | None = None, *, not_older_than: str | None = None
    ) -> dict[str, Any]:
        """One object: the latest version by default (a read from etcd).

        With ``not_older_than`` (a resourceVersion), the API server answers from its watch cache with a version at
        least that new: about half the work of a read from etcd, and as fresh as what its watches deliver.
        """
        params = {"resourceVersion": not_older_than} if not_older_than else None
        result: dict[str, Any] = self.request("GET", resource.path(namespace, name), params=params)
        return result

    def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
    ) -> tuple[list[dict[str, Any]], str]:
        """Every matching object (paged), and the list's resourceVersion to start a watch from."""
        items: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": page_size}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        while True:
            page = self.request("GET", resource.path(namespace), params=params)
            for item in page.get("items") or []:
                # List items carry no kind/apiVersion; add them so an item looks like a GET's answer.
                item.setdefault("kind", resource.kind)
                item.setdefault("apiVersion", resource.api_version)
                items.append(item)
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return items, str(meta.get("resourceVersion") or "")
            params["continue"] = meta["continue"]

    def list_page(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> tuple[builtins.list[dict[str, Any]], str | None, int | None]:
        """One page of the API server's own paging (``limit``/``continue``; 0: every object in one answer).

        Returns:
            The page's objects, the API server's continue token (None: the last page), and its
            ``remainingItemCount`` when it gives one (not with a label selector).
        """
        params: dict[str, Any] = {}
        if limit > 0:
            params["limit"] = limit
        if label_selector:
            params["labelSelector"] = label_selector
        if continue_token:
            params["continue"] = continue_token
        page = self.request("GET", resource.path(namespace), params=params)
        items: builtins.list[dict[str, Any]] = []
        for item in page.get("items") or []:
            item.setdefault("kind", resource.kind)
            item.setdefault("apiVersion", resource.api_version)
            items.append(item)
        meta = page.get("metadata") or {}
        remaining = meta.get("remainingItemCount")
        return items, meta.get("continue") or None, remaining if isinstance(remaining, int) else None

    def watch(
        self,
        resource: Resource,
        resource_version: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Stream ``(type, object)`` changes after ``resource_version`` until the server ends the watch.

        Types are ADDED, MODIFIED, DELETED and BOOKMARK (the object then carries only a resourceVersion).

        Raises:
            GoneError: ``resource_version`` is too old (list again).
        """
        params: dict[str, Any] = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
        }
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        timeout = httpx.Timeout(30.0, read=timeout_seconds + 30.0)
        try:
            with self.http.stream("GET", resource.path(namespace), params=params, timeout=timeout) as response:
                if response.status_code >= 400:
                    response.read()
                    raise error_from(response.status_code, _decode(response.content))
                for line in _lines(response.iter_bytes()):
                    event = orjson.loads(line)
                    kind, obj = event.get("type", ""), event.get("object") or {}
                    if kind == "ERROR":
                        raise error_from(int(obj.get("code") or 500), obj)
                    yield kind, obj
        except httpx.HTTPError as error:
            raise KubeApiError(0, "Unreachable", f"watch {resource.plural}: {error}") from error

    def create(self, resource: Resource, body: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """Create an object (``namespace`` defaults to the body's)."""
        namespace = namespace or (body.get("metadata") or {}).get("namespace")
        result: dict[str, Any] = self.request("POST", resource.path(namespace), body=body)
        return result

    def replace(self, resource: Resource, body: Mapping[str, Any], *, subresource: str | None = None) -> dict[str, Any]:
        """PUT the object (with its resourceVersion: a stale one raises ``ConflictError``)."""
        meta = body["metadata"]
        path = resource.path(meta.get("namespace"), meta["name"], subresource)
        result: dict[str, Any] = self.request("PUT", path, body=body)
        return result

    def replace_status(self, resource: Resource, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT the status subresource (optimistic: the body's resourceVersion must be current)."""
        return self.replace(resource, body, subresource="status")

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        kind: str = "merge",
    ) -> dict[str, Any]:
        """Patch an object: ``kind`` is ``merge`` (RFC 7386), ``strategic`` or ``json`` (RFC 6902)."""
        content_type = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "json": "application/json-patch+json",
        }[kind]
        path = resource.path(namespace, name, subresource)
        result: dict[str, Any] = self.request("PATCH", path, body=patch, content_type=content_type)
        return result

    def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        propagation: str = "Background",
        grace_period_seconds: int | None = None,
    ) -> None:
        """Delete an object; with ``uid``, only that incarnation of the name (a newer one is left alone)."""
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if uid:
            options["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        self.request("DELETE", resource.path(namespace, name), body=options)

    # -- special verbs ------------------------------------------------------------------------------------------

    def bind(self, namespace: str, pod: str, node: str, *, uid: str | None = None) -> None:
        """Bind a pending Pod to a node through its ``binding`` subresource (what a scheduler does)."""
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod, "namespace": namespace, **({"uid": uid} if uid else {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.request("POST", PODS.path(namespace, pod, "binding"), body=body)

    def create_token(self, namespace: str, service_account: str, *, seconds: int = 3600) -> str:
        """A bearer token for a ServiceAccount (the TokenRequest API, as ``kubectl create token``)."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        path = Resource("ServiceAccount", "serviceaccounts").path(namespace, service_account, "token")
        answer = self.request("POST", path, body=body)
        return str(answer["status"]["token"])

    def logs(
        self,
        namespace: str,
        pod: str,
        *,
        container: str | None = None,
        tail_lines: int | None = None,
        since_time: str | None = None,
        timestamps: bool = False,
    ) -> str:
        """A Pod's log text (from ``since_time``, RFC 3339 to the second; each line after its time, ``timestamps``)."""
        params: dict[str, Any] = {}
        if container:
            params["container"] = container
        if tail_lines is not None:
            params["tailLines"] = tail_lines
        if since_time is not None:
            params["sinceTime"] = since_time
        if timestamps:
            params["timestamps"] = "true"
        try:
            response = self.http.get(PODS.path(namespace, pod, "log"), params=params)
        except httpx.HTTPError as error:
            raise KubeApiError(0, "Unreachable", f"logs of {pod}: {error}") from error
        if response.status_code >= 400:
            raise error_from(response.status_code, _decode(response.content))
        return response.text


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.05, float(response.headers.get("Retry-After", "0.2")))
    except ValueError:
        return 0.2


def _decode(content: bytes) -> Any:
    """An error body: its JSON (a Status), or its text when it is not JSON."""
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return content.decode(errors="replace")


def _lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The non-empty lines of a byte stream (a watch sends one JSON event per line)."""
    rest = b""
    for chunk in chunks:
        rest += chunk
        if b"\n" not in chunk:
            continue
        *lines, rest = rest.split(b"\n")
        yield from (line for line in lines if line.strip())
    if rest.strip():
        yield rest
