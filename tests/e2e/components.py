"""Phalanx's cluster components in the e2e tier: installed from deploy/, run as real processes under their RBAC.

``phalanx_installed`` (session) applies ``deploy/install.yaml`` — namespace, CRDs, ServiceAccounts, ClusterRoles
and bindings — except the Deployments and the DaemonSet: there is no image to run here, so the components run
as local processes instead, each authenticated with a token of *its own* ServiceAccount (TokenRequest API), so
a missing permission in deploy/ fails the tests as it would fail on a cluster.

``components`` (per test) starts them: ``components.operator()``, ``components.scheduler()``,
``components.node_agent(node, ...)``; each is a ``Component`` you can ``kill()`` (SIGKILL) and ``restart()``;
every process is killed at the end of the test and its log is attached to a failing test's report.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import k8s_testenv
from support.waiting import wait_until

STAGES = Path(__file__).parent / "stages"


@dataclass
class Kube:
    """The running control plane as tests see it: its kubeconfig and an admin HTTP client for the API."""

    env: k8s_testenv.TestEnv
    http: httpx.Client
    startup_s: float = 0.0
    _names: Iterator[int] = field(default_factory=itertools.count)

    @property
    def kubeconfig(self) -> Path:
        return self.env.kubeconfig

    def unique(self, prefix: str) -> str:
        return f"{prefix}-{next(self._names)}"

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> httpx.Response:
        return self.http.request(method, path, json=body, **kwargs)

    def get(self, path: str) -> dict[str, Any]:
        response = self.http.get(path)
        response.raise_for_status()
        return response.json()

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post(path, json=body)
        if response.status_code != 201:
            raise AssertionError(f"POST {path} -> {response.status_code}: {response.text}")
        return response.json()

    def status(self, path: str) -> int:
        """The HTTP status of ``GET path``."""
        return self.http.get(path).status_code

    def exists(self, path: str) -> bool:
        response = self.http.get(path)
        if response.status_code == 404:
            return False
        response.raise_for_status()
        return True

    def wait_for(
        self, path: str, predicate: Callable[[dict[str, Any]], Any], timeout: float = 30, message: str = ""
    ) -> dict[str, Any]:
        """Poll ``GET path`` until ``predicate(object)`` is truthy; return the object."""
        seen: dict[str, Any] = {}

        def check() -> bool:
            response = self.http.get(path)
            if response.status_code == 404:
                return False
            response.raise_for_status()
            seen["object"] = response.json()
            return bool(predicate(seen["object"]))

        wait_until(check, timeout, message or f"condition on {path}", interval=0.1)
        return seen["object"]


@contextlib.contextmanager
def own_control_plane(directory: Path, what: str, **start: Any) -> Iterator[Kube]:
    """A control plane of a test module's own (other flags or gates than the session's), stopped afterwards.

    ``start`` goes to ``k8s_testenv.start`` (``scheduler``, ``feature_gates``, ``runtime_config``...).
    """
    try:
        with (directory / "start.log").open("w") as out:
            env = k8s_testenv.start(directory, stages=STAGES, out=out, die_with_parent=True, **start)
    except k8s_testenv.TestEnvError as failure:
        pytest.fail(f"{what} did not start:\n{failure}", pytrace=False)
    http = httpx.Client(base_url=env.server, verify=env.tls(), timeout=30)
    try:
        yield Kube(env, http)
    finally:
        http.close()
        k8s_testenv.stop(env, out=None)


ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "deploy" / "install.yaml"
NAMESPACE = "phalanx-system"
_WORKLOAD_KINDS = {"Deployment", "DaemonSet"}
_COLLECTIONS = {
    "Namespace": "/api/v1/namespaces",
    "CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "ValidatingAdmissionPolicy": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
}


def install_documents() -> list[dict[str, Any]]:
    """deploy/install.yaml without the workloads (which need an image)."""
    documents = [doc for doc in yaml.safe_load_all(INSTALL.read_text()) if doc]
    return [doc for doc in documents if doc["kind"] not in _WORKLOAD_KINDS]


def apply_install(kube: Any) -> None:
    """Create (or replace) every install document, then wait for the CRDs to be served."""
    for doc in install_documents():
        collection = _COLLECTIONS[doc["kind"]].format(ns=doc["metadata"].get("namespace", NAMESPACE))
        response = kube.http.post(collection, json=doc)
        if response.status_code == 409:
            current = kube.get(f"{collection}/{doc['metadata']['name']}")
            doc = {**doc, "metadata": {**doc["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
            response = kube.http.put(f"{collection}/{doc['metadata']['name']}", json=doc)
        if response.status_code not in (200, 201):
            raise AssertionError(f"applying {doc['kind']} {doc['metadata']['name']}: {response.text}")
    for doc in install_documents():
        if doc["kind"] == "CustomResourceDefinition":
            kube.wait_for(
                f"{_COLLECTIONS['CustomResourceDefinition']}/{doc['metadata']['name']}",
                lambda crd: any(
                    c["type"] == "Established" and c["status"] == "True"
                    for c in crd.get("status", {}).get("conditions", [])
                ),
                message=f"CRD {doc['metadata']['name']} established",
            )


def service_account_kubeconfig(
    kube: Any, account: str, path: Path, namespace: str = NAMESPACE, *, node: str | None = None
) -> Path:
    """A kubeconfig that authenticates as ``account`` with a fresh token (valid for an hour).

    ``node``: the token is bound to that Node, so the API server names the node in the user's extra, as it does
    for the projected token of a DaemonSet's Pod on it: what lets a node agent write its own Node and no other.
    """
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if node is not None:
        uid = kube.get(f"/api/v1/nodes/{node}")["metadata"]["uid"]
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}
    response = kube.http.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    response.raise_for_status()
    token = response.json()["status"]["token"]
    env: k8s_testenv.TestEnv = kube.env
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": env.server, "certificate-authority": str(env.directory / "ca.crt")}}
        ],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": "test", "user": account}}],
        "current-context": account,
    }
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class Component:
    """One component process (``phalanx-operator``...), restartable with the same arguments."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> Component:
        self.starts += 1
        log = self.log_path.open("ab")
        log.write(f"\n===== start #{self.starts}: {' '.join(self.argv)}\n".encode())
        log.flush()
        self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        log.close()
        return self

    def kill(self) -> None:
        """SIGKILL, as a node failure or an OOM kill would: nothing gets to clean up."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after 10 s; the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode

    def restart(self) -> Component:
        self.kill()
        return self.start()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class Components:
    """Starts components as their ServiceAccounts; stops them all at the end of the test."""

    kube: Any
    directory: Path
    started: list[Component] = field(default_factory=list)

    def _start(self, name: str, account: str, extra: list[str], *, node: str | None = None) -> Component:
        kubeconfig = service_account_kubeconfig(
            self.kube, account, self.directory / f"{name}-{len(self.started)}.kubeconfig", node=node
        )
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env["PHALANX_LOG_LEVEL"] = "DEBUG"
        argv = [
            sys.executable,
            "-m",
            f"phalanx.entrypoints.kubernetes.{name.replace('-', '_')}",
            "--kubeconfig",
            str(kubeconfig),
            "--namespace",
            NAMESPACE,
            "--health-port",
            "0",
            "--identity",
            self.kube.unique(name),  # unique in the session: a Lease may still name an earlier test's process
            *extra,
        ]
        component = Component(name, argv, self.directory / f"{name}-{len(self.started)}.log", env).start()
        self.started.append(component)
        return component

    def operator(self, *extra: str) -> Component:
        return self._start("operator", "phalanx-operator", list(extra))

    def scheduler(self, *extra: str) -> Component:
        return self._start("scheduler", "phalanx-scheduler", list(extra))

    def node_agent(self, node: str, *extra: str) -> Component:
        return self._start("node-agent", "phalanx-node-agent", ["--node-name", node, *extra], node=node)

    def stop_all(self) -> None:
        for component in self.started:
            component.kill()

    def logs(self, lines: int = 60) -> str:
        parts = []
        for component in self.started:
            tail = "\n".join(component.log().splitlines()[-lines:])
            parts.append(f"----- {component.log_path.name} (alive={component.alive})\n{tail}")
        return "\n".join(parts)


@pytest.fixture(scope="session")
def phalanx_installed(kube: Any) -> Any:
    """deploy/install.yaml (less the workloads) applied to the session's control plane."""
    apply_install(kube)
    return kube


