"""The Kubernetes API in memory: ``adapters.kubernetes.api.KubeApi`` over a dict, for unit tests of the services.

It subclasses ``KubeApi`` and overrides every verb with the same signature (``test_memory_kube_api`` checks they
match), so the services get the real type and a changed verb breaks the tests rather than drifting. It behaves as
the API server does where the services rely on it: objects by resource, namespace and name; a resourceVersion that
moves on every write and is a precondition on a replace, a status replace and a merge patch that carries one
(``ConflictError``); ``generateName``; ``NotFoundError`` and ``ConflictError(reason="AlreadyExists")``; the status
subresource (a write of the object keeps its status, a write of the status keeps the rest, ``generation`` moves
when the spec changes); RFC 7386 merge patches; label and field selectors (equality, ``!=``, existence, ``in``
and ``notin``); uid preconditions on delete; the binding subresource; Pod logs; discovery of the kinds it serves;
watches, which replay the changes since a resourceVersion and end (an informer then watches again).

Test hooks: ``calls`` records every request in order, refused ones too; ``writes`` and ``writes_to`` are the
writes accepted, ``reads`` the gets (a get's ``body`` is its ``not_older_than``); ``of`` lists a kind's objects;
``put`` stores an object as another client would have written it, without a record; ``objects`` is the store
itself, for a test that changes an object behind the services' back; ``fail`` makes the next calls of a verb raise
the errors given (a list, used up; or an iterator such as ``itertools.repeat``); ``unserved`` API groups (or single
resources, ``sweeps.phalanx.dev``) answer 404 as on a cluster without their CRDs; ``logs_text`` holds Pods' logs
(lines 2k and 2k+1 written at ``LOG_EPOCH`` + k/4 s, for ``sinceTime`` and ``timestamps``).
Lenient where tests need it: a create keeps the status, generation and creationTimestamp the body carries, so a
test makes an object in any state in one step.
"""

from __future__ import annotations

import base64
import builtins
import copy
import itertools
import json
import re
import threading
import uuid
from collections.abc import Collection, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from phalanx.adapters.kubernetes import api as kube
from phalanx.adapters.kubernetes.api import (
    PODS,
    ConflictError,
    KubeApi,
    KubeApiError,
    NotFoundError,
    Resource,
)
from phalanx.core.clock import Clock, VirtualClock
from support.merge_patch import merge

# Every kind adapters/kubernetes/api.py names: what discovery answers with.
SERVED = tuple(value for value in vars(kube).values() if isinstance(value, Resource))
_NOT_SERVED = "the server could not find the requested resource"
_IDLE_WATCH_S = 0.05
LOG_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _rfc3339nano(time: datetime) -> str:
    """A time as the kubelet stamps a log line (Go's RFC3339Nano: a fraction's trailing zeros dropped)."""
    fraction = f"{time.microsecond:06d}000".rstrip("0")
    return time.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


class Call(NamedTuple):
    """One request: the verb, the kind's plural, where, and what was sent (a write's body, a get's not_older_than)."""

    verb: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None = None
    body: Any = None


Key = tuple[str, str | None, str]


