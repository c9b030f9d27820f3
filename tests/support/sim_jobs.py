"""TrainingJobs as the end-to-end tests POST them: one ``worker`` role of GPU replicas that kwok runs.

The replicas never start a process: the ``phalanx.dev/sim-*`` annotations tell the kwok stages how long a Pod
runs (``sim-hang``: until deleted), so a test controls when the GPUs come free.
"""

from __future__ import annotations

from typing import Any


def gpu_job(
    name: str,
    model: str,
    *,
    workers: int = 1,
    gpus: int = 1,
    jobtype: str = "generic",
    cpu: str = "1",
    memory: str = "1Gi",
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A job of ``workers`` replicas of ``gpus`` GPUs of ``model`` each; ``spec`` adds fields (datasets, scheduling).

    ``annotations`` go on every replica's template (default: run until deleted).
    """
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "type": jobtype,
            **spec,
            "replicas": {
                "worker": {
                    "count": workers,
                    "template": {
                        "image": "example.org/trainer:1",
                        "command": ["python", "train.py"],
                        "metadata": {"annotations": annotations or {"phalanx.dev/sim-hang": "true"}},
                        "resources": {"cpu": cpu, "memory": memory, "gpu": gpus, "gpuModel": model},
                    },
                }
            },
        },
    }
