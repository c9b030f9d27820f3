"""What the Kubernetes benchmarks (``k8s_gang.py``, ``k8s_bind_throughput.py``) share.

- **A fresh control plane per run** (``hack/k8s_testenv.py``: etcd, kube-apiserver, kube-controller-manager, kwok
  and, for the stock runs, kube-scheduler), fake GPU nodes, one namespace for the workload.
- **Pods that never finish on their own.** Every Pod is annotated ``phalanx.dev/sim-hang: "true"`` (the raw Pods
  directly, the TrainingJobs' through their replica template's ``metadata.annotations``), and the benchmark's kwok
  stages are the e2e tier's minus ``phalanx-pod-finish`` besides: a bound Pod turns Running and stays so until
  deleted. The benchmark driver decides when a job is done.
- **The workloads**, the same for every scheduler: a job is ``pods`` replicas named ``<job>-worker-<i>``, each
  asking ``gpus_per_pod`` GPUs, 1 CPU and 1 GiB; as raw Pods for kube-scheduler (labels as Phalanx renders them,
  ``phalanx.dev/job`` the group label), with a PodGroup (``scheduling.k8s.io/v1alpha2``, gang ``minCount`` = all)
  for kube-scheduler's alpha gang scheduling, or as TrainingJobs (type ``generic``) for Phalanx.
- **Phalanx's operator and scheduler** as subprocesses with the admin kubeconfig (``deploy/install.yaml`` less its
  workloads is applied first), ready when their ``/readyz`` answers.
- **One pod informer** (LIST once, then WATCH) feeding the measurements, stamped on arrival.
- **API requests counted by the API server**: ``apiserver_request_total`` from its ``/metrics`` before and after a
  run, by verb and resource, so a run reports what each job cost the API server in writes.

The arithmetic — the seeded job mix, gang accounting and idle GPU-seconds, percentiles — is pure and unit tested
(``tests/unit/test_benchmarks_k8s_common.py``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from phalanx.adapters.kubernetes.api import CRDS, NAMESPACES, NODES, PODS, TRAININGJOBS, KubeApi, KubeApiError, Resource
from phalanx.adapters.kubernetes.informer import Informer
from phalanx.adapters.kubernetes.rendering import (
    CONTAINER_NAME,
    GPU_RESOURCE,
    LABEL_ATTEMPT,
    LABEL_INDEX,
    LABEL_JOB,
    LABEL_ROLE,
)
from phalanx.model.jobs import ReplicaTemplate

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack"))
import k8s_testenv  # noqa: E402 - lives in hack/, on the path from the line above

E2E_STAGES = REPO / "tests" / "e2e" / "stages"
INSTALL = REPO / "deploy" / "install.yaml"
PHALANX_NAMESPACE = "phalanx-system"
SIM_IMAGE = "phalanx.invalid/sim:latest"  # never pulled: kwok runs no containers
ROLE = "worker"
POD_CPU = "1"
POD_MEMORY = str(1024**3)  # bytes, as Phalanx renders memory
SIM_COMMAND = ["sleep", "infinity"]  # never run: kwok simulates the containers
SIM_ANNOTATIONS = {"phalanx.dev/sim-hang": "true"}  # tests/e2e/stages/pods.yaml: the pod never finishes
PODGROUPS = Resource("PodGroup", "podgroups", group="scheduling.k8s.io", version="v1alpha2")
#: kube-scheduler's alpha gang scheduling in Kubernetes 1.35+ (1.36: Pod.spec.schedulingGroup, PodGroup v1alpha2).
GANG_FEATURE_GATES = {"GenericWorkload": True, "GangScheduling": True}
GANG_RUNTIME_CONFIG = {"scheduling.k8s.io/v1alpha2": "true"}
_INSTALL_COLLECTIONS = {
    "Namespace": NAMESPACES,
    "CustomResourceDefinition": CRDS,
    "ServiceAccount": Resource("ServiceAccount", "serviceaccounts"),
    "ClusterRole": Resource("ClusterRole", "clusterroles", group="rbac.authorization.k8s.io", namespaced=False),
    "ClusterRoleBinding": Resource(
        "ClusterRoleBinding", "clusterrolebindings", group="rbac.authorization.k8s.io", namespaced=False
    ),
    "Role": Resource("Role", "roles", group="rbac.authorization.k8s.io"),
    "RoleBinding": Resource("RoleBinding", "rolebindings", group="rbac.authorization.k8s.io"),
}


# --------------------------------------------------------------------------------------------------------------
# Workloads (pure).
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GangJob:
    """One job of the benchmark: ``pods`` replicas of ``gpus_per_pod`` GPUs each, all needed to make progress."""

    name: str
    pods: int
    gpus_per_pod: int

    @property
    def gpus(self) -> int:
        """GPUs of the whole gang."""
        return self.pods * self.gpus_per_pod

    def pod_name(self, index: int) -> str:
        """The name Phalanx gives replica ``index`` (``<job>-<role>-<index>``); the raw Pods use it too."""
        return f"{self.name}-{ROLE}-{index}"

    def pod_names(self) -> list[str]:
        """Every replica's Pod name, in index order."""
        return [self.pod_name(i) for i in range(self.pods)]