class MemoryKubeApi(KubeApi):
    """One API server's objects in a dict; thread-safe (the operator's workers write concurrently)."""

    def __init__(self, *, clock: Clock | None = None, unserved: Collection[str] = ()) -> None:
        super().__init__(_no_network)
        self.clock = clock or VirtualClock()
        self.unserved = set(unserved)
        self.objects: dict[Key, dict[str, Any]] = {}
        self.calls: list[Call] = []  # every request, refused or not
        self._writes: list[Call] = []  # the writes the server accepted
        # The next calls of a verb fail: a list is used up, an iterator (itertools.repeat) can fail them all.
        self.fail: dict[str, builtins.list[KubeApiError] | Iterator[KubeApiError]] = {}
        self.logs_text: dict[str, str] = {}  # by Pod name
        self.lock = threading.RLock()
        self._change = threading.Condition(self.lock)  # notified on every write, for watches
        self._versions = itertools.count(100)
        self._history: list[tuple[int, str, Resource, dict[str, Any]]] = []  # for watch

    # -- test hooks -----------------------------------------------------------------------------------------------

    def key(self, resource: Resource, name: str, namespace: str | None = None) -> Key:
        """Where an object is kept: cluster-scoped kinds under namespace None."""
        return resource.plural, namespace if resource.namespaced else None, name

    def of(self, resource: Resource, namespace: str | None = None) -> builtins.list[dict[str, Any]]:
        """Copies of a kind's objects (in one namespace, or all), in the order they were created."""
        with self.lock:
            return [
                copy.deepcopy(obj)
                for (plural, ns, _), obj in self.objects.items()
                if plural == resource.plural and (namespace is None or ns == namespace)
            ]

    def put(self, resource: Resource, body: Mapping[str, Any]) -> dict[str, Any]:
        """Store an object as another client would have written it (uid and resourceVersion filled), unrecorded."""
        with self.lock:
            obj = self._stored_form(resource, body)
            self.objects[self.key(resource, obj["metadata"]["name"], obj["metadata"].get("namespace"))] = obj
            self._changed("ADDED", resource, obj, None)
            return copy.deepcopy(obj)

    @property
    def writes(self) -> builtins.list[Call]:
        """The writes accepted, in order (``calls`` has the refused ones too)."""
        with self.lock:
            return builtins.list(self._writes)

    def writes_to(self, plural: str) -> builtins.list[Call]:
        """The writes to one kind accepted, in order."""
        return [call for call in self.writes if call.plural == plural]

    @property
    def reads(self) -> builtins.list[Call]:
        """The single-object reads (a get's ``body`` is its ``not_older_than``)."""
        return [call for call in self.calls if call.verb == "get"]

    # -- KubeApi's verbs ------------------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """Discovery only (``GET /apis/GROUP/VERSION``): the kinds served there; anything else is not served."""
        groups = {f"/apis/{r.group}/{r.version}": r.group for r in SERVED if r.group}
        group = groups.get(path)
        if method != "GET" or group is None or group in self.unserved:
            raise NotFoundError(404, "NotFound", _NOT_SERVED)
        return {
            "resources": [{"name": r.plural, "kind": r.kind} for r in SERVED if r.group == group and self.serves(r)]
        }

    def serves(self, resource: Resource) -> bool:
        """Whether the kind is served (neither its group nor itself is in ``unserved``)."""
        return not ({resource.group, f"{resource.plural}.{resource.group}"} & self.unserved)

    def get(
        self, resource: Resource, name: str, namespace: str | None = None, *, not_older_than: str | None = None
    ) -> dict[str, Any]:
        with self.lock:
            self._call("get", resource, namespace, name, body=not_older_than)
            return copy.deepcopy(self._current(resource, name, namespace))

    def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
    ) -> tuple[list[dict[str, Any]], str]:
        with self.lock:
            self._call("list", resource, namespace, None)
            items = [
                obj
                for obj in self.of(resource, namespace if resource.namespaced else None)
                if _labels_match(obj, label_selector) and _fields_match(obj, field_selector)
            ]
            for item in items:
                item.setdefault("kind", resource.kind)
                item.setdefault("apiVersion", resource.api_version)
            return items, self._version_now()

    def list_page(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> tuple[builtins.list[dict[str, Any]], str | None, int | None]:
        """The API server's paging: by namespace then name, its continue token opaque, no count with a selector."""
        items, _ = self.list(resource, namespace, label_selector=label_selector)
        ordered = sorted(items, key=_key)
        if continue_token:
            try:
                after = tuple(json.loads(base64.urlsafe_b64decode(continue_token)))
            except ValueError:
                raise KubeApiError(400, "BadRequest", "the continue token is not valid") from None
            ordered = [item for item in ordered if _key(item) > after]
        if limit <= 0 or len(ordered) <= limit:
            return ordered, None, None
        page = ordered[:limit]
        token = base64.urlsafe_b64encode(json.dumps(list(_key(page[-1]))).encode()).decode()
        return page, token, None if label_selector else len(ordered) - limit

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
        """The changes after ``resource_version`` that have happened; then the watch ends (watch again for more).

        With none yet it waits a moment for one, so that an informer watching in a loop does not spin.
        """
        after = int(resource_version or 0)

        def changes() -> builtins.list[tuple[str, dict[str, Any]]]:
            return [
                (kind, copy.deepcopy(obj))
                for version, kind, of, obj in self._history
                if version > after
                and of == resource
                and (namespace is None or obj["metadata"].get("namespace") == namespace)
                and _labels_match(obj, label_selector)
                and _fields_match(obj, field_selector)
            ]

        with self.lock:
            self._call("watch", resource, namespace, None)
            found = changes()
            if not found:
                self._change.wait(_IDLE_WATCH_S)
                found = changes()
        yield from found

    def create(self, resource: Resource, body: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        namespace = namespace or (body.get("metadata") or {}).get("namespace")
        with self.lock:
            call = self._call("create", resource, namespace, (body.get("metadata") or {}).get("name"), body=body)
            obj = self._stored_form(resource, body, namespace)
            meta = obj["metadata"]
            meta["uid"] = str(uuid.uuid4())  # a new incarnation, whatever the body says
            key = self.key(resource, meta["name"], namespace)
            if key in self.objects:
                raise ConflictError(409, "AlreadyExists", f'{resource.plural} "{meta["name"]}" already exists')
            self.objects[key] = obj
            self._changed("ADDED", resource, obj, call)
            return copy.deepcopy(obj)

    def replace(self, resource: Resource, body: Mapping[str, Any], *, subresource: str | None = None) -> dict[str, Any]:
        meta = body["metadata"]
        name, namespace = meta["name"], meta.get("namespace")
        with self.lock:
            call = self._call("replace", resource, namespace, name, subresource, body)
            current = self._current(resource, name, namespace)
            self._check_version(resource, current, meta.get("resourceVersion"))
            if subresource == "status":
                updated = {**copy.deepcopy(current), "status": copy.deepcopy(body.get("status"))}
            else:
                updated = {k: copy.deepcopy(v) for k, v in body.items() if k != "status"}
                if "status" in current:
                    updated["status"] = copy.deepcopy(current["status"])
                # The server owns these: a PUT cannot change them.
                for field in ("uid", "creationTimestamp", "generation"):
                    if field in current["metadata"]:
                        updated["metadata"][field] = current["metadata"][field]
            return self._store(resource, current, updated, call)

    def replace_status(self, resource: Resource, body: Mapping[str, Any]) -> dict[str, Any]:
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
        """A merge patch (the only kind the services send); a resourceVersion in it is a precondition."""
        assert kind == "merge", f"the in-memory API applies merge patches only, not {kind!r}"
        with self.lock:
            call = self._call("patch", resource, namespace, name, subresource, patch)
            current = self._current(resource, name, namespace)
            patch = copy.deepcopy(patch)
            self._check_version(resource, current, (patch.get("metadata") or {}).pop("resourceVersion", None))
            if subresource == "status":
                updated = {**copy.deepcopy(current), "status": merge(current.get("status"), patch.get("status"))}
            else:
                patch.pop("status", None)  # the status subresource's, not the object's
                updated = merge(current, patch)
            return self._store(resource, current, updated, call)

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
        with self.lock:
            call = self._call("delete", resource, namespace, name)
            current = self._current(resource, name, namespace)
            if uid and current["metadata"].get("uid") != uid:
                message = f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                raise ConflictError(409, "Conflict", message + str(current["metadata"].get("uid")))
            del self.objects[self.key(resource, name, namespace)]
            gone = copy.deepcopy(current)
            gone["metadata"]["resourceVersion"] = self._next_version()  # as etcd: the deletion is a revision
            self._changed("DELETED", resource, gone, call)

    def bind(self, namespace: str, pod: str, node: str, *, uid: str | None = None) -> None:
        with self.lock:
            call = self._call("bind", PODS, namespace, pod, "binding", node)
            current = self._current(PODS, pod, namespace)
            if uid and current["metadata"].get("uid") != uid:
                raise ConflictError(409, "Conflict", f"pod {pod} has uid {current['metadata'].get('uid')}, not {uid}")
            if assigned := (current.get("spec") or {}).get("nodeName"):
                raise ConflictError(409, "Conflict", f"pod {pod} is already assigned to node {assigned}")
            updated = copy.deepcopy(current)
            updated.setdefault("spec", {})["nodeName"] = node
            self._store(PODS, current, updated, call)

    def create_token(self, namespace: str, service_account: str, *, seconds: int = 3600) -> str:
        return f"token-{namespace}-{service_account}"

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
        with self.lock:
            self._call("logs", PODS, namespace, pod, "log", body={"sinceTime": since_time, "timestamps": timestamps})
            self._current(PODS, pod, namespace)
            text = self.logs_text.get(pod, "")
        lines = text.splitlines(keepends=True)
        # Two lines at each time (a program printing fast), stamped as the kubelet does (trailing zeros dropped).
        times = [LOG_EPOCH + timedelta(milliseconds=250 * (i // 2)) for i in range(len(lines))]
        if since_time is not None:
            since = datetime.fromisoformat(since_time)
            lines, times = (
                [x for x, t in zip(lines, times, strict=True) if t >= since],
                [t for t in times if t >= since],
            )
        if tail_lines is not None:
            lines, times = (lines[-tail_lines:], times[-tail_lines:]) if tail_lines else ([], [])
        if timestamps:
            lines = [f"{_rfc3339nano(t)} {line}" for line, t in zip(lines, times, strict=True)]
        return "".join(lines)

    def close(self) -> None:
        pass

    # -- the server's side ----------------------------------------------------------------------------------------

    def _call(
        self,
        verb: str,
        resource: Resource,
        namespace: str | None,
        name: str | None,
        subresource: str | None = None,
        body: Any = None,
    ) -> Call:
        """Record the request, then refuse it if a test asked for a failure or the kind is not served."""
        call = Call(verb, resource.plural, namespace, name, subresource, copy.deepcopy(body))
        self.calls.append(call)
        failures = self.fail.get(verb)
        if isinstance(failures, builtins.list):
            if failures:
                raise failures.pop(0)
        elif failures is not None and (error := next(failures, None)) is not None:
            raise error
        if not self.serves(resource):
            raise NotFoundError(404, "NotFound", _NOT_SERVED)
        return call

    def _current(self, resource: Resource, name: str, namespace: str | None) -> dict[str, Any]:
        found = self.objects.get(self.key(resource, name, namespace))
        if found is None:
            raise NotFoundError(404, "NotFound", f'{resource.plural} "{name}" not found')
        return found

    def _check_version(self, resource: Resource, current: dict[str, Any], wanted: str | None) -> None:
        if wanted and wanted != current["metadata"].get("resourceVersion"):
            name = current["metadata"]["name"]
            message = f'Operation cannot be fulfilled on {resource.plural} "{name}": the object has been modified'
            raise ConflictError(409, "Conflict", message + "; please apply your changes to the latest version")

    def _stored_form(self, resource: Resource, body: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """The body as the server keeps it: named, namespaced, with kind, uid, generation and a creation time."""
        obj = copy.deepcopy(dict(body))
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if not meta.get("name"):
            raise KubeApiError(422, "Invalid", "metadata.name: Required value: name or generateName is required")
        if resource.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        obj.setdefault("kind", resource.kind)
        obj.setdefault("apiVersion", resource.api_version)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("generation", 1)
        meta.setdefault("creationTimestamp", self.clock.now().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        meta["resourceVersion"] = self._next_version()
        return obj

    def _store(
        self, resource: Resource, current: dict[str, Any], updated: dict[str, Any], call: Call
    ) -> dict[str, Any]:
        """Keep a write: a new resourceVersion, and a new generation when the spec changed; a no-op changes nothing."""
        meta = updated["metadata"]
        meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        if updated == current:  # as the API server: no new version, no watch event
            self._writes.append(call)
            return copy.deepcopy(current)
        if updated.get("spec") != current.get("spec"):
            meta["generation"] = int(current["metadata"].get("generation") or 0) + 1
        meta["resourceVersion"] = self._next_version()
        self.objects[self.key(resource, meta["name"], meta.get("namespace"))] = updated
        self._changed("MODIFIED", resource, updated, call)
        return copy.deepcopy(updated)

    def _next_version(self) -> str:
        return str(next(self._versions))

    def _version_now(self) -> str:
        return str(self._history[-1][0]) if self._history else "0"

    def _changed(self, kind: str, resource: Resource, obj: dict[str, Any], call: Call | None) -> None:
        """A write went through: recorded as accepted (``call`` None: a ``put``, unrecorded) and kept for watches."""
        if call is not None:
            self._writes.append(call)
        self._history.append((int(obj["metadata"]["resourceVersion"]), kind, resource, copy.deepcopy(obj)))
        self._change.notify_all()


def _no_network() -> Any:
    raise AssertionError("the in-memory Kubernetes API makes no requests")


_SET = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _requirements(selector: str) -> Iterator[str]:
    """A selector's comma-separated requirements (a comma inside ``in (a, b)`` does not split)."""
    depth, start = 0, 0
    for i, char in enumerate(selector):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            yield selector[start:i]
            start = i + 1
    yield selector[start:]


def _matches(values: Mapping[str, str], selector: str | None) -> bool:
    for requirement in _requirements(selector or ""):
        requirement = requirement.strip()
        if not requirement:
            continue
        if found := _SET.match(requirement):
            key, operator, listed = found.groups()
            options = {option.strip() for option in listed.split(",")}
            if (values.get(key) in options) != (operator == "in"):
                return False
        elif "!=" in requirement:
            key, value = (part.strip() for part in requirement.split("!=", 1))
            if values.get(key) == value:
                return False
        elif "=" in requirement:
            key, value = (part.strip() for part in requirement.replace("==", "=").split("=", 1))
            if values.get(key) != value:
                return False
        elif requirement.startswith("!"):
            if requirement[1:].strip() in values:
                return False
        elif requirement not in values:
            return False
    return True


def _labels_match(obj: Mapping[str, Any], selector: str | None) -> bool:
    return _matches((obj.get("metadata") or {}).get("labels") or {}, selector)


def _fields_match(obj: Mapping[str, Any], selector: str | None) -> bool:
    """Field selectors name dotted paths (``metadata.name``, ``involvedObject.uid``, ``spec.nodeName``)."""
    if not selector:
        return True
    fields: dict[str, str] = {}
    for requirement in _requirements(selector):
        path = re.split(r"!=|==|=", requirement, maxsplit=1)[0].strip()
        value: Any = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is not None:
            fields[path] = str(value)
        elif path == "spec.nodeName":
            fields[path] = ""  # the API server matches an unscheduled Pod's nodeName as ""
    return _matches(fields, selector)


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
