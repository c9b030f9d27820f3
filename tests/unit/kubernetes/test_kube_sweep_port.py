"""The sweep controller's use of the Kubernetes backend: read_log (a placed Pod's log, read on), a trial's stop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phalanx.model.jobs import TrainingJob
from phalanx.model.loading import parse_documents
from phalanx.services.kubernetes.operations import (
    LOG_TAIL_LINES,
    KubeBackend,
    KubeOperations,
    stamp_key,
    stamped_lines_after,
)
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


def test_read_log_reads_the_named_replica_s_placed_pod_of_this_job() -> None:
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
    read = {replica: backend.read_log(job, replica) for replica in ("master-0", "worker-0", "worker-1", "old-0")}
    assert {replica: chunk.text if chunk else None for replica, chunk in read.items()} == {
        "master-0": "phalanx-metric step=1 loss=0.5\n",
        "worker-0": "w\n",
        "worker-1": None,  # not placed yet
        "old-0": None,  # a Pod of an earlier job of the name
    }
    # Only the one replica's Pod log is asked for.
    assert [c.name for c in api.calls if c.verb == "logs"] == ["quickstart-master-0", "quickstart-worker-0"]
    api.logs_text["quickstart-master-0"] = "old\n" * LOG_TAIL_LINES + "new\n"
    tail = backend.read_log(job, "master-0")
    assert tail is not None and tail.text.startswith("old\n") and tail.text.count("\n") == LOG_TAIL_LINES


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


def test_read_log_asks_from_the_last_line_s_second_and_returns_only_lines_not_read_before() -> None:
    api = MemoryKubeApi()
    KubeOperations(api).submit([parse_documents((REPO / "examples" / "quickstart.yaml").read_text())[0]])
    backend = KubeBackend(api)
    job = backend.get(TrainingJob, "default", "quickstart")
    assert job is not None and job.metadata.uid
    master = pod("quickstart-master-0", job.metadata.uid)
    master["metadata"]["uid"] = "pod-1"
    api.objects[("pods", "default", "quickstart-master-0")] = master
    # Two lines at each time, four times a second (memory_kube_api): a read ends among lines of one time.
    lines = [f"phalanx-metric step={i} loss=0.{i}\n" for i in range(7)]
    api.logs_text["quickstart-master-0"] = "".join(lines[:6]) + "phalanx-metric step=6 lo"
    first = backend.read_log(job, "master-0")
    assert first is not None and first.text == "".join(lines[:6]) and first.partial == "phalanx-metric step=6 lo"
    assert (first.cursor.source, first.cursor.offset) == ("pod-1", 2)  # lines 4 and 5 share 00:00:00.5
    api.logs_text["quickstart-master-0"] = "".join(lines) + "last\n"
    second = backend.read_log(job, "master-0", first.cursor)
    assert second is not None and second.text == lines[6] + "last\n" and second.partial == ""
    asked = [c.body for c in api.calls if c.verb == "logs"][-1]
    assert asked == {"sinceTime": "2026-01-01T00:00:00Z", "timestamps": True}
    third = backend.read_log(job, "master-0", second.cursor)
    assert third is not None and third.text == "" and third.cursor == second.cursor
    # The replica's Pod made again (another uid): its log is read from its start.
    master["metadata"]["uid"] = "pod-2"
    api.logs_text["quickstart-master-0"] = "again\n"
    fresh = backend.read_log(job, "master-0", third.cursor)
    assert fresh is not None and fresh.text == "again\n" and fresh.cursor.source == "pod-2"
    assert [c.body for c in api.calls if c.verb == "logs"][-1]["sinceTime"] is None
    assert backend.read_log(job, "worker-9") is None  # no such Pod (or not placed yet)


def test_log_times_sort_as_times_though_the_kubelet_drops_a_fraction_s_trailing_zeros_and_keeps_the_zone() -> None:
    times = [
        "2026-01-01T00:00:01Z",
        "2026-01-01T00:00:01.05Z",
        "2026-01-01T02:00:01.5+02:00",  # a node not on UTC: 00:00:01.5 UTC
        "2026-01-01T00:00:02Z",
        "2025-12-31T19:00:03.000000001-05:00",
    ]
    assert sorted(times, key=stamp_key) == times
    assert sorted(times) != times  # as text they do not
    assert stamp_key("2026-01-01T02:00:01.5+02:00") == "2026-01-01T00:00:01.500000000"  # its [:19] is a sinceTime
    assert stamp_key("not a time") == ""


def test_a_line_whose_time_cannot_be_read_keeps_the_time_of_the_line_before() -> None:
    text = "2026-01-01T00:00:01Z a\ngarbage b\n2026-01-01T00:00:02Z c\n"
    first = stamped_lines_after(text, "pod", None)
    assert first.text == "a\nb\nc\n" and (first.cursor.stamp, first.cursor.offset) == (
        "2026-01-01T00:00:02.000000000",
        1,
    )
    # Read again from the second 00:00:01 on: nothing is new.
    assert stamped_lines_after(text, "pod", first.cursor).text == ""