def gang_mix(
    count: int, seed: int, *, min_gpus: int = 4, max_gpus: int = 16, max_gpus_per_pod: int = 8, prefix: str = "gang"
) -> list[GangJob]:
    """A deterministic mix of ``count`` multi-pod jobs of ``min_gpus``..``max_gpus`` GPUs each.

    A job's total is a multiple of 4 in the range (any value in it if there is no such multiple); its shape is a
    power-of-two GPUs per pod, at most ``max_gpus_per_pod``, with at least two pods (a one-pod job cannot be a
    partial gang), e.g. 16 GPUs as 2x8, 4x4, 8x2 or 16x1. Same seed, same mix.
    """
    if count < 0 or min_gpus < 2 or max_gpus < min_gpus or max_gpus_per_pod < 1:
        raise ValueError("need count >= 0, 2 <= min_gpus <= max_gpus and max_gpus_per_pod >= 1")
    rng = random.Random(seed)
    totals = [t for t in range(min_gpus, max_gpus + 1) if t % 4 == 0] or list(range(min_gpus, max_gpus + 1))
    width = len(str(max(count - 1, 0)))
    jobs = []
    for i in range(count):
        total = rng.choice(totals)
        shapes = [g for g in (1, 2, 4, 8, 16, 32) if g <= max_gpus_per_pod and total % g == 0 and total // g >= 2]
        per_pod = rng.choice(shapes) if shapes else 1
        jobs.append(GangJob(f"{prefix}-{i:0{width}d}", total // per_pod, per_pod))
    return jobs


def uniform_jobs(count: int, pods: int, gpus_per_pod: int, prefix: str) -> list[GangJob]:
    """``count`` identical jobs (one-pod jobs, or gangs of ``pods``)."""
    width = len(str(max(count - 1, 0)))
    return [GangJob(f"{prefix}-{i:0{width}d}", pods, gpus_per_pod) for i in range(count)]


def interleaved(jobs: Sequence[GangJob]) -> list[tuple[GangJob, int]]:
    """Every (job, replica index) with the jobs' replicas interleaved: replica 0 of each job, then replica 1...

    How Pods of jobs "submitted at once" reach the API when every job has its own controller creating its Pods.
    """
    order: list[tuple[GangJob, int]] = []
    for index in range(max((job.pods for job in jobs), default=0)):
        order.extend((job, index) for job in jobs if index < job.pods)
    return order


def _resources(gpus: int) -> dict[str, Any]:
    quantities = {"cpu": POD_CPU, "memory": POD_MEMORY, GPU_RESOURCE: str(gpus)}
    return {"requests": dict(quantities), "limits": dict(quantities)}


def pod_manifest(job: GangJob, index: int, namespace: str, *, pod_group: bool = False) -> dict[str, Any]:
    """A raw Pod for kube-scheduler: the replica as Phalanx would render it, minus what only Phalanx reads.

    With ``pod_group`` it joins the job's PodGroup (``spec.schedulingGroup``) for the alpha gang scheduling.
    """
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "enableServiceLinks": False,
        "containers": [
            {
                "name": CONTAINER_NAME,
                "image": SIM_IMAGE,
                "command": list(SIM_COMMAND),
                "resources": _resources(job.gpus_per_pod),
            }
        ],
    }
    if pod_group:
        spec["schedulingGroup"] = {"podGroupName": job.name}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": job.pod_name(index),
            "namespace": namespace,
            "labels": {LABEL_JOB: job.name, LABEL_ROLE: ROLE, LABEL_INDEX: str(index), LABEL_ATTEMPT: "0"},
            "annotations": dict(SIM_ANNOTATIONS),
        },
        "spec": spec,
    }


