"""The Kubernetes benchmarks' cluster: a fresh control plane per run, fake GPU nodes, Phalanx's components.

The control plane comes from the e2e test environment (``hack/k8s_testenv.py``: etcd, kube-apiserver,
kube-controller-manager, kwok and, for the stock runs, kube-scheduler), with the e2e tier's kwok stages minus
``phalanx-pod-finish`` (``benchmark_stages``): a bound Pod turns Running and stays so until deleted. Phalanx's
operator and scheduler run as subprocesses with the admin kubeconfig (``deploy/install.yaml`` less its workloads
is applied first), ready when their ``/readyz`` answers; one pod informer (``watch_pods``) feeds the measurements.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from phalanx.adapters.kubernetes.api import CRDS, NAMESPACES, NODES, PODS, KubeApi, KubeApiError, Resource
from phalanx.adapters.kubernetes.informer import Informer
from phalanx.adapters.kubernetes.rendering import (
    LABEL_JOB,
)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack"))
import k8s_testenv  # noqa: E402 - lives in hack/, on the path from the line above
from _k8s_workloads import GANG_FEATURE_GATES, GANG_RUNTIME_CONFIG  # noqa: E402

E2E_STAGES = REPO / "tests" / "e2e" / "stages"
INSTALL = REPO / "deploy" / "install.yaml"
PHALANX_NAMESPACE = "phalanx-system"
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


def benchmark_stages(directory: Path, source: Path = E2E_STAGES) -> Path:
    """Write the e2e tier's kwok stages without ``phalanx-pod-finish`` into ``directory``: Pods run until deleted."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob("*.yaml")):
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        kept = [doc for doc in documents if doc.get("metadata", {}).get("name") != "phalanx-pod-finish"]
        (directory / path.name).write_text(yaml.safe_dump_all(kept, sort_keys=False))
    return directory


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


def remove_tree(path: Path) -> None:
    """Remove a run's directory (logs, etcd data)."""
    shutil.rmtree(path, ignore_errors=True)
