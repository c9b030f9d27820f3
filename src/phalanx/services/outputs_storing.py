"""Storing a job's outputs, once, for both backends: copy the folder its replicas wrote, read its metrics, record it.

The embedded runtime (``services.embedded.storing``) and the Kubernetes operator (``services.kubernetes.outputs``)
each decide where a job's outputs are (``source``), where they go (``target``) and where the record of it is kept
(``marker``); what happens then is this module's, written once:

- ``metrics.json`` in the outputs (a mapping of names to numbers) becomes the job's ``status.metrics``;
- the folder is copied to the target: a local folder (``shutil.copytree``, symbolic links copied as links, never
  followed: the control plane copies what the job wrote, not what a link names), or an fsspec URL such as
  ``s3://bucket/prefix`` (``adapters.artifacts.upload_folder``: the ``data`` extra, plus ``s3``/``gcs`` for those
  schemes; links are left out there);
- the result (stored, or the error) is written to the marker whole (aside, then renamed), so a control plane that
  restarts mid-way sees whether storing is done: level-triggered, like everything else. A marker that says
  stored or failed is final; storing again returns it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from phalanx.adapters.artifacts.store import ArtifactStoreError, upload_folder
from phalanx.core.reconcile.types import OutputsObservation

#: The file in a job's outputs whose numbers become its ``status.metrics``.
METRICS_FILE = "metrics.json"


def is_url(target: str) -> bool:
    """Whether a destination is an fsspec URL (``scheme://...``) rather than a local folder."""
    return "://" in target


def observe_marker(marker: Path) -> OutputsObservation:
    """What an earlier ``store_once`` recorded in ``marker``; not stored when there is no record yet."""
    try:
        record = json.loads(marker.read_text())
    except (OSError, ValueError):
        return OutputsObservation()
    return OutputsObservation(
        stored=bool(record.get("stored")),
        location=record.get("location"),
        metrics={str(k): float(v) for k, v in (record.get("metrics") or {}).items()},
        error=record.get("error"),
    )


def store_once(source: Path, target: str, marker: Path, *, refused: str | None = None) -> OutputsObservation:
    """Copy ``source`` to ``target`` and collect its metrics, once; later calls return what the marker says.

    Args:
        source: the folder the replicas wrote (it may not exist: a job that wrote nothing stores nothing).
        target: a local folder or an fsspec URL.
        marker: the file the result is recorded in.
        refused: why the target may not be used (naming the field and the fix); recorded as the error.
    """
    done = observe_marker(marker)
    if done.stored or done.error:
        return done
    record: dict[str, object]
    if refused is not None:
        record = {"stored": False, "error": refused}
    else:
        try:
            metrics = read_metrics(source / METRICS_FILE)
            if source.is_dir():
                _copy(source, target)
            record = {"stored": True, "location": target, "metrics": metrics}
        except (OSError, ValueError, ArtifactStoreError) as err:
            record = {"stored": False, "error": f"could not store outputs to {target}: {err}"}
    marker.parent.mkdir(parents=True, exist_ok=True)
    aside = marker.with_name(marker.name + ".tmp")
    aside.write_text(json.dumps(record))
    aside.replace(marker)
    return observe_marker(marker)


def read_metrics(path: Path) -> dict[str, float]:
    """The numbers of a ``metrics.json`` (others are left out); none when there is no such file.

    Raises:
        ValueError: the file is not JSON, or not a mapping.
    """
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path.name} must hold a mapping of metric names to numbers")
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def _copy(source: Path, target: str) -> None:
    if is_url(target):
        upload_folder(source, target)
        return
    Path(target).mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