def pod_group_manifest(job: GangJob, namespace: str) -> dict[str, Any]:
    """The job's PodGroup for kube-scheduler's alpha gang scheduling: all of its Pods or none."""
    return {
        "apiVersion": PODGROUPS.api_version,
        "kind": "PodGroup",
        "metadata": {"name": job.name, "namespace": namespace, "labels": {LABEL_JOB: job.name}},
        "spec": {"schedulingPolicy": {"gang": {"minCount": job.pods}}},
    }


def training_job_manifest(job: GangJob, namespace: str) -> dict[str, Any]:
    """The same job as a Phalanx TrainingJob (type ``generic``, one role); its Pods are annotated to hang."""
    template: dict[str, Any] = {
        "image": SIM_IMAGE,
        "command": list(SIM_COMMAND),
        "resources": {"cpu": POD_CPU, "memory": POD_MEMORY, "gpu": job.gpus_per_pod},
    }
    if "metadata" in ReplicaTemplate.model_fields:  # Pod annotations from the template, where the model has them
        template["metadata"] = {"annotations": dict(SIM_ANNOTATIONS)}
    return {
        "apiVersion": TRAININGJOBS.api_version,
        "kind": "TrainingJob",
        "metadata": {"name": job.name, "namespace": namespace},
        "spec": {
            "type": "generic",
            "replicas": {
                ROLE: {"count": job.pods, "template": template},
            },
        },
    }


# --------------------------------------------------------------------------------------------------------------
# Measurements (pure).
# --------------------------------------------------------------------------------------------------------------


@dataclass
class _JobState:
    job: GangJob
    bound: set[str] = field(default_factory=set)
    running: set[str] = field(default_factory=set)
    partial_since: float | None = None
    running_at: float | None = None
    finished_at: float | None = None


