"""The components' /metrics on a real control plane: the scheduler counts its admissions, the operator the state.

The operator and phalanx-scheduler run as real processes under their ServiceAccounts (``components``) with a
health port each; two jobs run to the end on kwok nodes of a GPU model of this test's own, and the metrics read
back over HTTP are compared with what the API server says of the same objects. They are read as a Prometheus
would: with the token of a ServiceAccount bound to the install's ClusterRole ``phalanx-metrics-reader``, which
the components check by TokenReview and SubjectAccessReview; a tenant's account, bound to nothing, gets 403.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import k8s_testenv
from components import Components
from phalanx.adapters.kubernetes.manifests import METRICS_READER_ROLE
from support.postgres import free_port
from support.sim_jobs import gpu_job
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

QUEUES = "/apis/phalanx.dev/v1alpha1/queues"
JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
Series = dict[tuple[tuple[str, str], ...], float]


def scrape(port: int, token: str) -> dict[str, Series] | None:
    """The metrics on the port read with ``token``, or None while the component does not answer yet."""
    try:
        response = httpx.get(
            f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=5
        )
    except httpx.TransportError:
        return None
    assert response.status_code == 200, response.text
    found: dict[str, Series] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


@pytest.fixture
def gpu_node(components: Components) -> Iterator[tuple[str, str]]:
    kube = components.kube
    name, model = kube.unique("metrics-gpu"), kube.unique("METRICS-GPU")
    k8s_testenv.create_fake_gpu_nodes(kube.env, [name], product=model)
    yield name, model
    kube.request("DELETE", f"/api/v1/nodes/{name}")


def account_token(kube: Any, namespace: str, account: str, cluster_role: str | None = None) -> str:
    """A token of a new ServiceAccount in ``namespace``, bound to ``cluster_role`` when given."""
    kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}},
    )
    if cluster_role is not None:
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{namespace}-{account}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        }
        kube.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    response = kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )
    response.raise_for_status()
    return str(response.json()["status"]["token"])


def test_the_scheduler_counts_admissions_and_the_operator_serves_jobs_and_gpus(
    components: Components, namespace: str, gpu_node: tuple[str, str]
) -> None:
    kube = components.kube
    node, model = gpu_node
    reader = account_token(kube, namespace, "prometheus", METRICS_READER_ROLE)
    tenant = account_token(kube, namespace, "tenant")
    operator_port, scheduler_port = free_port(), free_port()
    components.operator("--health-port", str(operator_port))
    components.scheduler("--health-port", str(scheduler_port))
    # A queue of this test's own: other tests leave jobs Pending for whichever scheduler starts next (their
    # namespaces go without waiting), and this scheduler may admit them too; they are counted under theirs.
    queue = kube.unique("metrics-queue")
    kube.create(
        QUEUES, {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Queue", "metadata": {"name": queue}, "spec": {}}
    )
    for name in ("first", "second"):
        document: dict[str, Any] = gpu_job(
            name,
            model,
            workers=1,
            gpus=2,
            jobtype="pytorch",
            cpu="1",
            memory="1Gi",
            annotations={"phalanx.dev/sim-duration-ms": "200"},
            scheduling={"queue": queue},
        )
        kube.create(JOBS.format(ns=namespace), document)
    for name in ("first", "second"):
        kube.wait_for(
            f"{JOBS.format(ns=namespace)}/{name}",
            lambda obj: obj.get("status", {}).get("phase") == "Succeeded",
            timeout=90,
            message=f"{name} to succeed",
        )

    scheduler = wait_until(lambda: scrape(scheduler_port, reader), 30, "the scheduler's /metrics to answer")
    # Other tests' jobs may be admitted by this process too, under their own queue; these two are this queue's.
    assert scheduler["phalanx_admissions_total"][(("queue", queue),)] == 2
    assert scheduler["phalanx_admission_latency_seconds_count"] == scheduler["phalanx_admissions_total"]
    assert sum(scheduler["phalanx_scheduling_cycle_seconds_count"].values()) >= 1

    def operator_state() -> dict[str, Series] | None:
        found = scrape(operator_port, reader)
        jobs = (found or {}).get("phalanx_jobs", {})
        return found if jobs.get((("namespace", namespace), ("phase", "Succeeded"), ("queue", queue))) else None

    operator = wait_until(operator_state, 30, "the operator's /metrics to show this test's jobs")
    assert operator["phalanx_jobs"][(("namespace", namespace), ("phase", "Succeeded"), ("queue", queue))] == 2
    assert operator["phalanx_gpus"][(("model", model), ("node", node))] == 8
    assert operator["phalanx_gpus_allocated"][(("model", model), ("node", node))] == 0
    assert "phalanx_metrics_read_errors" not in operator  # the operator's account may read all it reports

    # Who else asks: the components review each token with the API server, and serve only the reader.
    for port in (operator_port, scheduler_port):
        anonymous = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert anonymous.status_code == 401, anonymous.text
        assert METRICS_READER_ROLE in anonymous.text
        refused = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {tenant}"})
        assert refused.status_code == 403, refused.text
        assert refused.text.startswith(f"system:serviceaccount:{namespace}:tenant cannot get /metrics")
        assert namespace not in refused.text.split("cannot", 1)[1]  # the refusal tells nothing of the metrics
        forged = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": "Bearer not-a-token"})
        assert forged.status_code == 401, forged.text
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200  # the kubelet's probe
    kube.request("DELETE", f"{QUEUES}/{queue}")


def test_metrics_access_open_serves_anyone(components: Components) -> None:
    """``--metrics-access open``: a cluster of one team reads /metrics without a token."""
    port = free_port()
    components.scheduler("--health-port", str(port), "--metrics-access", "open")

    def answered() -> httpx.Response | None:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        except httpx.TransportError:
            return None

    response = wait_until(answered, 30, "the scheduler's /metrics to answer")
    assert response.status_code == 200, response.text
    assert 'phalanx_component_info{component="scheduler"' in response.text
