"""The SchedulerConfiguration file through phalanx-scheduler --config on the real control plane.

Each test has an 8-GPU kwok node of its own (its jobs ask for a GPU model only that node has) and starts the
scheduler with a file, as the install's ConfigMap does (the first test edits the installed ConfigMap's file):
strict FIFO holds a small job behind a big waiting one, backfill lets a job bounded by activeDeadlineSeconds
pass the whole-node job and holds back one without a bound, and time slicing preempts a job that has run past
the first band for a new one. kwok's Pods run until deleted.

A creationTimestamp has whole seconds, so jobs created within one second queue by name: each test names its jobs
so that the name order is the submission order.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import k8s_testenv
from components import NAMESPACE, Components
from support.sim_jobs import gpu_job

pytestmark = pytest.mark.e2e

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
HEAD = "apiVersion: phalanx.dev/v1alpha1\nkind: SchedulerConfiguration\n"


@pytest.fixture
def gpu_model(components: Components) -> Iterator[str]:
    """A GPU model that one fresh 8-GPU node has, and no other."""
    kube = components.kube
    name, model = kube.unique("config-node"), kube.unique("A100-CONFIG")
    k8s_testenv.create_fake_gpu_nodes(kube.env, [name], product=model)
    yield model
    kube.request("DELETE", f"/api/v1/nodes/{name}")


def start(components: Components, tmp_path: Path, body: str) -> None:
    path = tmp_path / "scheduler-config.yaml"
    path.write_text(body if body.startswith(HEAD) else HEAD + body)
    components.operator()
    components.scheduler("--config", str(path))


def job(name: str, gpus: int, model: str, deadline: int | None = None) -> dict[str, Any]:
    run_policy = {"runPolicy": {"activeDeadlineSeconds": deadline}} if deadline is not None else {}
    return gpu_job(name, model, gpus=gpus, **run_policy)


def phase_of(obj: dict[str, Any]) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


def waiting(obj: dict[str, Any]) -> bool:
    return phase_of(obj) == "Queued" and (obj.get("status") or {}).get("reason") == "Waiting"


def test_strict_fifo_holds_a_small_job_behind_a_big_waiting_one(
    components: Components, namespace: str, gpu_model: str, tmp_path: Path
) -> None:
    kube = components.kube
    # The installed ConfigMap's file, edited as an administrator would (kubectl edit, then a rollout restart).
    installed = kube.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/phalanx-scheduler-config")
    text = installed["data"]["scheduler-config.yaml"]
    assert "queueingStrategy: best-effort-fifo\n" in text
    start(components, tmp_path, text.replace("best-effort-fifo", "strict-fifo"))
    jobs = JOBS.format(ns=namespace)
    kube.create(jobs, job("running", 6, gpu_model))
    kube.wait_for(f"{jobs}/running", lambda obj: phase_of(obj) == "Running", 60, "running to run")
    kube.create(jobs, job("big", 4, gpu_model))
    kube.wait_for(f"{jobs}/big", waiting, 60, "big to wait")
    kube.create(jobs, job("small", 1, gpu_model))
    small = kube.wait_for(f"{jobs}/small", waiting, 60, "small to wait")
    expected = f"waits behind {namespace}/big, first in line, which cannot start yet (strict FIFO)"
    assert small["status"]["message"] == expected, small["status"]["message"]

    kube.request("DELETE", f"{jobs}/running")
    kube.wait_for(f"{jobs}/big", lambda obj: phase_of(obj) == "Running", 60, "big to run once running is gone")
    kube.wait_for(f"{jobs}/small", lambda obj: phase_of(obj) == "Running", 60, "small to run after big")


def test_backfill_lets_a_bounded_job_pass_and_holds_back_an_unbounded_one(
    components: Components, namespace: str, gpu_model: str, tmp_path: Path
) -> None:
    kube = components.kube
    start(components, tmp_path, "queueingStrategy: backfill\n")
    jobs = JOBS.format(ns=namespace)
    kube.create(jobs, job("running", 6, gpu_model, deadline=300))
    kube.wait_for(f"{jobs}/running", lambda obj: phase_of(obj) == "Running", 60, "running to run")
    kube.create(jobs, job("head", 8, gpu_model))
    kube.wait_for(f"{jobs}/head", waiting, 60, "head to wait")
    kube.create(jobs, job("unbounded", 2, gpu_model))
    decided = kube.wait_for(
        f"{jobs}/unbounded", lambda obj: waiting(obj) or phase_of(obj) not in ("", "Pending", "Queued"), 60, "unbounded"
    )
    head = kube.get(f"{jobs}/head")["status"]
    assert waiting(decided), f"unbounded passed: {decided['status']}; head: {head}"
    held = decided["status"]["message"]
    assert held.startswith(f"the room it fits in is reserved for {namespace}/head, first in line"), held
    assert held.endswith("this job has no duration estimate"), held
    kube.create(jobs, job("short", 2, gpu_model, deadline=60))
    kube.wait_for(f"{jobs}/short", lambda obj: phase_of(obj) == "Running", 60, "short to pass")
    assert phase_of(kube.get(f"{jobs}/unbounded")) == "Queued"


def test_time_slicing_preempts_a_long_running_job_for_a_new_one(
    components: Components, namespace: str, gpu_model: str, tmp_path: Path
) -> None:
    kube = components.kube
    # One band limit of 2 GPU-seconds: an 8-GPU job drops below the top band after a quarter of a second.
    start(components, tmp_path, "queueOrder: least-attained-service\ntimeSlicing: {enabled: true, thresholds: [2]}\n")
    jobs = JOBS.format(ns=namespace)
    kube.create(jobs, job("long", 8, gpu_model))
    kube.wait_for(f"{jobs}/long", lambda obj: phase_of(obj) == "Running", 60, "long to run")
    kube.create(jobs, job("new", 8, gpu_model))
    victim = kube.wait_for(
        f"{jobs}/long",
        lambda obj: any(c["type"] == "Preempted" for c in (obj.get("status") or {}).get("conditions") or []),
        60,
        "long to be preempted by band",
    )
    [preempted] = [c for c in victim["status"]["conditions"] if c["type"] == "Preempted"]
    assert f"band 1, below {namespace}/new's band 0" in preempted["message"], preempted
    kube.wait_for(f"{jobs}/new", lambda obj: phase_of(obj) == "Running", 60, "new to run")
    # The preempted job waits: it ranks below the new one by the service it attained, and cannot preempt it.
    long = kube.wait_for(f"{jobs}/long", waiting, 60, "long to wait again")
    assert long["status"]["attempt"] == 1
    assert phase_of(kube.get(f"{jobs}/new")) == "Running"
