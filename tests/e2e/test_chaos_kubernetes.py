"""Chaos on a real control plane: gangs run while the operator and phalanx-scheduler are SIGKILLed at random.

Twelve jobs (gangs of 2 to 4 replicas, one to four GPUs each, 1 to 3 s of simulated work) run on two kwok nodes of
a GPU model of this test's own, while, at seeded moments, the operator, the scheduler or both are SIGKILLed and
started again, ten times. A watch of the namespace's Pods records every Pod created and every binding. Checked
when every job has ended: every job Succeeded; no replica attempt was created twice; no Pod was bound twice or
moved; and no gang was bound in part: for each job and attempt, every Pod that was ever created was bound. Not in
this run (yet): a kube-apiserver restart, a node going NotReady, a GPU turning unhealthy (docs/reliability.md).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import defaultdict
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
SEED = 19
KILLS = 10


@pytest.fixture
def gpu_nodes(components: Components) -> Iterator[str]:
    kube = components.kube
    names = [kube.unique("chaos-gpu"), kube.unique("chaos-gpu")]
    model = kube.unique("CHAOS-GPU")
    k8s_testenv.create_fake_gpu_nodes(kube.env, names, product=model)
    yield model
    for name in names:
        kube.request("DELETE", f"/api/v1/nodes/{name}")


class PodLedger:
    """What a watch of the namespace's Pods saw: each Pod created (by uid) and each node it was bound to."""

    def __init__(self, kube: Any, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.created: dict[str, tuple[str, str, str]] = {}  # uid -> (job, pod name, attempt)
        self.nodes: dict[str, list[str]] = defaultdict(list)  # uid -> the nodeNames seen, in order, deduplicated
        self.stop = threading.Event()
        self.version = kube.get(f"/api/v1/namespaces/{namespace}/pods")["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        params = {"watch": "true", "resourceVersion": self.version, "timeoutSeconds": "300"}
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        try:
            with self.kube.http.stream("GET", path, params=params, timeout=None) as stream:
                for line in stream.iter_lines():
                    if self.stop.is_set():
                        return
                    event = json.loads(line)
                    pod = event["object"]
                    meta, uid = pod["metadata"], pod["metadata"].get("uid", "")
                    labels = meta.get("labels") or {}
                    if event["type"] == "ADDED":
                        self.created[uid] = (
                            labels.get("phalanx.dev/job", "?"),
                            meta["name"],
                            labels.get("phalanx.dev/attempt", "?"),
                        )
                    node = (pod.get("spec") or {}).get("nodeName")
                    if node and (not self.nodes[uid] or self.nodes[uid][-1] != node):
                        self.nodes[uid].append(node)
        except httpx.HTTPError:
            return  # the session's control plane went away


def test_gangs_run_to_the_end_through_random_kills_of_operator_and_scheduler(
    components: Components, namespace: str, gpu_nodes: str
) -> None:
    kube, model = components.kube, gpu_nodes
    rng = random.Random(SEED)
    operator = components.operator()
    scheduler = components.scheduler("--lease-duration", "2")
    ledger = PodLedger(kube, namespace)
    names = []
    for number in range(12):
        name = f"chaos-{number:02d}"
        document = gpu_job(
            name,
            model,
            workers=rng.randint(2, 4),
            gpus=rng.randint(1, 4),
            jobtype="pytorch",
            cpu="2",
            memory="4Gi",
            annotations={"phalanx.dev/sim-duration-ms": str(rng.randint(1000, 3000))},
        )
        kube.create(JOBS.format(ns=namespace), document)
        names.append(name)
    victims = {"operator": [operator], "scheduler": [scheduler], "both": [operator, scheduler]}
    killed: list[str] = []
    for _ in range(KILLS):
        wait_until(lambda: ledger.created, 60, "the first Pods")
        time.sleep(rng.uniform(0.3, 1.5))  # a seeded moment to strike, not a wait for something to happen
        which = rng.choice(sorted(victims))
        for component in victims[which]:
            component.kill()
        for component in victims[which]:
            component.start()
        killed.append(which)
    for name in names:
        kube.wait_for(
            f"{JOBS.format(ns=namespace)}/{name}",
            lambda obj: obj.get("status", {}).get("phase") in ("Succeeded", "Failed"),
            timeout=240,
            message=f"{name} to end after {len(killed)} kills ({', '.join(killed)})",
        )
    phases = {name: kube.get(f"{JOBS.format(ns=namespace)}/{name}")["status"]["phase"] for name in names}
    assert set(phases.values()) == {"Succeeded"}, phases
    ledger.stop.set()

    replicas = [(job, pod, attempt) for job, pod, attempt in ledger.created.values()]
    assert replicas, "the watch saw no Pods"
    twice = {replica for replica in replicas if replicas.count(replica) > 1}
    assert not twice, f"replica attempts created twice: {sorted(twice)}"
    moved = {ledger.created[uid][1]: nodes for uid, nodes in ledger.nodes.items() if len(nodes) > 1}
    assert not moved, f"Pods bound twice: {moved}"
    gangs: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for uid, (job, _, attempt) in ledger.created.items():
        gangs[(job, attempt)].append(bool(ledger.nodes.get(uid)))
    partial = {gang: bound for gang, bound in gangs.items() if any(bound) and not all(bound)}
    assert not partial, f"gangs bound in part: {partial}"
    assert {job for job, _ in gangs} == set(names)