class GangAccounting:
    """Partial gangs and the GPUs they hold idle, from pod observations stamped with a time.

    - A job is a **partial gang** while at least one but not all of its Pods are bound (``spec.nodeName`` set).
      ``sample`` counts the jobs partial for at least ``settle_s``: a scheduler binding a gang's Pods one call
      after another leaves it partial for milliseconds, which is not a gang holding GPUs idle.
    - **Idle GPU-seconds** integrate, exactly between observations, the GPUs bound to Pods of partial gangs
      (transients included).
    - A job is **running** once every Pod is observed Running; the driver then ``finish``es it after its duration.
      A finished job is out of the accounting (its Pods are being deleted).
    """

    def __init__(self, jobs: Iterable[GangJob], *, settle_s: float = 1.0, start: float = 0.0) -> None:
        self.states = {job.name: _JobState(job) for job in jobs}
        self.settle_s = settle_s
        self.idle_gpu_seconds = 0.0
        self.partial_max = 0
        self.idle_gpus_max = 0
        self.samples: list[tuple[float, int, int]] = []  # (time, settled partial gangs, GPUs held by partial gangs)
        self.last_progress = start
        self._time = start
        self._idle_gpus = 0

    def _advance(self, now: float) -> None:
        if now > self._time:
            self.idle_gpu_seconds += self._idle_gpus * (now - self._time)
            self._time = now

    def _recount(self) -> None:
        self._idle_gpus = sum(
            len(state.bound) * state.job.gpus_per_pod
            for state in self.states.values()
            if state.finished_at is None and 0 < len(state.bound) < state.job.pods
        )
        self.idle_gpus_max = max(self.idle_gpus_max, self._idle_gpus)

    def observe(self, now: float, job: str, pod: str, *, bound: bool, running: bool, exists: bool = True) -> None:
        """A Pod of ``job`` as seen at ``now``; ``exists`` False when it was deleted."""
        state = self.states.get(job)
        if state is None or state.finished_at is not None:
            return
        self._advance(now)
        was_bound = pod in state.bound
        if bound and exists:
            state.bound.add(pod)
        else:
            state.bound.discard(pod)
        if running and exists:
            state.running.add(pod)
        else:
            state.running.discard(pod)
        if (pod in state.bound) != was_bound:
            self.last_progress = max(self.last_progress, now)
        partial = 0 < len(state.bound) < state.job.pods
        if not partial:
            state.partial_since = None
        elif state.partial_since is None:
            state.partial_since = now
        if len(state.running) == state.job.pods:
            if state.running_at is None:
                state.running_at = now
        else:
            state.running_at = None
        self._recount()

    def finish(self, now: float, job: str) -> None:
        """The driver ended ``job`` (deleted its Pods or its TrainingJob) at ``now``."""
        state = self.states[job]
        if state.finished_at is not None:
            return
        self._advance(now)
        state.finished_at = now
        state.partial_since = None
        self.last_progress = max(self.last_progress, now)
        self._recount()

    def due(self, now: float, duration_s: float) -> list[str]:
        """Jobs whose every Pod has been Running for ``duration_s``: done, in a real cluster."""
        return [
            name
            for name, state in self.states.items()
            if state.finished_at is None and state.running_at is not None and now - state.running_at >= duration_s
        ]

    def partial_now(self, now: float) -> int:
        """Jobs partial for at least ``settle_s`` at ``now``."""
        settled = now - self.settle_s
        return sum(
            1
            for state in self.states.values()
            if state.finished_at is None and state.partial_since is not None and state.partial_since <= settled
        )

    def sample(self, now: float) -> int:
        """Record one sample at ``now``: the settled partial gangs (also kept as the maximum)."""
        self._advance(now)
        partial = self.partial_now(now)
        self.partial_max = max(self.partial_max, partial)
        self.samples.append((now, partial, self._idle_gpus))
        return partial

    @property
    def finished(self) -> int:
        """How many jobs finished."""
        return sum(1 for state in self.states.values() if state.finished_at is not None)

    @property
    def done(self) -> bool:
        """True when every job finished."""
        return all(state.finished_at is not None for state in self.states.values())

    def makespan(self, start: float = 0.0) -> float | None:
        """From ``start`` to the last job's finish, or None while some job has not finished."""
        if not self.done or not self.states:
            return None
        return max(state.finished_at or 0.0 for state in self.states.values()) - start


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank on the sorted values); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def per_second(count: int, seconds: float) -> float:
    """``count / seconds``, NaN when no time passed."""
    return count / seconds if seconds > 0 else float("nan")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table: first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        parts = [row[0].ljust(widths[0]), *(row[i].rjust(widths[i]) for i in range(1, len(row)))]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


#: Verbs of apiserver_request_total that change something (the rest are GET, LIST, WATCH, CONNECT).
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"})
#: Writes that happen at a steady rate whatever the workload: node heartbeats (kwok's Leases and Node status)
#: and the components' leader-election Leases. Reported, but not part of a job's cost.
BACKGROUND_RESOURCES = frozenset({"leases", "nodes/status"})
_REQUEST_TOTAL = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
RequestKey = tuple[str, str]  # (verb, resource or resource/subresource)


