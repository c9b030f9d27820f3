"""Which nodes a replica may run on by the node's labels and taints: nodeSelector, node affinity, tolerations.

Kubernetes' rules, so the Phalanx scheduler, the simulator and kube-scheduler agree on where a Pod may go:

- every ``nodeSelector`` entry must equal the node's label;
- of the required node affinity's terms (``requiredDuringSchedulingIgnoredDuringExecution``) one must hold,
  and a term holds when all its requirements do: ``In``/``NotIn`` a set of values, ``Exists``/``DoesNotExist``,
  ``Gt``/``Lt`` an integer; ``matchFields`` knows ``metadata.name`` only, as Kubernetes does;
- a taint with effect ``NoSchedule`` or ``NoExecute`` keeps a replica off unless one of its tolerations matches
  it (same key, or an empty key with ``Exists``; same value unless ``Exists``; same effect unless empty);
  ``PreferNoSchedule`` is a preference and does not.

Preferred affinity and pod (anti-)affinity are preferences or relations between Pods: they constrain nothing
here. A ``NodeConstraint`` is hashable: it is part of a ``Demand``, and the node table caches a mask per
constraint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from phalanx.model.nodes import NodeTaint
from phalanx.model.pods import PodFields

BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class Taint:
    """A node's taint."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A taint a replica tolerates (empty strings: any)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Whether this toleration matches ``taint`` (Kubernetes' ``Toleration.ToleratesTaint``)."""
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class Requirement:
    """A node label (or, with ``field``, the node's name) compared with values."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    field: bool = False

    def holds(self, name: str, labels: Mapping[str, str]) -> bool:
        """Whether the node of ``name`` and ``labels`` meets the requirement."""
        if self.field:
            present, value = self.key == "metadata.name", name
        else:
            present, value = self.key in labels, labels.get(self.key, "")
        if self.operator == "In":
            return present and value in self.values
        if self.operator == "NotIn":
            return not present or value not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator in ("Gt", "Lt") and present and len(self.values) == 1:
            try:
                have, bound = int(value), int(self.values[0])
            except ValueError:
                return False
            return have > bound if self.operator == "Gt" else have < bound
        return False


@dataclass(frozen=True, slots=True)
class NodeConstraint:
    """Where one replica may run: its nodeSelector, required node affinity terms and tolerations."""

    selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[tuple[Requirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()

    def admits(self, name: str, labels: Mapping[str, str], taints: Iterable[Taint]) -> bool:
        """Whether a node of ``name``, ``labels`` and ``taints`` may take the replica."""
        if any(labels.get(key) != value for key, value in self.selector):
            return False
        if self.terms and not any(all(r.holds(name, labels) for r in term) for term in self.terms):
            return False
        return all(
            any(toleration.tolerates(taint) for toleration in self.tolerations)
            for taint in taints
            if taint.effect in BLOCKING_EFFECTS
        )

    def describe(self) -> str:
        """What the constraint asks, for a waiting job's reason: ``matches nodeSelector a=b, ...``."""
        parts = []
        if self.selector:
            parts.append("matches nodeSelector " + ", ".join(f"{key}={value}" for key, value in self.selector))
        if self.terms:
            parts.append("matches its required node affinity")
        parts.append("has no taint it does not tolerate")
        return ", ".join(parts)


#: No constraint beyond untolerated taints: what a replica without these fields gets.
UNCONSTRAINED = NodeConstraint()


def constraint_of(template: PodFields) -> NodeConstraint | None:
    """The node constraint of a replica template, or None when it sets none of the fields."""
    affinity = template.affinity.node_affinity if template.affinity is not None else None
    required = affinity.required_during_scheduling_ignored_during_execution if affinity is not None else None
    if not template.node_selector and required is None and not template.tolerations:
        return None
    terms: tuple[tuple[Requirement, ...], ...] = ()
    if required is not None:
        terms = tuple(
            tuple(Requirement(r.key, r.operator, tuple(r.values)) for r in term.match_expressions)
            + tuple(Requirement(r.key, r.operator, tuple(r.values), field=True) for r in term.match_fields)
            for term in required.node_selector_terms
        )
    tolerations = tuple(
        Toleration(t.key or "", t.operator or "Equal", t.value or "", t.effect or "") for t in template.tolerations
    )
    return NodeConstraint(tuple(sorted(template.node_selector.items())), terms, tolerations)


def taints_of(taints: Iterable[NodeTaint]) -> tuple[Taint, ...]:
    """A node's taints as the scheduler reads them."""
    return tuple(Taint(t.key, t.value, t.effect) for t in taints)
