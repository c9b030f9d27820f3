"""The resources the REST API serves: each kind's plural, model and scope, read from the CRDs' own table.

``adapters.kubernetes.crds.KINDS`` is what ``deploy/crds`` is generated from, so a path here names a resource as
``kubectl`` does. The scope is the CRDs' (JobType and Queue are cluster-scoped) on every backend, so a path means
the same whichever backend serves it. The
embedded store keeps cluster-scoped objects under a namespace of its own (``default``): a cluster-scoped object
is found by its name alone here (``Resource.find``), whichever namespace a backend files it under.

``Resource.wire`` is an object as the API answers it: a Dataset's source URLs with any password masked, as every
other door shows them (``model.masking``; docs/datasets.md), since a viewer of a namespace reads its Datasets.
``Resource.converts`` says which foreign documents a kind's path also takes: a Katib Experiment becomes a Sweep at
the validation door, as ``phalanx submit`` converts it (a compiled KFP pipeline, which has no kind, is the app's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from phalanx.adapters.kubernetes.crds import KINDS
from phalanx.model.base import API_VERSION
from phalanx.model.katib import KIND as EXPERIMENT
from phalanx.model.masking import mask_urls_in
from phalanx.services.port import ObjectReader, Stored

PREFIX = f"/apis/{API_VERSION}"


@dataclass(frozen=True)
class Resource:
    """One kind as the API serves it."""

    model: type[Stored]
    plural: str
    namespaced: bool
    converts: frozenset[str] = field(default=frozenset())
    """Kinds of other APIs whose documents this path takes and the door turns into this kind."""

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

    def wire(self, obj: Stored) -> dict[str, Any]:
        """The object as the API answers it (a Dataset's URLs masked)."""
        body = obj.to_dict()
        masked: dict[str, Any] = mask_urls_in(body) if self.kind == "Dataset" else body
        return masked


#: Foreign kinds each of our kinds' paths also take (the door converts them).
_CONVERTS = {"Sweep": frozenset({EXPERIMENT})}


RESOURCES: tuple[Resource, ...] = tuple(
    Resource(
        cast(type[Stored], kind.model),
        kind.plural,
        namespaced=kind.scope == "Namespaced",
        converts=_CONVERTS.get(kind.kind, frozenset()),
    )
    for kind in KINDS
)
BY_PLURAL = {resource.plural: resource for resource in RESOURCES}


def known_plurals() -> str:
    """The plurals served, for messages: ``trainingjobs, jobtypes, ...``."""
    return ", ".join(r.plural for r in RESOURCES)
