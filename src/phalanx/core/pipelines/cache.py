"""Step cache keys: the same component, input values and input artifact contents give the same key.

A key is the sha256 of a canonical JSON of ``{version, namespace, component, values, artifacts}``:

- ``namespace``: the run's: the cache is shared by every run of a namespace and by no other namespace, whose
  tenant could otherwise receive copies of this one's artifacts by running a step with the same inputs;

- ``component``: the digest of what the step runs — a KFP component's canonical form (through the
  ``ComponentDigester`` protocol, which ``model.kfp_component`` implements) or, for a trainingJob/sweep step,
  of the step's spec with its declared inputs and outputs (``step_definition_digest``);
- ``values``: the resolved argument strings of inputs passed by value;
- ``artifacts``: for inputs fed by an upstream artifact, the digest of the artifact's content tree (through the
  ``ArtifactDigests`` protocol; ``tree_digest`` combines per-file digests) instead of its location, so a rerun whose
  artifacts land elsewhere with the same bytes still hits.

Canonical JSON: sorted keys, no spaces, UTF-8, no NaN. ``CACHE_KEY_VERSION`` changes when this form does, so old
entries simply stop matching. Pure: reading files and hashing them is the adapters' work.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Protocol

from pydantic import JsonValue

from phalanx.model.pipelines import Step, StepKind

CACHE_KEY_VERSION = "phalanx.dev/step-cache/v2"  # v2: the namespace is part of the key


class ComponentDigester(Protocol):
    """Gives the digest of a component step's component (its canonical form); the KFP part implements it."""

    def component_digest(self, step: Step) -> str:
        """The sha256 hex digest of the component ``step`` runs."""
        ...


class ArtifactDigests(Protocol):
    """Gives the content digest of an artifact by its location (``tree_digest`` of its files)."""

    def artifact_digest(self, location: str) -> str | None:
        """The digest of the artifact at ``location``, or None when it is unknown (then there is no cache hit)."""
        ...


def canonical_json(value: JsonValue) -> str:
    """One text per value: sorted keys, no whitespace, UTF-8 kept, NaN and infinities refused."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def document_digest(value: JsonValue) -> str:
    """sha256 hex of ``value``'s canonical JSON."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def step_definition_digest(step: Step) -> str:
    """The digest of what a trainingJob or sweep step runs: its kind, spec, and declared inputs and outputs.

    ``retries``, ``cache``, ``after``, ``when`` and ``parallelFor`` are left out: they change when a step runs,
    not what it computes.

    Raises:
        ValueError: for a component step, whose digest comes from a ``ComponentDigester``.
    """
    template = step.training_job if step.kind is StepKind.TRAINING_JOB else step.sweep
    if template is None:
        raise ValueError("a component step's digest comes from its component (ComponentDigester)")
    body: JsonValue = {
        "kind": str(step.kind),
        "spec": template.spec,
        "metadata": template.metadata,
        "inputs": [spec.to_dict() for spec in step.inputs],
        "outputs": [spec.to_dict() for spec in step.outputs],
    }
    return document_digest(body)


def tree_digest(files: Iterable[tuple[str, str]]) -> str:
    """The digest of an artifact's content tree from ``(relative path, sha256 of the file's bytes)`` pairs.

    Order-free (sorted by path); a single-file artifact is the tree of one file named ``""``. Empty directories
    do not count: an artifact is its files.
    """
    listing = sorted(files)
    return document_digest([[path, digest] for path, digest in listing])


def cache_key(
    *, component_digest: str, values: Mapping[str, str], artifact_digests: Mapping[str, str], namespace: str = ""
) -> str:
    """The cache key of one step instance.

    Args:
        component_digest: what runs (``ComponentDigester`` or ``step_definition_digest``).
        values: input name -> resolved value, for inputs passed by value.
        artifact_digests: input name -> content digest, for inputs fed by an artifact.
        namespace: the run's namespace: a tenant never gets another's outputs (copies of its artifacts) from the
            cache, whatever it knows of their inputs.
    """
    body: JsonValue = {
        "version": CACHE_KEY_VERSION,
        "namespace": namespace,
        "component": component_digest,
        "values": dict(values),
        "artifacts": dict(artifact_digests),
    }
    return document_digest(body)
