"""The sweep controller's use of the Kubernetes backend: logs_of (placed Pods' logs) and a trial's stop (one write)."""

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


def test_stopping_a_trial_marks_and_halts_its_job_in_one_write() -> None:
    from phalanx.core.sweeps.trials import STOPPED_ANNOTATION
    from phalanx.model.base import validated_copy

    api = MemoryKubeApi()
    KubeOperations(api).submit([parse_documents((REPO / "examples" / "quickstart.yaml").read_text())[0]])
    backend = KubeBackend(api)
    job = backend.get(TrainingJob, "default", "quickstart")
    assert job is not None
    spec = validated_copy(job.spec, run_policy=validated_copy(job.spec.run_policy, suspend=True))
    annotations = {**job.metadata.annotations, STOPPED_ANNOTATION: "trial 1 stopped: the median rule"}
    backend.replace(validated_copy(job, spec=spec, metadata=validated_copy(job.metadata, annotations=annotations)))
    stored = api.objects[("trainingjobs", "default", "quickstart")]
    assert stored["spec"]["runPolicy"]["suspend"] is True
    assert stored["metadata"]["annotations"][STOPPED_ANNOTATION] == "trial 1 stopped: the median rule"
    assert [c.verb for c in api.calls if c.plural == "trainingjobs" and c.verb in ("replace", "patch")] == ["replace"]