def parse_request_totals(metrics: str) -> Counter[RequestKey]:
    """Requests the API server answered so far, by verb and resource, from its ``/metrics`` text.

    Sums ``apiserver_request_total`` over the labels other than ``verb``, ``resource`` and ``subresource``
    (response code, group, version, scope, component).
    """
    totals: Counter[RequestKey] = Counter()
    for line in metrics.splitlines():
        match = _REQUEST_TOTAL.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource = f"{resource}/{labels['subresource']}"
        totals[(labels.get("verb", ""), resource)] += int(float(match["value"]))
    return totals


def request_totals(api: KubeApi) -> Counter[RequestKey]:
    """The API server's request counts now (``GET /metrics``, which the admin may read)."""
    response = api.http.get("/metrics")
    response.raise_for_status()
    return parse_request_totals(response.text)


def writes_between(before: Mapping[RequestKey, int], after: Mapping[RequestKey, int]) -> Counter[RequestKey]:
    """Write requests answered between two ``request_totals`` (rows that did not change are left out)."""
    writes: Counter[RequestKey] = Counter()
    for key, count in after.items():
        if key[0] in WRITE_VERBS and count > before.get(key, 0):
            writes[key] = count - before.get(key, 0)
    return writes


def reads_between(before: Mapping[RequestKey, int], after: Mapping[RequestKey, int]) -> Counter[RequestKey]:
    """Requests other than writes (GET, LIST, WATCH...) answered between two ``request_totals``."""
    reads: Counter[RequestKey] = Counter()
    for key, count in after.items():
        if key[0] not in WRITE_VERBS and count > before.get(key, 0):
            reads[key] = count - before.get(key, 0)
    return reads


def job_writes(writes: Mapping[RequestKey, int]) -> int:
    """The writes that belong to the workload: all but the background heartbeats (``BACKGROUND_RESOURCES``)."""
    return sum(count for (_, resource), count in writes.items() if resource not in BACKGROUND_RESOURCES)


def benchmark_stages(directory: Path, source: Path = E2E_STAGES) -> Path:
    """Write the e2e tier's kwok stages without ``phalanx-pod-finish`` into ``directory``: Pods run until deleted."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob("*.yaml")):
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        kept = [doc for doc in documents if doc.get("metadata", {}).get("name") != "phalanx-pod-finish"]
        (directory / path.name).write_text(yaml.safe_dump_all(kept, sort_keys=False))
    return directory


# --------------------------------------------------------------------------------------------------------------
# The cluster.
# --------------------------------------------------------------------------------------------------------------


def phalanx_missing() -> str | None:
    """Why Phalanx's operator and scheduler cannot run here, or None when both are installed."""
    for module in ("phalanx.entrypoints.kubernetes.operator", "phalanx.entrypoints.kubernetes.scheduler"):
        try:
            found = importlib.util.find_spec(module)
        except ImportError:
            found = None
        if found is None:
            return f"{module} does not exist (python -m {module} would fail)"
    return None


def create_all(api: KubeApi, resource: Resource, bodies: Sequence[dict[str, Any]], threads: int = 8) -> None:
    """Create every object, ``threads`` requests at a time, in about the given order."""
    if not bodies:
        return
    with ThreadPoolExecutor(max(1, min(threads, len(bodies)))) as pool:
        for _ in pool.map(lambda body: api.create(resource, body), bodies):
            pass


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Process:
    """A Phalanx component started by the benchmark (its own session, so its group can be signalled)."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    health_port: int

    @property
    def alive(self) -> bool:
        """Whether it still runs."""
        return self.process.poll() is None

    def tail(self, lines: int = 30) -> str:
        """The end of its log."""
        return str(k8s_testenv.tail(self.log, lines))

    def stop(self, grace: float = 10) -> None:
        """SIGTERM its process group, SIGKILL after ``grace``."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


