"""``list_page`` of the Kubernetes backend on a real kube-apiserver: its own ``limit``/``continue``, one namespace,
several one after the other, and every namespace with a label selector; a forged continue refused.

Jobs are created as plain custom resources (no operator runs: they only need to be listed).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from phalanx.adapters.kubernetes.api import KubeApi
from phalanx.model.jobs import TrainingJob
from phalanx.services.kubernetes.operations import KubeBackend
from phalanx.services.port import CursorError
from support.waiting import wait_until

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"


def job(name: str, mark: str) -> dict[str, Any]:
    template = {"image": "busybox", "command": ["true"], "resources": {"cpu": "100m", "memory": "64Mi"}}
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "labels": {"list-pages": mark}},
        "spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}},
    }


@pytest.fixture
def two_namespaces(phalanx_installed: Any, namespace: str) -> Iterator[tuple[str, str]]:
    kube = phalanx_installed
    other = kube.unique("e2e-pages")
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    for ns in (namespace, other):
        wait_until(lambda ns=ns: kube.request("GET", JOBS.format(ns=ns)).status_code == 200, 30, "jobs served")
    yield namespace, other
    kube.request("DELETE", f"/api/v1/namespaces/{other}")


def walk(backend: KubeBackend, limit: int, **selection: Any) -> tuple[list[str], list[int | None]]:
    seen: list[str] = []
    remaining: list[int | None] = []
    cursor = None
    while True:
        page = backend.list_page(TrainingJob, limit=limit, cursor=cursor, **selection)
        assert len(page.items) <= limit
        seen += [f"{j.metadata.namespace}/{j.metadata.name}" for j in page.items]
        if page.cursor is None:
            return seen, remaining
        remaining.append(page.remaining)
        cursor = page.cursor


def test_pages_come_from_the_api_servers_own_paging(phalanx_installed: Any, two_namespaces: tuple[str, str]) -> None:
    kube = phalanx_installed
    first, second = sorted(two_namespaces)
    mark = kube.unique("mark")
    for ns in (first, second):
        for name in ("c", "a", "e", "b", "d"):
            response = kube.request("POST", JOBS.format(ns=ns), job(name, mark))
            assert response.status_code == 201, response.text
    backend = KubeBackend(KubeApi.from_kubeconfig(kube.kubeconfig))
    mine = [f"{ns}/{name}" for ns in (first, second) for name in "abcde"]

    assert walk(backend, 2, namespaces=[first]) == (mine[:5], [3, 1])  # the API server's remainingItemCount
    both, counts = walk(backend, 3, namespaces=[second, first])
    assert both == mine
    assert counts[-1] == 1 and None in counts  # the API server counts within the namespace it pages
    assert walk(backend, 4, labels={"list-pages": mark})[0] == mine  # every namespace; no count with a selector

    with pytest.raises(CursorError, match="continue is not a token this server gave out"):
        backend.list_page(TrainingJob, [first], limit=2, cursor='{"n":"' + first + '","c":"forged"}')
    with pytest.raises(CursorError):
        backend.list_page(TrainingJob, [first], limit=2, cursor='{"n":"elsewhere","c":""}')
