"""NUMA alignment on Kubernetes goes only where the kubelet enforces it, on a real control plane.

What is real: the API server, phalanx-operator and phalanx-scheduler, two phalanx-node-agents (local processes
under Node-bound tokens) that each read a kubelet configuration file (``--kubelet-config``) and report its CPU
and topology manager policies on their Node, and the CLI's ``describe node``. What is simulated: the nodes
(kwok), and the kubelets whose configuration files the agents read (written by the test, as kubeadm would).

A job with ``topology: required`` that asks for whole CPUs (a Guaranteed Pod, exclusive cores) is bound to the
node whose kubelet runs the static CPU manager with the single-numa-node topology manager, never to the one
whose kubelet shares cores; with that node cordoned, the next such job waits saying why the other will not do.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import k8s_testenv
from components import Components, phalanx_cli, wait_alive
from support.sim_jobs import gpu_job
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
ALIGNED = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\n" + (
    "topologyManagerPolicy: single-numa-node\nreservedSystemCPUs: 0,1\n"
)
SHARED = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"  # the kubelet's defaults: none


@pytest.fixture
def two_kubelets(components: Components, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """Node ``a-…`` with a kubelet that shares cores, node ``b-…`` with one that aligns them; their GPU model."""
    kube = components.kube
    model = kube.unique("ALIGN-GPU")
    shared, aligned = kube.unique("a-shared"), kube.unique("b-aligned")
    k8s_testenv.create_fake_gpu_nodes(kube.env, [shared, aligned], product=model)
    for node, config in ((shared, SHARED), (aligned, ALIGNED)):
        path = tmp_path / f"{node}-kubelet.yaml"
        path.write_text(config)
        wait_alive(components.node_agent(node, "--kubelet-config", str(path), "--interval", "0.2"))
    for node in (shared, aligned):
        kube.wait_for(
            f"/api/v1/nodes/{node}",
            lambda n: "phalanx.dev/cpu-policy" in (n["metadata"].get("annotations") or {}),
            30,
            f"{node}'s agent reported its kubelet's policy",
        )
    wait_alive(components.operator())
    wait_alive(components.scheduler("--lease-duration", "3"))
    yield shared, aligned, model
    for node in (shared, aligned):
        kube.request("DELETE", f"/api/v1/nodes/{node}")


def aligned_job(name: str, model: str) -> dict[str, Any]:
    # Whole CPUs and no higher limit: a Guaranteed Pod, which the static CPU manager gives exclusive cores.
    return gpu_job(name, model, gpus=1, cpu="4", memory="4Gi", scheduling={"topology": "required"})


def test_a_job_requiring_alignment_goes_where_the_kubelet_enforces_it_and_waits_saying_why_elsewhere(
    components: Components, namespace: str, two_kubelets: tuple[str, str, str], tmp_path: Path
) -> None:
    kube = components.kube
    shared, aligned, model = two_kubelets
    kube.create(JOBS.format(ns=namespace), aligned_job("pinned", model))

    def bound_node() -> str | None:
        pods = kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=phalanx.dev/job=pinned")["items"]
        return str(pods[0]["spec"]["nodeName"]) if pods and pods[0]["spec"].get("nodeName") else None

    assert wait_until(bound_node, 60, "pinned's Pod bound") == aligned

    described = phalanx_cli(kube, namespace, tmp_path, "describe", "job", "pinned").stdout
    assert "Placement" in described and "which GPUs and cores is advisory" in " ".join(described.split()), described
    described = phalanx_cli(kube, namespace, tmp_path, "describe", "node", shared).stdout
    assert "CPU pinning: not enforced: the kubelet's cpuManagerPolicy is none, not static" in described, described
    described = phalanx_cli(kube, namespace, tmp_path, "describe", "node", aligned).stdout
    assert "NUMA alignment enforced (kubelet cpuManagerPolicy static, topologyManagerPolicy single-numa-node)" in (
        described
    ), described

    kube.http.patch(
        f"/api/v1/nodes/{aligned}",
        content='{"spec": {"unschedulable": true}}',
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()
    kube.create(JOBS.format(ns=namespace), aligned_job("waits", model))

    def waiting() -> str | None:
        job = kube.get(f"{JOBS.format(ns=namespace)}/waits")
        message = str((job.get("status") or {}).get("message") or "")
        return message if "does not enforce" in message else None

    message = wait_until(waiting, 60, "the second job waiting with the reason")
    assert f"node {shared} does not enforce: the kubelet's cpuManagerPolicy is none" in message, message
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=phalanx.dev/job=waits")["items"]
    assert pods == [], "nothing was placed on the node that shares cores"
