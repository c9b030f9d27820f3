"""KubeBackend.logs_of: the tail of each placed Pod's log, for the sweep controller (``ObjectReader.logs_of``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phalanx.model.jobs import TrainingJob
from phalanx.model.loading import parse_documents
from phalanx.services.kubernetes.operations import LOG_TAIL_LINES, KubeBackend, KubeOperations
from support.memory_kube_api import MemoryKubeApi

REPO = Path(__file__).resolve().parents[3]


def pod(name: str, job_uid: str, *, placed: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"phalanx.dev/job": "quickstart", "phalanx.dev/attempt": "1"},
            "annotations": {"phalanx.dev/job-uid": job_uid},
        },
        "spec": {"nodeName": "gpu-1"} if placed else {},
        "status": {"phase": "Running" if placed else "Pending"},
    }


def test_logs_of_reads_each_placed_pod_of_the_job_by_replica_name() -> None:
    api = MemoryKubeApi()
    KubeOperations(api).submit([parse_documents((REPO / "examples" / "quickstart.yaml").read_text())[0]])
    backend = KubeBackend(api)
    job = backend.get(TrainingJob, "default", "quickstart")
    assert job is not None and job.metadata.uid
    api.objects[("pods", "default", "quickstart-master-0")] = pod("quickstart-master-0", job.metadata.uid)
    api.objects[("pods", "default", "quickstart-worker-0")] = pod("quickstart-worker-0", job.metadata.uid)
    api.objects[("pods", "default", "quickstart-worker-1")] = pod("quickstart-worker-1", job.metadata.uid, placed=False)
    api.objects[("pods", "default", "quickstart-old-0")] = pod("quickstart-old-0", "an-earlier-uid")
    api.logs_text.update({"quickstart-master-0": "phalanx-metric step=1 loss=0.5\n", "quickstart-worker-0": "w\n"})
    assert backend.logs_of(job) == {"master-0": "phalanx-metric step=1 loss=0.5\n", "worker-0": "w\n"}
    assert backend.logs_of(job, "master-0") == {"master-0": "phalanx-metric step=1 loss=0.5\n"}
    # Only the one replica's Pod log is asked for when one is named.
    calls = [c for c in api.calls if c.verb == "logs"]
    assert [c.name for c in calls[-1:]] == ["quickstart-master-0"]
    api.logs_text["quickstart-master-0"] = "old\n" * LOG_TAIL_LINES + "new\n"
    assert backend.logs_of(job, "master-0")["master-0"].startswith("old\n") is True
    assert backend.logs_of(job, "master-0")["master-0"].count("\n") == LOG_TAIL_LINES
