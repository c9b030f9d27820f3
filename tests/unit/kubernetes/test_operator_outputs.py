"""Outputs on Kubernetes without a cluster: the operator's Pods write to the artifact store's claim, and Storing
stores from there (``services.kubernetes.outputs``), on the in-memory API with a real store directory.

The test writes the files a replica would write where its Pod mounts them: the claim's ``subPath`` under the
store directory, which is the claim's root in the operator (the e2e tier does the same against a real API server).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from test_operator_loop import NS, Harness, pytorch

from phalanx.adapters.kubernetes.api import PERSISTENTVOLUMECLAIMS, PODS
from phalanx.adapters.kubernetes.objects import job_from_object
from phalanx.model.loading import builtin_jobtypes
from phalanx.services.kubernetes.flows import FlowSettings

CLAIM = "artifacts"


def with_store(tmp_path: Path, *, claim_in_namespace: bool = True) -> Harness:
    store = str(tmp_path / "store")
    flows = FlowSettings(state_dir=tmp_path / "state", artifact_store=store, artifact_volume_claim=CLAIM)
    harness = Harness(flows=flows)
    if claim_in_namespace:
        claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM, "namespace": NS}}
        outputs = harness.operator.outputs
        assert outputs is not None and outputs.claims is not None
        harness.feed(outputs.claims, harness.api.create(PERSISTENTVOLUMECLAIMS, claim))
    return harness


def run_to_the_end(harness: Harness, name: str, spec: dict[str, Any], write: dict[str, str]) -> dict[str, Any]:
    """Submit, admit, start; write ``write`` where the Pods' outputs volume is, then succeed every Pod."""
    harness.submit(name, spec)
    harness.sync()
    harness.admit(name)
    harness.sync()
    pods = [pod for pod in harness.api.of(PODS) if pod["metadata"]["name"].startswith(f"{name}-")]
    assert pods, "the job's Pods exist"
    for pod in pods:
        harness.set_pod_phase(pod["metadata"]["name"], "Running")
    harness.sync()
    folder = outputs_folder(harness, pods[0])
    for relative, text in write.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    for pod in pods:
        harness.set_pod_phase(pod["metadata"]["name"], "Succeeded", exit_code=0)
    for _ in range(5):
        harness.sync()
        if harness.job(name)["status"]["phase"] in ("Succeeded", "Failed"):
            break
    return dict(harness.job(name)["status"])


def outputs_folder(harness: Harness, pod: dict[str, Any]) -> Path:
    """Where the Pod's container writes its outputs: the claim's subPath, under the store the operator mounts."""
    [mount] = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "outputs"]
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "outputs"]
    assert volume == {"name": "outputs", "persistentVolumeClaim": {"claimName": CLAIM}}
    assert mount["mountPath"] == "/phalanx/outputs"
    flows = harness.operator.settings.flows
    assert flows is not None
    return Path(flows.artifacts_url) / mount["subPath"]


def test_the_replicas_write_to_the_claim_and_storing_keeps_their_files_and_metrics(tmp_path: Path) -> None:
    harness = with_store(tmp_path)
    status = run_to_the_end(
        harness, "ddp", pytorch(), {"model.pt": "weights", "metrics.json": json.dumps({"loss": 0.25, "note": "x"})}
    )
    stored = tmp_path / "store" / NS / "ddp"
    assert status["phase"] == "Succeeded", status
    assert status["message"] == f"outputs stored at {stored}"
    assert status["artifacts"] == str(stored)
    assert status["metrics"] == {"loss": 0.25}
    assert (stored / "model.pt").read_text() == "weights"
    pods = harness.api.of(PODS)
    assert {outputs_folder(harness, pod) for pod in pods} == {outputs_folder(harness, pods[0])}, "one shared folder"


def test_the_outputs_folder_exists_for_the_claims_group_before_any_pod(tmp_path: Path) -> None:
    harness = with_store(tmp_path)
    harness.submit("ddp", pytorch())
    harness.sync()
    harness.admit("ddp")
    harness.sync()
    folder = outputs_folder(harness, harness.api.of(PODS)[0])
    mode = stat.S_IMODE(folder.stat().st_mode)
    assert folder.is_dir() and mode & 0o070 == 0o070 and mode & stat.S_ISGID, oct(mode)
    assert folder.name == harness.job("ddp")["metadata"]["uid"], "one folder per job uid: a new job starts empty"


