"""The components' /metrics on a real control plane: the scheduler counts its admissions, the operator the state.

The operator and phalanx-scheduler run as real processes under their ServiceAccounts (``components``) with a
health port each; two jobs run to the end on kwok nodes of a GPU model of this test's own, and the metrics read
back over HTTP are compared with what the API server says of the same objects.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import k8s_testenv
from components import Components
from support.postgres import free_port
from support.sim_jobs import gpu_job
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
Series = dict[tuple[tuple[str, str], ...], float]


def scrape(port: int) -> dict[str, Series] | None:
    """The metrics on the port, or None while the component does not answer yet."""
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    except httpx.TransportError:
        return None
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


def test_the_scheduler_counts_admissions_and_the_operator_serves_jobs_and_gpus(
    components: Components, namespace: str, gpu_node: tuple[str, str]
) -> None:
    kube = components.kube
    node, model = gpu_node
    operator_port, scheduler_port = free_port(), free_port()
    components.operator("--health-port", str(operator_port))
    components.scheduler("--health-port", str(scheduler_port))
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
        )
        kube.create(JOBS.format(ns=namespace), document)
    for name in ("first", "second"):
        kube.wait_for(
            f"{JOBS.format(ns=namespace)}/{name}",
            lambda obj: obj.get("status", {}).get("phase") == "Succeeded",
            timeout=90,
            message=f"{name} to succeed",
        )

    scheduler = wait_until(lambda: scrape(scheduler_port), 30, "the scheduler's /metrics to answer")
    # Other tests' jobs may share the session's scheduler queue name; these two were admitted by this process.
    assert sum(scheduler["phalanx_admissions_total"].values()) == 2
    assert scheduler["phalanx_admission_latency_seconds_count"] == scheduler["phalanx_admissions_total"]
    assert sum(scheduler["phalanx_scheduling_cycle_seconds_count"].values()) >= 1

    def operator_state() -> dict[str, Series] | None:
        found = scrape(operator_port)
        jobs = (found or {}).get("phalanx_jobs", {})
        return found if jobs.get((("namespace", namespace), ("phase", "Succeeded"), ("queue", "default"))) else None

    operator = wait_until(operator_state, 30, "the operator's /metrics to show this test's jobs")
    assert operator["phalanx_jobs"][(("namespace", namespace), ("phase", "Succeeded"), ("queue", "default"))] == 2
    assert operator["phalanx_gpus"][(("model", model), ("node", node))] == 8
    assert operator["phalanx_gpus_allocated"][(("model", model), ("node", node))] == 0
    assert "phalanx_metrics_read_errors" not in operator  # the operator's account may read all it reports
