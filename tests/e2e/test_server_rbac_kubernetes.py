"""``phalanx server`` on a real kube-apiserver: Kubernetes RBAC is the one source of truth of the REST API.

A real server process (``phalanx server --kubeconfig``) runs as its own ServiceAccount with the ClusterRole of
``adapters.kubernetes.server_manifests``; two tenant namespaces each have ServiceAccounts bound to Roles on
``trainingjobs.phalanx.dev`` (an editor in each, a viewer in the first), whose tokens come from the TokenRequest
API. The tenancy matrix {own namespace, other namespace, no token, bad token, viewer writing} answers 2xx only where
those Roles allow, and nothing a refused request asked for is created or deleted. Then the history: the operator
records (``--history-url``: a SQLite file, and a real PostgreSQL server) a job that finished and was deleted through
the server, and the server answers it in the namespace's history to the tenant, and to no other.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import k8s_testenv
from components import NAMESPACE, Components, service_account_kubeconfig
from phalanx.adapters.kubernetes.server_manifests import SERVER_ACCOUNT, server_rbac
from support.postgres import PostgresServer, PostgresUnavailableError, fresh_database, running_postgres
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

API = "/apis/phalanx.dev/v1alpha1"
IMAGE = "example.org/trainer:1"
EDITOR = ["get", "list", "watch", "create", "update", "delete"]
VIEWER = ["get", "list", "watch"]
_COLLECTIONS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
}


def job(name: str, annotations: dict[str, str] | None = None, model: str | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {"image": IMAGE, "command": ["python", "train.py"]}
    if annotations:
        template["metadata"] = {"annotations": annotations}
    if model:
        template["resources"] = {"cpu": "1", "memory": "1Gi", "gpu": 1, "gpuModel": model}
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}},
    }


def apply(kube: Any, doc: dict[str, Any]) -> None:
    collection = _COLLECTIONS[doc["kind"]].format(ns=doc["metadata"].get("namespace", ""))
    response = kube.http.post(collection, json=doc)
    assert response.status_code in (201, 409), response.text  # 409: the session applied it already


def tenant(kube: Any, namespace: str, account: str, verbs: list[str]) -> str:
    """A ServiceAccount in ``namespace`` bound to a Role with ``verbs`` on its TrainingJobs; a token of it."""
    role = {"apiGroups": ["phalanx.dev"], "resources": ["trainingjobs"], "verbs": verbs}
    apply(kube, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": namespace}})
    apply(
        kube,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": account, "namespace": namespace},
            "rules": [role],
        },
    )
    apply(
        kube,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": account, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    )
    response = kube.http.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )
    response.raise_for_status()
    return str(response.json()["status"]["token"])


@dataclass
class Served:
    """The running server, its tenants' tokens and namespaces, and the history file it and the operator share."""

    http: httpx.Client
    tokens: dict[str, str]
    a: str
    b: str
    history_url: str
    process: subprocess.Popen[bytes]
    log: Path
    kubeconfig: Path

    def call(self, method: str, path: str, caller: str | None, body: Any = None) -> httpx.Response:
        token = self.tokens.get(caller, caller) if caller is not None else None
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return self.http.request(method, path, json=body, headers=headers)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(kubeconfig: Path, history_url: str, log: Path) -> tuple[subprocess.Popen[bytes], httpx.Client, Path]:
    """``phalanx server --kubeconfig`` as a real process on a free port, once it answers."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PHALANX_BACKEND", "KUBECONFIG", "PHALANX_HISTORY_URL")}
    env["PHALANX_HOME"] = str(log.parent / "embedded-state")  # never created: the embedded backend is not touched
    argv = [sys.executable, "-m", "phalanx.entrypoints.cli", "server", "--listen", f"127.0.0.1:{port}"]
    argv += ["--kubeconfig", str(kubeconfig), "--history-url", history_url]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)

    def up() -> bool:
        assert process.poll() is None, f"the server exited:\n{log.read_text()}"
        try:
            return http.get("/openapi.json").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(up, 60, "the server answering", interval=0.2)
    except BaseException:
        stop_server(process, http)
        raise
    return process, http, log


def stop_server(process: subprocess.Popen[bytes], http: httpx.Client) -> None:
    http.close()
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture(scope="module")
def served(phalanx_installed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    kube = phalanx_installed
    directory = tmp_path_factory.mktemp("server-rbac")
    for doc in server_rbac(NAMESPACE):
        apply(kube, doc)
    kubeconfig = service_account_kubeconfig(kube, SERVER_ACCOUNT, directory / "server.kubeconfig")
    a, b = kube.unique("tenant-a"), kube.unique("tenant-b")
    for name in (a, b):
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    tokens = {
        "a-editor": tenant(kube, a, "editor", EDITOR),
        "a-viewer": tenant(kube, a, "viewer", VIEWER),
        "b-editor": tenant(kube, b, "editor", EDITOR),
    }
    history_url = f"sqlite:///{directory / 'history.db'}"
    process, http, log = start_server(kubeconfig, history_url, directory / "server.log")
    try:
        yield Served(http, tokens, a, b, history_url, process, log, kubeconfig)
    finally:
        stop_server(process, http)
        for name in (a, b):
            kube.request("DELETE", f"/api/v1/namespaces/{name}")


CALLERS = [None, "not-a-kubernetes-token", "a-editor", "a-viewer", "b-editor"]


def test_the_tenancy_matrix_gives_2xx_only_where_rbac_allows(served: Served, phalanx_installed: Any) -> None:
    kube, a, b = phalanx_installed, served.a, served.b
    for namespace in (a, b):
        kube.create(f"{API}/namespaces/{namespace}/trainingjobs", job("seed"))
    routes: dict[str, tuple[str, str, Any, set[str]]] = {
        "list own": ("GET", f"{API}/namespaces/{a}/trainingjobs", None, {"a-editor", "a-viewer"}),
        "get own": ("GET", f"{API}/namespaces/{a}/trainingjobs/seed", None, {"a-editor", "a-viewer"}),
        "create own": ("POST", f"{API}/namespaces/{a}/trainingjobs", "new", {"a-editor"}),
        "delete own": ("DELETE", f"{API}/namespaces/{a}/trainingjobs", "victim", {"a-editor"}),
        "list other": ("GET", f"{API}/namespaces/{b}/trainingjobs", None, {"b-editor"}),
        "get other": ("GET", f"{API}/namespaces/{b}/trainingjobs/seed", None, {"b-editor"}),
        "create other": ("POST", f"{API}/namespaces/{b}/trainingjobs", "new", {"b-editor"}),
        "list every namespace": ("GET", f"{API}/trainingjobs", None, set()),
        "history own": ("GET", f"{API}/namespaces/{a}/history", None, {"a-editor", "a-viewer"}),
        "history every namespace": ("GET", f"{API}/history", None, set()),
    }
    wrong: list[str] = []
    for route, (method, path, name, allowed) in routes.items():
        for index, caller in enumerate(CALLERS):
            body = None
            if method == "POST":
                body = job(f"{name}-{index}")
            elif method == "DELETE":
                kube.create(f"{API}/namespaces/{a}/trainingjobs", job(f"{name}-{index}"))
                path = f"{API}/namespaces/{a}/trainingjobs/{name}-{index}"
            response = served.call(method, path, caller, body)
            expected = "2xx" if caller in allowed else ("403" if caller in served.tokens else "401")
            got = "2xx" if 200 <= response.status_code < 300 else str(response.status_code)
            if got != expected:
                wrong.append(f"{route} by {caller}: {response.status_code} {response.text[:300]}")
            elif got == "403":
                # The sentence names the caller and the permission that was missing.
                message = response.json()["message"]
                if not message.startswith("system:serviceaccount:") or "RBAC does not allow" not in message:
                    wrong.append(f"{route} by {caller}: the refusal says {message!r}")
    assert wrong == [], "\n".join(wrong)
    # What was created and deleted is exactly what the allowed callers asked for.
    names = {
        ns: sorted(o["metadata"]["name"] for o in kube.get(f"{API}/namespaces/{ns}/trainingjobs")["items"])
        for ns in (a, b)
    }
    victims = [f"victim-{i}" for i, caller in enumerate(CALLERS) if caller != "a-editor"]
    assert names[a] == sorted(["new-2", "seed", *victims])
    assert names[b] == ["new-4", "seed"]


def test_a_tenant_lists_only_its_own_namespace_jobs(served: Served) -> None:
    own = served.call("GET", f"{API}/namespaces/{served.b}/trainingjobs", "b-editor")
    assert own.status_code == 200
    assert {item["metadata"]["namespace"] for item in own.json()["items"]} == {served.b}
    # The server over a cluster never touches an embedded state directory (its Pod's root filesystem is read-only).
    assert not (served.log.parent / "embedded-state").exists()
    other = served.call("GET", f"{API}/namespaces/{served.a}/trainingjobs", "b-editor")
    assert other.status_code == 403
    assert other.json()["message"].startswith(
        f"system:serviceaccount:{served.b}:editor cannot list trainingjobs.phalanx.dev in namespace {served.a}"
    )


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for this module (fails, never skips, when it cannot run)."""
    try:
        with running_postgres() as server:
            yield server
    except PostgresUnavailableError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def history_served(request: pytest.FixtureRequest, served: Served) -> Iterator[Served]:
    """The module's server (its history a SQLite file), or one of its own over a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield served
        return
    url = fresh_database(request.getfixturevalue("postgres_server"), "history")
    log = served.log.parent / "server-postgresql.log"
    process, http, log = start_server(served.kubeconfig, url, log)
    try:
        yield dataclasses.replace(served, http=http, history_url=url, process=process, log=log)
    finally:
        stop_server(process, http)


def test_a_job_that_finished_and_was_deleted_is_in_the_namespace_history(
    history_served: Served, components: Components
) -> None:
    served = history_served
    name = f"kept-{served.history_url.partition(':')[0]}"
    kube = components.kube
    nodes, model = [kube.unique("srv-gpu")], kube.unique("SRV-GPU")
    k8s_testenv.create_fake_gpu_nodes(kube.env, nodes, product=model)
    try:
        components.operator("--history-url", served.history_url)
        components.scheduler("--lease-duration", "3")
        a = served.a
        created = served.call(
            "POST",
            f"{API}/namespaces/{a}/trainingjobs",
            "a-editor",
            job(name, {"phalanx.dev/sim-duration-ms": "300"}, model),
        )
        assert created.status_code == 201, created.text
        path = f"{API}/namespaces/{a}/trainingjobs/{name}"

        def succeeded() -> bool:
            response = served.call("GET", path, "a-viewer")
            return response.json().get("status", {}).get("phase") == "Succeeded"

        wait_until(succeeded, 90, f"job {name} Succeeded", interval=0.2)
        deleted = served.call("DELETE", path, "a-editor")
        assert deleted.status_code in (200, 202), deleted.text
        wait_until(
            lambda: served.call("GET", path, "a-viewer").status_code == 404, 60, f"job {name} gone", interval=0.2
        )

        def recorded() -> dict[str, Any] | None:
            response = served.call("GET", f"{API}/namespaces/{a}/history", "a-viewer")
            assert response.status_code == 200, response.text
            found = [i for i in response.json()["items"] if i["name"] == name and i["deletedAt"]]
            return found[0] if found else None

        record = wait_until(recorded, 60, f"job {name} in the history, deleted", interval=0.2)
        assert record["phase"] == "Succeeded"
        assert record["namespace"] == a and record["runSeconds"] is not None
        assert set(record["placements"]) == {f"{name}-worker-0"}  # where it ran, by replica (its Pod)
        # The other tenant reads neither the namespace's history nor the whole one.
        assert served.call("GET", f"{API}/namespaces/{a}/history", "b-editor").status_code == 403
        assert served.call("GET", f"{API}/history", "b-editor").status_code == 403
    finally:
        for node in nodes:
            kube.request("DELETE", f"/api/v1/nodes/{node}")
