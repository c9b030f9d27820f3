"""phalanx-scheduler on a real control plane: gangs bound together, reasons for waiting, one leader, kill -9.

The operator and the scheduler run as real processes under their ServiceAccounts (``components``); the nodes
are kwok's, 8 fake GPUs each; replicas run and finish through tests/e2e/stages.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import k8s_testenv
from components import Components
from support.sim_jobs import gpu_job
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"


def job(
    name: str, workers: int, gpus: int, model: str, *, duration_ms: int = 300, hang: bool = False
) -> dict[str, Any]:
    annotations = {"phalanx.dev/sim-duration-ms": str(duration_ms)}
    if hang:
        annotations["phalanx.dev/sim-hang"] = "true"
    return gpu_job(
        name, model, workers=workers, gpus=gpus, jobtype="pytorch", cpu="2", memory="4Gi", annotations=annotations
    )


def pods_of(kube: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    return kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=phalanx.dev/job={name}")["items"]


def phase_of(kube: Any, namespace: str, name: str) -> str:
    return str(kube.get(f"{JOBS.format(ns=namespace)}/{name}").get("status", {}).get("phase", ""))


@pytest.fixture
def gpu_nodes(components: Components) -> Iterator[tuple[list[str], str]]:
    """Two fresh 8-GPU nodes with a GPU model of their own, so this test's jobs (which ask for it) land only there."""
    kube = components.kube
    names = [kube.unique("sched-gpu"), kube.unique("sched-gpu")]
    model = kube.unique("TEST-GPU")
    k8s_testenv.create_fake_gpu_nodes(kube.env, names, product=model)
    yield names, model
    for name in names:
        kube.request("DELETE", f"/api/v1/nodes/{name}")


def test_a_gang_is_bound_together_and_a_job_that_does_not_fit_says_why(
    components: Components, namespace: str, gpu_nodes: tuple[list[str], str]
) -> None:
    kube = components.kube
    nodes, model = gpu_nodes
    components.operator()
    components.scheduler("--lease-duration", "4")
    # 4 x 4 GPUs fills this test's two nodes exactly.
    big = job("big", workers=4, gpus=4, model=model, hang=True)
    kube.create(JOBS.format(ns=namespace), big)
    pods = wait_until(
        lambda: (
            (p := pods_of(kube, namespace, "big")) and all(x["spec"].get("nodeName") for x in p) and len(p) == 4 and p
        ),
        60,
        "all four pods of the gang bound",
    )
    assert {p["spec"]["nodeName"] for p in pods} <= set(nodes)
    devices = Counter((p["spec"]["nodeName"], p["metadata"]["annotations"].get("phalanx.dev/gpus")) for p in pods)
    assert all(count == 1 for count in devices.values()), f"two pods got the same GPUs: {devices}"

    waiting = job("waits", workers=2, gpus=8, model=model)
    kube.create(JOBS.format(ns=namespace), waiting)
    status = kube.wait_for(
        f"{JOBS.format(ns=namespace)}/waits",
        lambda obj: obj.get("status", {}).get("reason") == "Waiting",
        message="the second job waits with a reason",
    )["status"]
    assert status["phase"] == "Queued"
    assert "GPU" in status["message"], status["message"]
    assert pods_of(kube, namespace, "waits") == [], "a job that does not fit must have no pods at all"

    kube.request("DELETE", f"{JOBS.format(ns=namespace)}/big")
    kube.wait_for(
        f"{JOBS.format(ns=namespace)}/waits",
        lambda obj: obj.get("status", {}).get("phase") == "Succeeded",
        timeout=90,
        message="the waiting job runs once the first is gone",
    )