_COMPONENTS = pytest.StashKey[Components]()


@pytest.fixture
def components(phalanx_installed: Any, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Components]:
    """Start Phalanx components for one test; all are killed afterwards."""
    started = Components(phalanx_installed, tmp_path)
    request.node.stash[_COMPONENTS] = started
    try:
        yield started
    finally:
        started.stop_all()


def report_logs_of(item: pytest.Item, started: Components) -> None:
    """Attach the logs of components started outside ``item`` (a module-scoped fixture) to its failure report."""
    item.stash[_COMPONENTS] = started


def component_logs(item: pytest.Item) -> str | None:
    """The logs of the components a test started (for the failure report), if it started any."""
    started = item.stash.get(_COMPONENTS, None)
    return started.logs() if started is not None and started.started else None


def create_claim(kube: Any, namespace: str, name: str) -> None:
    """A ReadWriteMany PersistentVolumeClaim, as an artifact store's would be; no provisioner binds it (kwok's
    Pods do not need it bound), so it stays Pending.
    """
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    kube.create(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", claim)


def wait_alive(component: Component, timeout: float = 10) -> None:
    """Fail fast with the component's log if it exits."""
    wait_until(lambda: component.alive, timeout, f"{component.name} running")


def phalanx_cli(kube: Any, namespace: str, directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``phalanx ARGS -n NAMESPACE --backend kubernetes --kubeconfig <admin>``, run as a user runs it, in ``directory``.

    ``PHALANX_HOME`` points at a directory that must never be created: the embedded backend is not touched.
    """
    environment = {k: v for k, v in os.environ.items() if k not in ("PHALANX_BACKEND", "KUBECONFIG", "PHALANX_HOME")}
    environment.update(PHALANX_HOME=str(directory / "embedded-state"), COLUMNS="200")
    cluster = ["-n", namespace, "--backend", "kubernetes", "--kubeconfig", str(kube.kubeconfig)]
    return subprocess.run(
        [sys.executable, "-m", "phalanx.entrypoints.cli", *args, *cluster],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        cwd=directory,
    )


def plain_kwok_node(name: str) -> dict[str, Any]:
    """A fake node as a fresh kubelet would register it: CPUs, memory and pods, nothing about GPUs."""
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
        },
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def ready(node: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions") or [])


@pytest.fixture
def node_name(kube: Any) -> Iterator[str]:
    """A fresh kwok node, Ready; deleted afterwards so that no other test schedules onto its GPUs."""
    name = kube.unique("agent-node")
    kube.create("/api/v1/nodes", plain_kwok_node(name))
    kube.wait_for(f"/api/v1/nodes/{name}", ready, 60, f"node {name} Ready")
    yield name
    kube.request("DELETE", f"/api/v1/nodes/{name}")
