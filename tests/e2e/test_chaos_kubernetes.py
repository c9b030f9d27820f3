"""Chaos on a real control plane: gangs run while every part of it fails at seeded moments, and all converge.

Gangs of 2 to 4 replicas (one to three GPUs each, 1 to 3 s of simulated work) run on a control plane of this
module's own (the session's must not see its kube-apiserver restart: ``plane``), on two kwok nodes of a GPU model
of this test's own, each reported by its own phalanx-node-agent, while thirteen faults strike one after the other
in a seeded order (``random.Random(SEED)``), each at a seeded moment after one more job was submitted:

- ten SIGKILLs, each of the operator, phalanx-scheduler, both, or one of the two node agents, started again at once;
- kube-apiserver SIGKILLed (etcd keeps the cluster), left down ``API_DOWN_S`` = 30 s, and started again on the same
  port with the same certificates, flags and data (``k8s_testenv.stop_component``/``start_component``). Every
  Phalanx component must still be alive when it is back, and carry on by itself: both node agents write their
  heartbeats again, and a job submitted then is admitted and bound;
- a node made NotReady for ``NOT_READY_S`` seconds (kwok's label ``node-not-ready.stage.kwok.x-k8s.io=true``, which
  our stage turns into Ready=False; the node's Pods carry on, as containers do under a kubelet that cannot report),
  then Ready again. The design (docs/kubernetes.md, the scheduler): nothing new is placed there, what runs there is
  left to run;
- a GPU marked unhealthy through its node agent's fault file for ``GPU_FAULT_S`` seconds, then healthy again. The
  design: nothing is placed on it, and the job running on it is restarted per its ``runPolicy`` (the jobs have
  ``restartPolicy: OnFailure``, ``backoffLimit: 3``) and placed again on healthy GPUs.

Half-way through each held fault one more SIGKILL strikes (seeded; during the unhealthy GPU, that node's agent,
which must keep the GPU unhealthy when it starts again; during the API server's absence, components that then
start with no API server to talk to).

The node and the GPU struck are those of a running Pod of a job submitted for the purpose, whose Pods run until
the test releases them (``phalanx.dev/sim-hang``, removed from its Pods once the fault is lifted and its gang runs),
so each fault hits a running job however long the fault takes to be seen. A watch of the namespace's Pods,
resumed across the API server's restart, records every Pod created, every binding and the GPUs of each. Checked
when every job has ended: every job Succeeded; no replica attempt was created twice; no Pod was bound twice or
moved; no gang was bound in part (for each job and attempt, every Pod created was bound); no Pod was bound to the
NotReady node, nor to the unhealthy GPU, while it was so (from ``SETTLE_S`` after the fault was visible: a
decision made from the view before may still land); the Pods that ran on the NotReady node all Succeeded; and the
job on the unhealthy GPU was restarted (a second attempt).

79 to 91 s on a 2-core machine shared with other work (eight runs), 30 s of it with kube-apiserver down;
the module's control plane takes about 20 s more to start and stop.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import k8s_testenv
from components import Component, Components, Kube, apply_install, own_control_plane, report_logs_of, wait_alive
from support.sim_jobs import gpu_job
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DGX = ROOT / "examples" / "inventories" / "dgx-2socket-8gpu.yaml"
JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
NOT_READY_LABEL = "node-not-ready.stage.kwok.x-k8s.io"  # tests/e2e/stages/nodes.yaml: phalanx-node-not-ready
UNHEALTHY_ANNOTATION = "phalanx.dev/unhealthy-gpus"
SEED = 19
KILLS = 10
FIRST_JOBS = 8
API_DOWN_S = 30.0
NOT_READY_S = 8.0
GPU_FAULT_S = 8.0
HANG = "phalanx.dev/sim-hang"  # tests/e2e/stages/pods.yaml: a Pod so annotated runs until the annotation goes
SETTLE_S = 2.0  # after a fault is visible: a decision made from the view before it may still be written


@dataclass
class Cluster:
    nodes: list[str]
    model: str
    faults: dict[str, Path]  # node -> its agent's fault file
    agents: dict[str, Component]


def inventory(path: Path, model: str) -> Path:
    """The simulated DGX of examples/inventories, its GPUs of ``model``, for the node agents."""
    node = yaml.safe_load(DGX.read_text())
    node["metadata"]["labels"]["phalanx.dev/gpu-model"] = model
    for gpu in node["status"]["gpus"]:
        gpu["model"] = model
    path.write_text(yaml.safe_dump(node))
    return path


def inject(faults: Path, text: str) -> None:
    """Write the fault file atomically: the agent never reads a half-written list."""
    partial = faults.with_suffix(".partial")
    partial.write_text(text)
    partial.replace(faults)


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """A control plane of this module's own, Phalanx installed: the session's must not see its kube-apiserver restart.

    After a 30 s outage kube-controller-manager, kube-scheduler and kwok reconnect with client-go's backoff, tens of
    seconds later (kube-scheduler bound a new Pod 50 s after the restart): later tests would wait that out.
    """
    with own_control_plane(tmp_path_factory.mktemp("chaos-k8s"), "the chaos test's control plane") as kube:
        apply_install(kube)
        yield kube


@pytest.fixture
def components(plane: Kube, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Components]:
    """Phalanx's components on this module's control plane (not the session's), killed afterwards."""
    started = Components(plane, tmp_path)
    report_logs_of(request.node, started)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def namespace(plane: Kube) -> str:
    name = plane.unique("chaos")
    plane.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


@pytest.fixture
def cluster(components: Components, tmp_path: Path) -> Iterator[Cluster]:
    kube = components.kube
    names = [kube.unique("chaos-gpu"), kube.unique("chaos-gpu")]
    model = kube.unique("CHAOS-GPU")
    k8s_testenv.create_fake_gpu_nodes(kube.env, names, product=model)
    simulated = inventory(tmp_path / "inventory.yaml", model)
    faults = {name: tmp_path / f"faults-{name}" for name in names}
    agents = {
        name: components.node_agent(
            name,
            *("--inventory", str(simulated), "--fault-file", str(faults[name])),
            *("--interval", "0.3", "--heartbeat-interval", "2"),  # a heartbeat soon after the API server is back
        )
        for name in names
    }
    for name, agent in agents.items():
        wait_alive(agent)
        kube.wait_for(
            f"/api/v1/nodes/{name}",
            lambda node: (node["metadata"].get("annotations") or {}).get(UNHEALTHY_ANNOTATION) == "",
            30,
            f"the node agent's first report on {name}",
        )
    yield Cluster(names, model, faults, agents)
    for name in names:
        kube.request("DELETE", f"/api/v1/nodes/{name}")


class PodLedger:
    """What a watch of the namespace's Pods saw, kept through API server restarts (the watch resumes, or lists)."""

    def __init__(self, kube: Any, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.lock = threading.Lock()
        self.created: dict[str, tuple[str, str, str]] = {}  # uid -> (job, pod name, attempt)
        self.nodes: dict[str, list[str]] = defaultdict(list)  # uid -> the nodeNames seen, in order, deduplicated
        self.bound_at: dict[str, float] = {}  # uid -> when the watch first saw it bound (time.monotonic)
        self.gpus: dict[str, set[int]] = {}  # uid -> the GPUs of its placement (phalanx.dev/gpus)
        self.phase: dict[str, str] = {}  # uid -> its last phase; "Deleted" once gone
        self.relists = 0
        self.stop = threading.Event()
        self.version = kube.get(f"/api/v1/namespaces/{namespace}/pods")["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        while not self.stop.is_set():
            params = {"watch": "true", "resourceVersion": self.version, "allowWatchBookmarks": "true"}
            try:
                with self.kube.http.stream("GET", path, params=params, timeout=httpx.Timeout(5, read=None)) as stream:
                    if stream.status_code == 410:
                        self._relist(path)
                        continue
                    stream.raise_for_status()
                    for line in stream.iter_lines():
                        if self.stop.is_set():
                            return
                        event = json.loads(line)
                        if event["type"] == "ERROR":  # 410 Gone: too old a version to resume from
                            self._relist(path)
                            break
                        self.version = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self._record(event["type"], event["object"])
            except httpx.HTTPError:
                self.stop.wait(0.2)  # the API server is away (restarting): watch again from where we were

    def _relist(self, path: str) -> None:
        listed = self.kube.get(path)
        self.relists += 1
        for pod in listed["items"]:
            self._record("MODIFIED", pod)
        present = {pod["metadata"]["uid"] for pod in listed["items"]}
        with self.lock:
            for uid in self.phase.keys() - present:
                self.phase[uid] = "Deleted"  # gone while the watch was away
        self.version = listed["metadata"]["resourceVersion"]

    def _record(self, kind: str, pod: dict[str, Any]) -> None:
        meta, uid = pod["metadata"], pod["metadata"].get("uid", "")
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        with self.lock:
            if uid not in self.created:
                attempt = labels.get("phalanx.dev/attempt", "?")
                self.created[uid] = (labels.get("phalanx.dev/job", "?"), meta["name"], attempt)
                gpus = annotations.get("phalanx.dev/gpus") or ""
                self.gpus[uid] = {int(gpu) for gpu in gpus.split(",") if gpu}
            if node and (not self.nodes[uid] or self.nodes[uid][-1] != node):
                self.nodes[uid].append(node)
                self.bound_at.setdefault(uid, time.monotonic())
            self.phase[uid] = "Deleted" if kind == "DELETED" else (pod.get("status") or {}).get("phase", "")

    def running(self, job: str | None = None) -> dict[str, tuple[str, set[int]]]:
        """uid -> (node, GPUs) of the Pods (of ``job``, or all) bound and not finished now."""
        with self.lock:
            return {
                uid: (self.nodes[uid][-1], set(self.gpus.get(uid, ())))
                for uid in self.nodes
                if self.nodes[uid]
                and self.phase.get(uid) in ("Pending", "Running")
                and job in (None, self.created[uid][0])
            }

    def bound(self, job: str) -> int:
        """How many Pods of ``job`` were bound, all attempts together."""
        with self.lock:
            return sum(1 for uid, (name, _, _) in self.created.items() if name == job and self.nodes.get(uid))

    def bound_between(self, node: str, start: float, end: float) -> dict[str, tuple[str, set[int]]]:
        """Pod name -> (attempt, GPUs) of the Pods first seen bound to ``node`` between ``start`` and ``end``."""
        with self.lock:
            return {
                self.created[uid][1]: (self.created[uid][2], self.gpus.get(uid, set()))
                for uid, at in self.bound_at.items()
                if start <= at < end and self.nodes[uid][-1] == node
            }


@dataclass
class Window:
    """A fault held on a node (and one of its GPUs): from when it was visible in the API to when it was lifted."""

    what: str
    job: str  # the job that ran there when it struck
    node: str
    visible: float
    lifted: float
    gpu: int | None = None
    running: tuple[str, ...] = ()  # uids of the Pods running on the node when it began


def test_gangs_converge_through_kills_an_api_server_restart_a_notready_node_and_a_sick_gpu(
    components: Components, namespace: str, cluster: Cluster
) -> None:
    kube, model = components.kube, cluster.model
    rng = random.Random(SEED)
    shapes = random.Random(SEED + 1)  # the jobs' own: the same jobs whatever the faults drew
    aim = random.Random(SEED + 2)  # which running Pod a node or GPU fault strikes
    operator = components.operator()
    scheduler = components.scheduler("--lease-duration", "2")
    agents = list(cluster.agents.values())
    ledger = PodLedger(kube, namespace)
    names: list[str] = []
    sizes: dict[str, int] = {}  # job -> replicas

    def submit(hang: bool = False) -> str:
        name = f"chaos-{len(names):02d}"
        workers, gpus, duration = shapes.randint(2, 4), shapes.randint(1, 3), shapes.randint(1000, 3000)
        annotations = {"phalanx.dev/sim-duration-ms": str(duration)}
        if hang:
            annotations[HANG] = "true"
        document = gpu_job(
            name,
            model,
            workers=workers,
            gpus=gpus,
            jobtype="pytorch",
            cpu="2",
            memory="4Gi",
            annotations=annotations,
            # An unhealthy GPU restarts the jobs on it: that restart counts against backoffLimit.
            runPolicy={"restartPolicy": "OnFailure", "backoffLimit": 3},
        )
        kube.create(JOBS.format(ns=namespace), document)
        names.append(name)
        sizes[name] = workers
        return name

    def target() -> tuple[str, str, int]:
        """A job whose Pods run until released, and the node and GPU of one of its running Pods (seeded)."""
        job = submit(hang=True)
        running = wait_until(lambda: ledger.running(job), 90, f"{job} running")
        node, gpus = running[aim.choice(sorted(running, key=lambda uid: ledger.created[uid][1]))]
        return job, node, aim.choice(sorted(gpus))

    def release(job: str, after: str | None = None) -> None:
        """Let ``job``'s Pods finish once its whole gang runs (one of an attempt after ``after``, if given)."""

        def gang() -> list[str]:
            running = ledger.running(job)
            with ledger.lock:
                pods = [ledger.created[uid] for uid in running]
            if after is not None:
                pods = [pod for pod in pods if pod[2] != after]
            return [name for _, name, _ in pods] if len(pods) == sizes[job] else []

        for pod in wait_until(gang, 90, f"the gang of {job} running"):
            response = kube.http.patch(
                f"/api/v1/namespaces/{namespace}/pods/{pod}",
                content=json.dumps({"metadata": {"annotations": {HANG: None}}}),
                headers={"Content-Type": "application/merge-patch+json"},
            )
            response.raise_for_status()

    def patch_node(name: str, labels: dict[str, str | None]) -> None:
        response = kube.http.patch(
            f"/api/v1/nodes/{name}",
            content=json.dumps({"metadata": {"labels": labels}}),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        response.raise_for_status()

    kills = {
        "operator": [operator],
        "scheduler": [scheduler],
        "both": [operator, scheduler],
        **{f"agent of {name}": [agent] for name, agent in cluster.agents.items()},
    }

    held: list[str] = []  # the kills made while a fault was held

    def kill(victims: str) -> None:
        for component in kills[victims]:
            component.kill()
        for component in kills[victims]:
            component.start()

    def hold(seconds: float, victims: str) -> None:
        """Hold a fault for ``seconds``, with one more SIGKILL (and restart) of ``victims`` half-way through it."""
        time.sleep(seconds / 2)
        kill(victims)
        held.append(victims)
        time.sleep(seconds / 2)

    def restart_api_server() -> None:
        k8s_testenv.stop_component(kube.env, "kube-apiserver", grace=0)
        hold(API_DOWN_S, rng.choice(sorted(kills)))  # started again while there is no API server to talk to
        k8s_testenv.start_component(kube.env, "kube-apiserver", die_with_parent=True, timeout=120)
        back = datetime.now(UTC).replace(microsecond=0)
        dead = [component.name for component in (operator, scheduler, *agents) if not component.alive]
        assert not dead, f"died while kube-apiserver was down: {dead}"
        # Each component is back at work: the agents write their heartbeats, and a new job is admitted and bound.
        for name in cluster.nodes:
            kube.wait_for(f"/api/v1/nodes/{name}", lambda n: heartbeat(n) > back, 60, f"the agent of {name} back")
        job = submit()
        wait_until(lambda: ledger.bound(job) == sizes[job], 90, f"{job} admitted and bound after the restart")

    def not_ready() -> Window:
        job, name, _ = target()
        patch_node(name, {NOT_READY_LABEL: "true"})
        kube.wait_for(f"/api/v1/nodes/{name}", lambda n: not ready(n), 30, f"{name} NotReady")
        visible = time.monotonic()
        running = tuple(uid for uid, (node, _) in ledger.running().items() if node == name)
        hold(NOT_READY_S, rng.choice(sorted(kills)))
        lifted = time.monotonic()
        patch_node(name, {NOT_READY_LABEL: None})
        kube.wait_for(f"/api/v1/nodes/{name}", ready, 30, f"{name} Ready again")
        release(job)
        return Window("NotReady", job, name, visible, lifted, running=running)

    def sick_gpu() -> Window:
        job, name, gpu = target()
        with ledger.lock:
            attempt = next(attempt for j, _, attempt in ledger.created.values() if j == job)
        inject(cluster.faults[name], f"{gpu}\n")
        kube.wait_for(f"/api/v1/nodes/{name}", lambda n: unhealthy(n) == str(gpu), 30, f"GPU {gpu} of {name} unhealthy")
        visible = time.monotonic()
        hold(GPU_FAULT_S, f"agent of {name}")  # a restarted agent must keep the GPU unhealthy
        lifted = time.monotonic()
        inject(cluster.faults[name], "")
        kube.wait_for(f"/api/v1/nodes/{name}", lambda n: unhealthy(n) == "", 30, f"GPU {gpu} of {name} healthy again")
        release(job, after=attempt)  # the attempt placed again on healthy GPUs
        return Window("unhealthy GPU", job, name, visible, lifted, gpu=gpu)

    steps = [rng.choice(sorted(kills)) for _ in range(KILLS)] + ["kube-apiserver", "NotReady", "unhealthy GPU"]
    rng.shuffle(steps)
    windows: list[Window] = []
    for _ in range(FIRST_JOBS):
        submit()
    wait_until(lambda: ledger.created, 60, "the first Pods")
    started = time.monotonic()
    for step in steps:
        submit()
        time.sleep(rng.uniform(0.3, 1.5))  # a seeded moment to strike, not a wait for something to happen
        if step == "kube-apiserver":
            restart_api_server()
        elif step == "NotReady":
            windows.append(not_ready())
        elif step == "unhealthy GPU":
            windows.append(sick_gpu())
        else:
            kill(step)
    faulted = time.monotonic() - started
    for name in names:
        kube.wait_for(
            f"{JOBS.format(ns=namespace)}/{name}",
            lambda obj: obj.get("status", {}).get("phase") in ("Succeeded", "Failed"),
            timeout=120,
            message=f"{name} to end after the faults ({', '.join(steps)})",
        )
    phases = {name: kube.get(f"{JOBS.format(ns=namespace)}/{name}")["status"]["phase"] for name in names}
    assert set(phases.values()) == {"Succeeded"}, phases
    ledger.stop.set()
    struck = "; ".join(f"{w.what} on {w.node} (GPU {w.gpu}) under {w.job}" for w in windows)
    print(f"{len(names)} jobs; {faulted:.0f}s of faults: {', '.join(steps)}; {struck}; during them: {', '.join(held)}")
    print(f"the Pod watch listed again {ledger.relists} time(s) (too old a version to resume after the restart)")

    with ledger.lock:
        replicas = list(ledger.created.values())
        created, nodes, phase = dict(ledger.created), dict(ledger.nodes), dict(ledger.phase)
    assert replicas, "the watch saw no Pods"
    twice = {replica for replica in replicas if replicas.count(replica) > 1}
    assert not twice, f"replica attempts created twice: {sorted(twice)}"
    moved = {created[uid][1]: seen for uid, seen in nodes.items() if len(seen) > 1}
    assert not moved, f"Pods bound twice: {moved}"
    gangs: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for uid, (job, _, attempt) in created.items():
        gangs[(job, attempt)].append(bool(nodes.get(uid)))
    partial = {gang: bound for gang, bound in gangs.items() if any(bound) and not all(bound)}
    assert not partial, f"gangs bound in part: {partial}"
    assert {job for job, _ in gangs} == set(names)

    for window in windows:
        bound = ledger.bound_between(window.node, window.visible + SETTLE_S, window.lifted)
        if window.gpu is None:
            assert not bound, f"bound to {window.node} while it was NotReady: {bound}"
            assert window.running, f"no Pod ran on {window.node} when it turned NotReady"
            unfinished = {created[uid][1]: phase.get(uid) for uid in window.running if phase.get(uid) != "Succeeded"}
            assert not unfinished, (
                f"Pods running on {window.node} when it turned NotReady did not succeed: {unfinished}"
            )
        else:
            on_gpu = {pod: seen for pod, seen in bound.items() if window.gpu in seen[1]}
            assert not on_gpu, f"bound to GPU {window.gpu} of {window.node} while it was unhealthy: {on_gpu}"
            attempts = {attempt for job, _, attempt in created.values() if job == window.job}
            assert len(attempts) > 1, (
                f"{window.job}, on GPU {window.gpu} of {window.node}, was not restarted: {attempts}"
            )


def ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def heartbeat(node: dict[str, Any]) -> datetime:
    """When the node agent last wrote the node (the epoch if never)."""
    value = (node["metadata"].get("annotations") or {}).get("phalanx.dev/node-agent-heartbeat")
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else datetime.fromtimestamp(0, UTC)


def unhealthy(node: dict[str, Any]) -> str | None:
    value = (node["metadata"].get("annotations") or {}).get(UNHEALTHY_ANNOTATION)
    return None if value is None else str(value)
