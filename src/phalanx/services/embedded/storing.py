"""The Storing phase on this machine: copy a job's outputs to their destination and read its final metrics.

Replicas write to ``PHALANX_OUTPUT_DIR``; a ``metrics.json`` there (a mapping of names to numbers) becomes the
job's ``status.metrics``. The result is recorded in a marker file next to the outputs, so a control plane that
restarts mid-way sees whether storing is done (level-triggered, like everything else); the copy, the metrics and
the record are ``services.outputs_storing``'s, which the Kubernetes operator uses too.

Where outputs may go (docs/security.md): ``outputs.storeTo`` is any folder its owner can write, absolute or
relative to where the job was submitted, except the state directory and what is in it, bar its ``artifacts``
folder: a storeTo resolving there (symlinks followed) could overwrite the store, the tokens or another job's
files, and is refused at the door (``refused_destination``) and again when storing. Symbolic links among the
outputs are copied as links, never followed: the control plane copies what the job wrote, not what a link names.
"""

from __future__ import annotations

from pathlib import Path

from phalanx.core.reconcile.types import OutputsObservation
from phalanx.model.jobs import TrainingJob
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SUBMIT_DIR_ANNOTATION
from phalanx.services.outputs_storing import observe_marker, store_once

MARKER = "stored.json"


def destination(job: TrainingJob, layout: StateLayout) -> Path:
    """Where the job's outputs go: ``outputs.storeTo`` (relative to where it was submitted) or the default."""
    store_to = job.spec.outputs.store_to
    if not store_to:
        return layout.default_artifacts(job.metadata.namespace, job.metadata.name)
    path = Path(store_to).expanduser()
    if not path.is_absolute():
        path = Path(job.metadata.annotations.get(SUBMIT_DIR_ANNOTATION, ".")) / path
    return path


def refused_destination(target: Path, layout: StateLayout) -> str | None:
    """Why outputs may not be stored at ``target``: it resolves into the state directory, outside its artifacts."""
    resolved, root = target.resolve(), layout.root.resolve()
    if resolved != root and not resolved.is_relative_to(root):
        return None
    if resolved.is_relative_to(layout.artifacts.resolve()):
        return None
    return (
        f"{target} is in the state directory {layout.root}, which holds the store, the tokens and every job's "
        "files; store the outputs outside it, or leave storeTo out (they go to the state directory's artifacts "
        "folder)"
    )


def marker_path(job: TrainingJob, layout: StateLayout) -> Path:
    """Where the result of storing the job's outputs is recorded: next to its outputs."""
    assert job.metadata.uid is not None
    return layout.job_dir(job.metadata.namespace, job.metadata.name, job.metadata.uid) / MARKER


def observe_outputs(job: TrainingJob, layout: StateLayout) -> OutputsObservation:
    """What an earlier ``store_outputs`` recorded for this job, if anything."""
    return observe_marker(marker_path(job, layout))


def store_outputs(job: TrainingJob, layout: StateLayout) -> OutputsObservation:
    """Copy outputs and collect metrics once (``services.outputs_storing``); later calls return the record."""
    assert job.metadata.uid is not None
    source = layout.job_outputs(job.metadata.namespace, job.metadata.name, job.metadata.uid, job.spec.outputs.path)
    target = destination(job, layout)
    refused = refused_destination(target, layout)
    return store_once(
        source,
        str(target),
        marker_path(job, layout),
        refused=f"outputs.storeTo: {refused}" if refused is not None else None,
    )
