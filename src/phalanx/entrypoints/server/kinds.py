"""The resources the REST API serves: each kind's plural, model and scope, read from the CRDs' own table.

``adapters.kubernetes.crds.KINDS`` is what ``deploy/crds`` is generated from, so a path here names a resource as
``kubectl`` does. The scope is the CRDs' (JobType and Queue are cluster-scoped) on every backend, so a path means
the same whichever backend serves it. The
embedded store keeps cluster-scoped objects under a namespace of its own (``default``): a cluster-scoped object
is found by its name alone here (``Resource.find``), whichever namespace a backend files it under.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from phalanx.adapters.kubernetes.crds import KINDS
from phalanx.model.base import API_VERSION
from phalanx.services.port import ObjectReader, Stored

PREFIX = f"/apis/{API_VERSION}"


@dataclass(frozen=True)
class Resource:
    """One kind as the API serves it."""

    model: type[Stored]
    plural: str
    namespaced: bool

    @property
    def kind(self) -> str:
        """The kind's name, as documents write it (``TrainingJob``)."""
        return self.model.__name__

    def find(self, reader: ObjectReader, namespace: str | None, name: str) -> Stored | None:
        """The object of that name (in ``namespace`` for a namespaced kind), or None."""
        if self.namespaced:
            assert namespace is not None
            found: Stored | None = reader.get(self.model, namespace, name)  # type: ignore[type-var]  # Stored kinds are Readable
            return found
        # Few of these (Queues, JobTypes); the backend may file them under any namespace (see the module).
        return next((o for o in reader.list(self.model) if o.metadata.name == name), None)  # type: ignore[type-var]


RESOURCES: tuple[Resource, ...] = tuple(
    Resource(cast(type[Stored], kind.model), kind.plural, namespaced=kind.scope == "Namespaced") for kind in KINDS
)
BY_PLURAL = {resource.plural: resource for resource in RESOURCES}


def known_plurals() -> str:
    """The plurals served, for messages: ``trainingjobs, jobtypes, ...``."""
    return ", ".join(r.plural for r in RESOURCES)
