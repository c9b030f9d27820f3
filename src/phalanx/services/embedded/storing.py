"""The Storing phase on this machine: copy a job's outputs to their destination and read its final metrics.

Replicas write to ``PHALANX_OUTPUT_DIR``; a ``metrics.json`` there (a mapping of names to numbers) becomes the
job's ``status.metrics``. The result is recorded in a marker file next to the outputs, so a control plane that
restarts mid-way sees whether storing is done (level-triggered, like everything else).

Where outputs may go (docs/security.md): ``outputs.storeTo`` is any folder its owner can write, absolute or
relative to where the job was submitted, except the state directory and what is in it, bar its ``artifacts``
folder: a storeTo resolving there (symlinks followed) could overwrite the store, the tokens or another job's
files, and is refused at the door (``refused_destination``) and again when storing. Symbolic links among the
outputs are copied as links, never followed: the control plane copies what the job wrote, not what a link names.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from phalanx.core.reconcile.types import OutputsObservation
from phalanx.model.jobs import TrainingJob
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SUBMIT_DIR_ANNOTATION

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


def observe_outputs(job: TrainingJob, layout: StateLayout) -> OutputsObservation:
    """What an earlier ``store_outputs`` recorded for this job, if anything."""
    assert job.metadata.uid is not None
    marker = layout.job_dir(job.metadata.namespace, job.metadata.name, job.metadata.uid) / MARKER
    try:
        record = json.loads(marker.read_text())
    except (OSError, ValueError):
        return OutputsObservation()
    return OutputsObservation(
        stored=bool(record.get("stored")),
        location=record.get("location"),
        metrics={k: float(v) for k, v in record.get("metrics", {}).items()},
        error=record.get("error"),
    )


def store_outputs(job: TrainingJob, layout: StateLayout) -> OutputsObservation:
    """Copy outputs and collect metrics once; later calls return the recorded result."""
    done = observe_outputs(job, layout)
    if done.stored or done.error:
        return done
    assert job.metadata.uid is not None
    source = layout.job_outputs(job.metadata.namespace, job.metadata.name, job.metadata.uid, job.spec.outputs.path)
    target = destination(job, layout)
    record: dict[str, object]
    if (refused := refused_destination(target, layout)) is not None:
        record = {"stored": False, "error": f"outputs.storeTo: {refused}"}
    else:
        try:
            metrics = _read_metrics(source / "metrics.json")
            if source.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
            record = {"stored": True, "location": str(target), "metrics": metrics}
        except (OSError, ValueError) as err:
            record = {"stored": False, "error": f"could not store outputs to {target}: {err}"}
    marker = layout.job_dir(job.metadata.namespace, job.metadata.name, job.metadata.uid) / MARKER
    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(marker)
    return observe_outputs(job, layout)


def _read_metrics(path: Path) -> dict[str, float]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path.name} must hold a mapping of metric names to numbers")
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float) and not isinstance(v, bool)}
