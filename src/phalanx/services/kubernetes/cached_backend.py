"""The port over a cluster for controllers that run inside the operator: reads from informers, writes seen at once.

``KubeBackend`` reads with a GET or a LIST per call, right for the CLI. A controller written once over the port
(the sweep and pipeline controllers, ``services.sweeps`` and ``services.pipelines``) reads every object of its
kinds on every pass; in the operator those reads come from the informers' caches instead (one LIST at start,
then WATCH), each object parsed once per resourceVersion (``parsed.ParsedObjects``), so a pass costs no request.

A controller also reads what it has just written, in its very next pass: the pipeline controller takes a Running
step whose job it cannot see for a job that is gone. So every write through this port is put into the cache at
once (``Informer.observe``), before its watch event arrives, and handed to the informer's ``on_change`` as if the
watch had brought it: the echo of a version already cached is no change to an informer, so without this the
operator would not reconcile a trial job it did not create itself until its next resync.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Collection, Mapping
from typing import Any

from phalanx.adapters.kubernetes.api import KubeApi, Resource
from phalanx.adapters.kubernetes.informer import Informer
from phalanx.adapters.kubernetes.parsed import ParsedObjects
from phalanx.model.base import in_phases
from phalanx.model.errors import SpecError
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.services.kubernetes.operations import RESOURCES, KubeBackend
from phalanx.services.operations import OperationError
from phalanx.services.port import LabelSelector, Readable, Stored, selects


class CachedKubeBackend(KubeBackend):
    """``KubeBackend`` whose reads of the kinds in ``informers`` come from their caches.

    Args:
        api: the API, for writes, the kinds without an informer, Pods, Events and logs.
        informers: by model class (TrainingJob, Sweep...), the caches to read; they must be synced.
        jobtypes: the JobTypes a TrainingJob is validated against (the operator's current ones).
        options: passed to ``KubeBackend`` (component, instance, clock...).
    """

    def __init__(
        self,
        api: KubeApi,
        informers: Mapping[type, Informer],
        jobtypes: Callable[[], Mapping[str, JobType]],
        **options: Any,
    ) -> None:
        super().__init__(api, informers=informers, **options)
        self._jobtypes = jobtypes
        self._parsed: dict[type, ParsedObjects[Any]] = {
            kind: ParsedObjects(kind.__name__, functools.partial(self._parse, kind)) for kind in informers
        }

    def _parse(self, kind: type, obj: dict[str, Any]) -> Any:
        if kind is TrainingJob:
            try:
                return self.to_job(obj, self._jobtypes())
            except OperationError as error:
                raise ValueError(str(error)) from None
        return self.model_of(kind, obj)

    # -- reading -------------------------------------------------------------------------------------------------

    def get(self, kind: type[Readable], namespace: str, name: str) -> Readable | None:
        """The cached object (None when the cache has none); one that cannot be read says so."""
        informer = self.informers.get(kind)
        if informer is None:
            return super().get(kind, namespace, name)
        resource = RESOURCES[kind]
        obj = informer.get(namespace if resource.namespaced else None, name)
        if obj is None:
            return None
        try:
            return self._parse(kind, obj)  # type: ignore[no-any-return]
        except (SpecError, ValueError) as err:
            where = f"{namespace}/{name}" if resource.namespaced else name
            raise OperationError(f"{kind.__name__.lower()} {where} cannot be read: {err}") from None

    def list(
        self,
        kind: type[Readable],
        namespace: str | None = None,
        *,
        labels: LabelSelector | None = None,
        phases: Collection[str] | None = None,
    ) -> builtins.list[Readable]:
        """The cached objects of a namespace (None: all) with ``labels`` and ``phases``, parsed once a version.

        The cache is selected by namespace and labels before anything is parsed; unreadable objects are left out.
        """
        informer = self.informers.get(kind)
        if informer is None:
            return super().list(kind, namespace, labels=labels, phases=phases)
        items = informer.items()
        namespace = namespace if RESOURCES[kind].namespaced else None
        chosen = [
            obj
            for obj in items
            if (namespace is None or (obj.get("metadata") or {}).get("namespace") == namespace)
            and selects(labels, (obj.get("metadata") or {}).get("labels") or {})
        ]
        # It forgets the parses of objects that are gone; a phase is the parsed one (a default where none is set).
        return in_phases(self._parsed[kind].all(chosen, live=items), phases)

    # -- writing: each write is in the cache for the next pass ----------------------------------------------------

    def created(self, resource: Resource, answer: dict[str, Any]) -> None:
        """The API's answer to a create or replace: cached at once, and a change for the informer's consumers."""
        kind = next((k for k, r in RESOURCES.items() if r is resource), None)
        informer = self.informers.get(kind) if kind is not None else None
        if informer is None:
            return
        informer.observe(answer)
        if informer.on_change is not None:
            informer.on_change("MODIFIED", answer)

    def delete(self, kind: type[Stored], namespace: str, name: str, *, uid: str | None = None) -> None:
        """DELETE the object; the cache forgets it at once."""
        super().delete(kind, namespace, name, uid=uid)
        informer = self.informers.get(kind)
        if informer is not None:
            gone = informer.get(namespace if RESOURCES[kind].namespaced else None, name)
            informer.forget(namespace if RESOURCES[kind].namespaced else None, name)
            if gone is not None and informer.on_change is not None:
                informer.on_change("DELETED", gone)