def test_a_standby_scheduler_waits_for_the_lease_and_takes_over_after_kill_9(
    components: Components, namespace: str, gpu_nodes: tuple[list[str], str]
) -> None:
    kube = components.kube
    _, model = gpu_nodes
    components.operator()
    # Long enough that a loaded machine cannot make the leader miss its renewals by accident.
    leader = components.scheduler("--lease-duration", "6")
    lease_path = "/apis/coordination.k8s.io/v1/namespaces/phalanx-system/leases/phalanx-scheduler"
    kube.wait_for(
        lease_path,
        lambda lease: lease["spec"].get("holderIdentity") == leader.argv[leader.argv.index("--identity") + 1],
        message="the first scheduler holds the lease",
    )
    standby = components.scheduler("--lease-duration", "6")
    standby_id = standby.argv[standby.argv.index("--identity") + 1]
    kube.create(JOBS.format(ns=namespace), job("first", workers=1, gpus=1, model=model))
    kube.wait_for(f"{JOBS.format(ns=namespace)}/first", lambda o: o.get("status", {}).get("phase") == "Succeeded", 60)
    events = kube.get(f"/api/v1/namespaces/{namespace}/events")["items"]
    scheduled = [e["message"] for e in events if e["reason"] == "Scheduled"]
    assert scheduled and all(standby_id not in message for message in scheduled), scheduled

    leader.kill()
    kube.create(JOBS.format(ns=namespace), job("second", workers=2, gpus=2, model=model))
    kube.wait_for(lease_path, lambda lease: lease["spec"].get("holderIdentity") == standby_id, 30, "standby leads")
    kube.wait_for(f"{JOBS.format(ns=namespace)}/second", lambda o: o.get("status", {}).get("phase") == "Succeeded", 60)


def test_kill_9_of_operator_and_scheduler_mid_run_leaves_no_duplicate_pods_and_every_job_finishes(
    components: Components, namespace: str, gpu_nodes: tuple[list[str], str]
) -> None:
    kube = components.kube
    _, model = gpu_nodes
    operator = components.operator()
    scheduler = components.scheduler("--lease-duration", "2")
    created: Counter[tuple[str, str]] = Counter()
    stop = threading.Event()
    resource_version = kube.get(f"/api/v1/namespaces/{namespace}/pods")["metadata"]["resourceVersion"]

    def watch_pods() -> None:
        # Every ADDED pod, named with its attempt: the same (name, attempt) twice is a duplicate replica.
        params = {"watch": "true", "resourceVersion": resource_version, "timeoutSeconds": "120"}
        try:
            with kube.http.stream("GET", f"/api/v1/namespaces/{namespace}/pods", params=params, timeout=None) as stream:
                for line in stream.iter_lines():
                    if stop.is_set():
                        return
                    event = json.loads(line)
                    if event["type"] == "ADDED":
                        meta = event["object"]["metadata"]
                        created[(meta["name"], meta["labels"].get("phalanx.dev/attempt", "?"))] += 1
        except httpx.HTTPError:
            return  # the control plane went away at the end of the session

    watcher = threading.Thread(target=watch_pods, daemon=True)
    watcher.start()
    names = [f"job-{i}" for i in range(6)]
    for i, name in enumerate(names):
        kube.create(
            JOBS.format(ns=namespace), job(name, workers=2, gpus=2 + (i % 3) * 2, model=model, duration_ms=1500)
        )
    for round_ in range(3):
        enough = round_ * 2
        wait_until(lambda enough=enough: sum(len(pods_of(kube, namespace, n)) for n in names) > enough, 60, "progress")
        operator.kill()
        scheduler.kill()
        operator.start()
        scheduler.start()
    for name in names:
        kube.wait_for(
            f"{JOBS.format(ns=namespace)}/{name}",
            lambda o: o.get("status", {}).get("phase") == "Succeeded",
            timeout=120,
            message=f"{name} finishes after the kills",
        )
    stop.set()
    duplicates = {key: count for key, count in created.items() if count > 1}
    assert not duplicates, f"pods created twice: {duplicates}"
    assert created, "the watch saw no pods at all"