class Cluster:
    """A fresh control plane in ``directory`` with ``nodes`` fake GPU nodes and the namespace ``namespace``."""

    def __init__(
        self,
        directory: Path,
        *,
        nodes: int,
        gpus_per_node: int,
        kube_scheduler: bool = False,
        gang_alpha: bool = False,
        scheduler_args: Sequence[str] = (),
        namespace: str = "bench",
    ) -> None:
        self.directory = directory
        self.node_count = nodes
        self.gpus_per_node = gpus_per_node
        self.kube_scheduler = kube_scheduler
        self.gang_alpha = gang_alpha
        self.scheduler_args = list(scheduler_args)
        self.namespace = namespace
        self.env: k8s_testenv.TestEnv | None = None
        self._api: KubeApi | None = None
        self.processes: list[Process] = []

    @property
    def api(self) -> KubeApi:
        """The admin API client."""
        assert self._api is not None, "the cluster is not started"
        return self._api

    def __enter__(self) -> Cluster:
        self.directory.mkdir(parents=True, exist_ok=True)
        stages = benchmark_stages(self.directory / "stages")
        with (self.directory / "start.log").open("w") as out:
            self.env = k8s_testenv.start(
                self.directory / "k8s",
                scheduler=self.kube_scheduler,
                stages=stages,
                out=out,
                die_with_parent=True,
                feature_gates=GANG_FEATURE_GATES if self.gang_alpha else None,
                runtime_config=GANG_RUNTIME_CONFIG if self.gang_alpha else None,
                scheduler_args=self.scheduler_args,
            )
        try:
            self._api = KubeApi.from_kubeconfig(self.env.kubeconfig)
            self.api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}})
            self._add_nodes()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *_: object) -> None:
        for process in reversed(self.processes):
            process.stop()
        if self._api is not None:
            self._api.close()
        if self.env is not None:
            k8s_testenv.stop(self.env, out=None)

    def _add_nodes(self, timeout: float = 120) -> None:
        names = [f"gpu-node-{i:03d}" for i in range(self.node_count)]
        bodies = [k8s_testenv.fake_gpu_node(name, gpus=self.gpus_per_node) for name in names]
        create_all(self.api, NODES, bodies)
        deadline = time.monotonic() + timeout
        while True:
            items, _ = self.api.list(NODES)
            ready = [node for node in items if _node_ready(node)]
            if len(ready) == len(names):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(ready)} of {len(names)} nodes Ready and untainted after {timeout:.0f}s")
            time.sleep(0.5)

    def logs(self, lines: int = 20) -> str:
        """The end of every control plane component's and Phalanx process's log."""
        parts = [self.env.log_tails(lines)] if self.env else []
        parts.extend(f"----- {p.name} ({p.log}) -----\n{p.tail(lines)}" for p in self.processes)
        return "\n".join(parts)

    # -- Phalanx ------------------------------------------------------------------------------------------------

    def install_phalanx(self, timeout: float = 60) -> None:
        """Apply ``deploy/install.yaml`` without its Deployments and DaemonSet; wait for the CRDs."""
        documents = [doc for doc in yaml.safe_load_all(INSTALL.read_text()) if doc]
        crds = []
        for doc in documents:
            resource = _INSTALL_COLLECTIONS.get(doc["kind"])
            if resource is None:
                continue  # the workloads: the components run as local processes here
            self.api.create(resource, doc, doc["metadata"].get("namespace") if resource.namespaced else None)
            if doc["kind"] == "CustomResourceDefinition":
                crds.append(doc["metadata"]["name"])
        deadline = time.monotonic() + timeout
        for name in crds:
            while not _established(self.api.get(CRDS, name)):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRD {name} not established after {timeout:.0f}s")
                time.sleep(0.2)

    def start_phalanx(self, component: str, *extra: str, timeout: float = 60) -> Process:
        """Start ``phalanx-<component>`` (``operator``, ``scheduler``) as a subprocess; return once it is ready."""
        assert self.env is not None
        port = free_port()
        log = self.directory / f"phalanx-{component}.log"
        argv = [
            sys.executable,
            "-m",
            f"phalanx.entrypoints.kubernetes.{component}",
            "--kubeconfig",
            str(self.env.kubeconfig),
            "--namespace",
            PHALANX_NAMESPACE,
            "--health-port",
            str(port),
            "--identity",
            f"bench-{component}",
            *extra,
        ]
        with log.open("wb") as handle:
            popen = subprocess.Popen(
                argv,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
                start_new_session=True,
            )
        process = Process(f"phalanx-{component}", popen, log, port)
        self.processes.append(process)
        deadline = time.monotonic() + timeout
        while not _ready(port):
            if not process.alive:
                raise RuntimeError(f"{process.name} exited ({popen.returncode}); its log ends:\n{process.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{process.name} not ready after {timeout:.0f}s; its log ends:\n{process.tail()}")
            time.sleep(0.1)
        return process

    def dead_processes(self) -> list[Process]:
        """Phalanx components that exited."""
        return [p for p in self.processes if not p.alive]


