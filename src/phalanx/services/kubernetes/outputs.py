"""The Storing phase on Kubernetes: a job's outputs, written to the artifact store's claim, stored once it succeeded.

The operator's artifact store (``--artifact-store``) is a directory on a PersistentVolumeClaim
(``--artifact-volume-claim``) that the operator mounts at that directory. Every replica of a job mounts the same
claim's folder ``_outputs/<namespace>/<job>/<uid>`` (``rendering.outputs_sub_path``) at ``PHALANX_OUTPUT_DIR``:
the outputs land on the store as they are written, with no container added to the Pod and no copy out of a Pod
that is gone. The operator makes that folder before it creates the job's first Pod (so it exists, writable by the
claim's group, before a container looks for it) and, in the Storing phase, stores it
(``services.outputs_storing``, the embedded runtime's sequence) to:

- ``<store>/<namespace>/<job>`` by default, the layout of the embedded runtime's ``artifacts`` folder;
- ``outputs.storeTo`` given as a URL (``s3://bucket/prefix``, ``gs://...``, ``file:///...``): copied there by
  the operator, with its credentials (the storage Secret), never the Pod's;
- ``outputs.storeTo`` given as a relative path: ``<store>/<namespace>/<path>``, inside the job's own namespace
  folder (a path that leaves it, or an absolute one, which names nothing a user of the cluster can reach, fails
  the job's Storing naming the field and the fix).

``metrics.json`` becomes ``status.metrics``, as on the embedded runtime. The record is
``_outputs/<namespace>/<job>/<uid>.stored.json``, beside the folder, so an operator that restarts mid-way sees
that storing is done. Without a claim the operator collects nothing (``NOT_COLLECTED``): the job succeeds saying
its outputs were not stored, and why. A Pod mounts only claims of its own namespace, so the operator watches the
claims of that name (``claims``): a job in a namespace without one writes to an ``emptyDir`` as before (its Pods
would wait for the claim forever otherwise) and succeeds saying so and how to bind one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from phalanx.adapters.kubernetes.informer import Informer
from phalanx.adapters.kubernetes.rendering import OUTPUTS_VOLUME, outputs_sub_path
from phalanx.core.pipelines.step_files import CLAIM_OPTION
from phalanx.core.reconcile.types import OutputsObservation
from phalanx.model.jobs import TrainingJob
from phalanx.services.outputs_storing import is_url, observe_marker, store_once

#: What a job's Succeeded says where the operator has no artifact store on a claim.
NOT_COLLECTED = OutputsObservation(
    stored=True,
    not_collected=(
        "the operator has no artifact store on a PersistentVolumeClaim to collect them to "
        f"({CLAIM_OPTION}; chart value artifacts.persistentVolumeClaim), so they stayed in each Pod's emptyDir "
        "and went with it"
    ),
)
#: Group-writable and setgid: a replica running as the claim's group (the operator's, ``fsGroup``) may write.
_FOLDER_MODE = 0o2775


class KubeOutputs:
    """The jobs' outputs on the artifact store's claim, mounted here at ``store``.

    Args:
        store: the artifact store's directory, where this process mounts the claim.
        claim: the claim's name, which the jobs' Pods mount.
    """

    def __init__(self, store: Path, claim: str, claims: Informer | None = None) -> None:
        self.store = store
        self.claim = claim
        self.claims = claims

    def claim_in(self, namespace: str) -> bool:
        """Whether the namespace has the claim (a Pod mounts only claims of its own namespace).

        Without a cache of claims (a test's), every namespace is taken to have it.
        """
        return self.claims is None or self.claims.get(namespace, self.claim) is not None

    def no_claim_in(self, namespace: str) -> OutputsObservation:
        """What a job's Succeeded says where its namespace had no claim when its Pods were made."""
        return OutputsObservation(
            stored=True,
            not_collected=(
                f"namespace {namespace} has no PersistentVolumeClaim {self.claim}, the artifact store's, so its "
                f"replicas wrote to an emptyDir that went with its Pods; bind a claim named {self.claim} in "
                f"{namespace} to the artifact store's volume (docs/kubernetes.md#outputs)"
            ),
        )

    def folder(self, job: TrainingJob) -> Path:
        """Where the job's replicas write (``PHALANX_OUTPUT_DIR`` in their Pods)."""
        return self.store / outputs_sub_path(job)

    def prepare(self, job: TrainingJob) -> None:
        """Make the job's outputs folder, writable by the claim's group (before its Pods exist).

        Raises:
            OSError: the store cannot be written.
        """
        folder = self.folder(job)
        if folder.is_dir():
            return
        folder.mkdir(parents=True, exist_ok=True)
        relative = folder.relative_to(self.store)
        for made in (relative, *relative.parents[:-1]):  # the last parent is the store itself: left alone
            os.chmod(self.store / made, _FOLDER_MODE)

    def observe(self, job: TrainingJob) -> OutputsObservation:
        """What storing the job's outputs recorded, if it ran."""
        return observe_marker(self._marker(job))

    def store_outputs(self, job: TrainingJob) -> OutputsObservation:
        """Store the job's outputs to their destination, once."""
        target, refused = self.destination(job)
        return store_once(self.folder(job), target, self._marker(job), refused=refused)

    def destination(self, job: TrainingJob) -> tuple[str, str | None]:
        """Where the job's outputs go, and why they may not go there (None: they may)."""
        namespace_folder = self.store / job.metadata.namespace
        store_to = job.spec.outputs.store_to
        if not store_to:
            return str(namespace_folder / job.metadata.name), None
        if is_url(store_to):
            return store_to, None
        relative = PurePosixPath(store_to)
        if relative.is_absolute() or ".." in relative.parts or store_to.startswith("~"):
            return store_to, (
                f"outputs.storeTo: {store_to!r} is not a folder of the artifact store on Kubernetes: give a URL "
                "(s3://bucket/prefix, gs://bucket/prefix) or a relative path without '..', which is kept in the "
                f"store's folder of namespace {job.metadata.namespace}"
            )
        return str(namespace_folder / relative), None

    def _marker(self, job: TrainingJob) -> Path:
        folder = self.folder(job)
        return folder.with_name(folder.name + ".stored.json")


def mounts_outputs_claim(pod: Mapping[str, Any], claim: str) -> bool:
    """Whether the Pod's outputs volume is the claim (its replica writes where the operator stores from)."""
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if volume.get("name") == OUTPUTS_VOLUME:
            return bool((volume.get("persistentVolumeClaim") or {}).get("claimName") == claim)
    return False