def test_store_to_a_url_copies_the_outputs_there(tmp_path: Path) -> None:
    harness = with_store(tmp_path)
    target = tmp_path / "elsewhere" / "run-1"
    spec = {**pytorch(workers=1), "outputs": {"storeTo": f"file://{target}"}}
    status = run_to_the_end(harness, "solo", spec, {"sub/a.txt": "A"})
    assert status["phase"] == "Succeeded", status
    assert status["artifacts"] == f"file://{target}"
    assert (target / "sub" / "a.txt").read_text() == "A"


def test_store_to_a_relative_path_stays_in_the_namespaces_folder(tmp_path: Path) -> None:
    harness = with_store(tmp_path)
    spec = {**pytorch(workers=1), "outputs": {"storeTo": "experiments/7"}}
    status = run_to_the_end(harness, "solo", spec, {"a.txt": "A"})
    assert status["artifacts"] == str(tmp_path / "store" / NS / "experiments" / "7")
    assert (tmp_path / "store" / NS / "experiments" / "7" / "a.txt").read_text() == "A"


@pytest.mark.parametrize("store_to", ["../other-team/x", "/etc/phalanx", "~/x"])
def test_store_to_outside_the_namespaces_folder_fails_storing_naming_the_field(tmp_path: Path, store_to: str) -> None:
    harness = with_store(tmp_path)
    spec = {**pytorch(workers=1), "outputs": {"storeTo": store_to}}
    status = run_to_the_end(harness, "solo", spec, {"a.txt": "A"})
    assert status["phase"] == "Failed", status
    assert status["reason"] == "StoringFailed"
    assert "outputs.storeTo" in status["message"] and "relative path without '..'" in status["message"]
    assert not (tmp_path / "other-team").exists()


def test_a_restarted_operator_reads_the_record_and_copies_nothing_again(tmp_path: Path) -> None:
    harness = with_store(tmp_path)
    status = run_to_the_end(harness, "solo", pytorch(workers=1), {"a.txt": "A"})
    assert status["phase"] == "Succeeded"
    stored = tmp_path / "store" / NS / "solo" / "a.txt"
    stored.write_text("changed after storing")
    job = harness.job("solo")
    again = Harness(harness.api, flows=harness.operator.settings.flows)
    outputs = again.operator.outputs
    assert outputs is not None

    parsed = job_from_object(job, builtin_jobtypes())
    assert outputs.store_outputs(parsed).location == str(stored.parent)
    assert stored.read_text() == "changed after storing", "storing is done once: its record says so"


def run_with_an_empty_dir(harness: Harness, **spec: Any) -> dict[str, Any]:
    """Run a one-replica job whose Pod writes its outputs to an emptyDir (not a claim it would wait for)."""
    harness.submit("solo", {**pytorch(workers=1), **spec})
    harness.sync()
    harness.admit("solo")
    harness.sync()
    [pod] = harness.api.of(PODS)
    assert {"name": "outputs", "emptyDir": {}} in pod["spec"]["volumes"]
    harness.set_pod_phase("solo-worker-0", "Running")
    harness.sync()
    harness.set_pod_phase("solo-worker-0", "Succeeded", exit_code=0)
    harness.sync()
    return dict(harness.job("solo")["status"])


def test_without_a_claim_the_job_succeeds_saying_its_outputs_were_not_stored() -> None:
    harness = Harness()
    status = run_with_an_empty_dir(harness)
    assert status["phase"] == "Succeeded"
    assert status["message"].startswith("outputs not stored: the operator has no artifact store on a")
    assert "--artifact-volume-claim" in status["message"]
    assert not status.get("artifacts")


def test_a_namespace_without_the_claim_gets_an_empty_dir_and_is_told_how_to_bind_one(tmp_path: Path) -> None:
    harness = with_store(tmp_path, claim_in_namespace=False)
    status = run_with_an_empty_dir(harness)
    assert status["phase"] == "Succeeded"
    assert status["message"].startswith(f"outputs not stored: namespace {NS} has no PersistentVolumeClaim {CLAIM}")
    assert not (tmp_path / "store" / "_outputs").exists()


def test_a_store_to_not_stored_for_want_of_a_claim_in_its_namespace_says_that_reason(tmp_path: Path) -> None:
    harness = with_store(tmp_path, claim_in_namespace=False)
    run_with_an_empty_dir(harness, outputs={"storeTo": "s3://bucket/run"})
    [said] = [message for reason, message in harness.events() if reason == "OutputsNotCollected"]
    assert said.startswith(
        f"outputs.storeTo (s3://bucket/run) is not stored: namespace {NS} has no PersistentVolumeClaim"
    )
