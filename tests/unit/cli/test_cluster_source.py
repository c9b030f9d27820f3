"""Following a job on a cluster: the job from the API server, Pod logs mirrored into files the follower tails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phalanx.entrypoints.cli.cluster import ClusterJobSource
from phalanx.entrypoints.cli.follow import LogTailer
from phalanx.services.kubernetes.operations import ReplicaLog


class FakeOps:
    def __init__(self) -> None:
        self.versions = ["1"]
        self.pods: list[dict[str, Any]] = []
        self.texts: dict[str, str] = {}
        self.errors: dict[str, str] = {}
        self.fetched: list[str] = []

    def job_object(self, namespace: str, name: str) -> dict[str, Any]:
        version = self.versions.pop(0) if len(self.versions) > 1 else self.versions[0]
        return {"metadata": {"name": name, "uid": "u1", "resourceVersion": version}, "status": {"phase": "Running"}}

    def job_pods(self, namespace: str, name: str, uid: str | None) -> list[dict[str, Any]]:
        assert uid == "u1"
        return self.pods

    def pod_log(self, pod: dict[str, Any], short: str) -> ReplicaLog:
        name = pod["metadata"]["name"]
        self.fetched.append(name)
        return ReplicaLog(short, name, 0, pod["status"]["phase"], self.texts.get(name, ""), self.errors.get(name, ""))


def pod(name: str, phase: str = "Running", attempt: int = 0) -> dict[str, Any]:
    labels = {"phalanx.dev/attempt": str(attempt)}
    return {"metadata": {"name": name, "uid": f"{name}-{attempt}", "labels": labels}, "status": {"phase": phase}}


@pytest.fixture
def ops() -> FakeOps:
    return FakeOps()


def test_the_job_comes_back_as_soon_as_its_version_changes(ops: FakeOps, tmp_path: Path) -> None:
    source = ClusterJobSource(ops, "ns", "j", tmp_path, min_poll=0.01)  # type: ignore[arg-type]
    assert source.job(after="", wait=5)["metadata"]["resourceVersion"] == "1"
    ops.versions = ["1", "1", "2"]
    assert source.job(after="1", wait=5)["metadata"]["resourceVersion"] == "2"
    assert source.job(after="2", wait=0.05)["metadata"]["resourceVersion"] == "2"  # unchanged: after the wait


def test_logs_are_mirrored_per_pod_and_attempt_and_tailed_line_by_line(ops: FakeOps, tmp_path: Path) -> None:
    source = ClusterJobSource(ops, "ns", "j", tmp_path, uid="u1", log_every=0)  # type: ignore[arg-type]
    tailer = LogTailer()
    ops.pods = [pod("j-worker-0")]
    ops.texts["j-worker-0"] = "step 1\nstep"
    assert tailer.read(source.log_files()) == [("worker-0", "step 1")]
    ops.texts["j-worker-0"] = "step 1\nstep 2\n"
    assert tailer.read(source.log_files()) == [("worker-0", "step 2")]
    # The next attempt is a new Pod of the same name: its log starts again from its first line.
    ops.pods = [pod("j-worker-0", attempt=1)]
    ops.texts["j-worker-0"] = "again\n"
    assert tailer.read(source.log_files()) == [("worker-0", "again")]


def test_a_finished_pods_log_is_read_once_more_then_no_longer(ops: FakeOps, tmp_path: Path) -> None:
    source = ClusterJobSource(ops, "ns", "j", tmp_path, uid="u1")  # type: ignore[arg-type]
    ops.pods = [pod("j-master-0", "Succeeded")]
    ops.texts["j-master-0"] = "done\n"
    for _ in range(3):
        files = source.log_files()
    assert ops.fetched == ["j-master-0"]
    assert [(short, path.read_text()) for short, path in files] == [("master-0", "done\n")]


def test_an_unreadable_log_is_said_once_and_asked_again_only_after_a_while(
    ops: FakeOps, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = ClusterJobSource(ops, "ns", "j", tmp_path, uid="u1")  # type: ignore[arg-type]
    ops.pods = [pod("j-master-0"), pod("j-worker-0")]
    ops.errors = {"j-master-0": "no kubelet", "j-worker-0": "no kubelet"}
    for _ in range(3):
        assert LogTailer().read(source.log_files()) == []
    assert ops.fetched == ["j-master-0", "j-worker-0"]
    assert capsys.readouterr().err.count("no kubelet") == 1


def test_a_running_pods_log_that_could_not_be_read_is_read_once_the_kubelet_answers(
    ops: FakeOps, tmp_path: Path
) -> None:
    """Found by `phalanx run` on a cluster: one failed read of a running Pod lost its log for good."""
    source = ClusterJobSource(ops, "ns", "j", tmp_path, uid="u1", log_every=0)  # type: ignore[arg-type]
    tailer = LogTailer()
    ops.pods = [pod("j-worker-0")]
    ops.errors = {"j-worker-0": "the kubelet did not answer"}
    assert tailer.read(source.log_files()) == []
    del ops.errors["j-worker-0"]
    ops.texts["j-worker-0"] = "step 1\n"
    assert tailer.read(source.log_files()) == [("worker-0", "step 1")]


def test_a_finished_pods_log_that_cannot_be_read_is_not_asked_again(ops: FakeOps, tmp_path: Path) -> None:
    source = ClusterJobSource(ops, "ns", "j", tmp_path, uid="u1", log_every=0)  # type: ignore[arg-type]
    ops.pods = [pod("j-worker-0", "Failed")]
    ops.errors = {"j-worker-0": "gone with its node"}
    for _ in range(3):
        source.log_files()
    assert ops.fetched == ["j-worker-0"]


def test_a_running_pods_log_is_fetched_again_only_after_a_while(ops: FakeOps, tmp_path: Path) -> None:
    source = ClusterJobSource(ops, "ns", "j", tmp_path, uid="u1", log_every=60)  # type: ignore[arg-type]
    ops.pods = [pod("j-worker-0")]
    for _ in range(3):
        source.log_files()
    assert ops.fetched == ["j-worker-0"]
    ops.pods = [pod("j-worker-0", "Succeeded")]  # finished: its last lines are fetched at once
    source.log_files()
    assert ops.fetched == ["j-worker-0", "j-worker-0"]