def _node_ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return ready and not (node.get("spec") or {}).get("taints")


def _established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@dataclass(frozen=True)
class PodView:
    """What the benchmarks read from one pod event."""

    job: str
    name: str
    uid: str
    node: str
    phase: str
    exists: bool


PodHandler = Callable[[float, PodView], None]


@contextlib.contextmanager
def watch_pods(api: KubeApi, namespace: str, handler: PodHandler, timeout: float = 30) -> Iterator[Informer]:
    """An informer on the namespace's Pods labelled ``phalanx.dev/job``; ``handler(monotonic time, view)`` per event."""

    def on_change(kind: str, obj: dict[str, Any]) -> None:
        now = time.monotonic()
        meta = obj.get("metadata") or {}
        job = (meta.get("labels") or {}).get(LABEL_JOB)
        if not job:
            return
        view = PodView(
            job=str(job),
            name=str(meta.get("name")),
            uid=str(meta.get("uid")),
            node=str((obj.get("spec") or {}).get("nodeName") or ""),
            phase=str((obj.get("status") or {}).get("phase") or ""),
            exists=kind != "DELETED",
        )
        handler(now, view)

    informer = Informer(api, PODS, namespace=namespace, label_selector=LABEL_JOB, on_change=on_change)
    informer.start()
    if not informer.wait_synced(timeout):
        informer.stop()
        raise TimeoutError(f"the pod watch did not sync within {timeout:.0f}s")
    try:
        yield informer
    finally:
        informer.stop()


def delete_quietly(api: KubeApi, resource: Resource, name: str, namespace: str, **options: Any) -> None:
    """Delete, ignoring an object that is already gone."""
    with contextlib.suppress(KubeApiError):
        api.delete(resource, name, namespace, **options)


def fmt(value: float | None, digits: int = 1) -> str:
    """A number for tables and RESULT lines; ``n/a`` for None or NaN."""
    if value is None or value != value:
        return "n/a"
    return f"{value:.{digits}f}"


def machine() -> str:
    """A one-line description of this machine, for the report."""
    cpus = os.cpu_count() or 0
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    except (ValueError, OSError):
        memory = float("nan")
    versions = k8s_testenv.pinned_versions()
    return (
        f"{cpus} CPUs, {memory:.0f} GiB, Python {sys.version.split()[0]}; Kubernetes {versions.kubernetes}, "
        f"kwok {versions.kwok}, etcd {versions.etcd}"
    )


def remove_tree(path: Path) -> None:
    """Remove a run's directory (logs, etcd data)."""
    shutil.rmtree(path, ignore_errors=True)


__all__ = [
    "BACKGROUND_RESOURCES",
    "GANG_FEATURE_GATES",
    "GANG_RUNTIME_CONFIG",
    "PODGROUPS",
    "WRITE_VERBS",
    "Cluster",
    "GangAccounting",
    "GangJob",
    "PodView",
    "Process",
    "benchmark_stages",
    "create_all",
    "delete_quietly",
    "fmt",
    "gang_mix",
    "interleaved",
    "job_writes",
    "machine",
    "parse_request_totals",
    "per_second",
    "percentile",
    "phalanx_missing",
    "pod_group_manifest",
    "pod_manifest",
    "reads_between",
    "remove_tree",
    "request_totals",
    "table",
    "training_job_manifest",
    "uniform_jobs",
    "watch_pods",
    "writes_between",
]
