"""The Storing phase on this machine: copy a job's outputs to their destination and read its final metrics.

Replicas write to ``PHALANX_OUTPUT_DIR``; a ``metrics.json`` there (a mapping of names to numbers) becomes the
job's ``status.metrics``. The result is recorded in a marker file next to the outputs, so a control plane that
restarts mid-way sees whether storing is done (level-triggered, like everything else).
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
    try:
        metrics = _read_metrics(source / "metrics.json")
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            shutil.copytree(source, target, dirs_exist_ok=True)
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
