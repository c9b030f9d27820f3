"""Data locality through phalanx-scheduler: of two nodes that fit, the one caching the job's dataset.

Two identical fresh 8-GPU kwok nodes (a GPU model only they have); the later one by name carries the label a
node caching a dataset has, ``dataset.phalanx.dev/<name>=<version>``. A job without datasets goes to the first
node (node order breaks the tie); a job reading the dataset goes to the caching node, although the first node,
now partly used, is where every other tier would put it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import k8s_testenv
from components import Components
from support.sim_jobs import gpu_job
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
DATASETS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/datasets"
VERSION = "sha256-5f2b9c"


def job(name: str, model: str, datasets: list[dict[str, Any]]) -> dict[str, Any]:
    return gpu_job(name, model, datasets=datasets)


@pytest.fixture
def two_nodes(components: Components) -> Iterator[tuple[str, str, str]]:
    """(first node, caching node, GPU model): the caching node sorts after the first."""
    kube = components.kube
    first, caching, model = kube.unique("locality-a"), kube.unique("locality-b"), kube.unique("L4-DATA")
    k8s_testenv.create_fake_gpu_nodes(kube.env, [first, caching], product=model)
    yield first, caching, model
    for name in (first, caching):
        kube.request("DELETE", f"/api/v1/nodes/{name}")


def bound_node(components: Components, namespace: str, job_name: str) -> str:
    def node() -> str | None:
        pods = components.kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=phalanx.dev/job={job_name}")
        found = [pod["spec"].get("nodeName") for pod in pods["items"]]
        return found[0] if len(found) == 1 and found[0] else None

    return str(wait_until(node, 60, f"{job_name}'s pod bound"))


def test_the_scheduler_picks_the_node_that_caches_the_jobs_data(
    components: Components, namespace: str, two_nodes: tuple[str, str, str]
) -> None:
    kube = components.kube
    first, caching, model = two_nodes
    response = kube.http.patch(
        f"/api/v1/nodes/{caching}",
        json={"metadata": {"labels": {"dataset.phalanx.dev/imagenet": VERSION}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    response.raise_for_status()
    datasets = DATASETS.format(ns=namespace)
    created = kube.create(
        datasets,
        {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "Dataset",
            "metadata": {"name": "imagenet"},
            "spec": {"source": {"url": "s3://datasets/imagenet/"}, "distribution": "replicate"},
        },
    )
    created["status"] = {"phase": "Ready", "version": VERSION, "bytes": 150 * 2**30, "files": 1000}
    kube.request("PUT", f"{datasets}/imagenet/status", created).raise_for_status()

    components.operator()
    components.scheduler()
    jobs = JOBS.format(ns=namespace)
    kube.create(jobs, job("plain", model, []))
    assert bound_node(components, namespace, "plain") == first, "without data the tie goes to the first node"

    kube.create(jobs, job("reader", model, [{"name": "imagenet"}]))
    assert bound_node(components, namespace, "reader") == caching
