"""phalanx-node-agent on a real control plane: a kwok node gets its GPUs, topology and health from the agent.

The agent runs as a real process under its own ServiceAccount (``components``), reporting a simulated 2-socket,
8-GPU server (examples/inventories/dgx-2socket-8gpu.yaml) for a kwok node that starts with CPUs and memory only.
Faults are injected through the agent's fault file, as an operator would test a GPU health alert.

kwok keeps the status the agent patches (its node stages only refresh conditions, and only fill in capacity and
allocatable when a node has none), and the agent repairs any other writer's change at its next heartbeat, which
``test_the_agent_restores_gpu_allocatable_that_someone_else_overwrote`` checks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from components import Components, phalanx_cli, service_account_kubeconfig, wait_alive
from phalanx.adapters.kubernetes.objects import node_from_object
from phalanx.model.nodes import Node
from support.sim_jobs import gpu_job
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DGX = ROOT / "examples" / "inventories" / "dgx-2socket-8gpu.yaml"
PRODUCT = "NVIDIA-A100-SXM4-80GB"
# The inventory's hybrid cube-mesh: each quad fully linked, and each GPU to its twin in the other quad.
NVLINK_PAIRS = {(a, b) for q in (range(4), range(4, 8)) for a in q for b in q if a < b} | {(g, g + 4) for g in range(4)}


def gpus(node: dict[str, Any], field: str) -> str | None:
    value = node.get("status", {}).get(field, {}).get("nvidia.com/gpu")
    return None if value is None else str(value)


def annotation(node: dict[str, Any], key: str) -> str | None:
    value = (node["metadata"].get("annotations") or {}).get(key)
    return None if value is None else str(value)


def unhealthy(node: dict[str, Any]) -> list[int]:
    return [gpu.index for gpu in node_from_object(node).status.gpus if not gpu.healthy]


def events(kube: Any, node: str, reason: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.kind=Node,involvedObject.name={node},reason={reason}"
    return list(kube.get(f"/api/v1/namespaces/default/events?fieldSelector={selector}")["items"])


def inject(faults: Path, text: str) -> None:
    """Write the fault file atomically: the agent never reads a half-written list."""
    partial = faults.with_suffix(".partial")
    partial.write_text(text)
    partial.replace(faults)


def start_agent(components: Components, node: str, faults: Path, *extra: str) -> Any:
    agent = components.node_agent(
        node, "--inventory", str(DGX), "--fault-file", str(faults), "--interval", "0.2", *extra
    )
    wait_alive(agent)
    return agent


def test_the_agent_reports_gpus_topology_and_gpu_health(
    kube: Any, components: Components, node_name: str, tmp_path: Path
) -> None:
    faults = tmp_path / "faults"
    path = f"/api/v1/nodes/{node_name}"
    agent = start_agent(components, node_name, faults)

    # Discovery: labels, topology and 8 allocatable GPUs, as the scheduler reads them.
    node = kube.wait_for(path, lambda n: gpus(n, "allocatable") == "8", 30, "8 allocatable GPUs")
    # The annotations were written first: GPUs never appear on the Node without their topology.
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == PRODUCT
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["phalanx.dev/numa-nodes"] == "2"
    assert labels["type"] == "kwok"  # other labels are left alone
    assert annotation(node, "phalanx.dev/unhealthy-gpus") == ""
    assert annotation(node, "phalanx.dev/node-agent-heartbeat")
    assert gpus(node, "capacity") == "8"
    assert node["status"]["allocatable"]["cpu"] == "64"  # the kubelet's (kwok's) resources are untouched
    seen: Node = node_from_object(node)
    assert len(seen.status.gpus) == 8 and all(gpu.healthy for gpu in seen.status.gpus)
    assert {gpu.model for gpu in seen.status.gpus} == {PRODUCT}
    assert [gpu.numa for gpu in seen.status.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {(g.index, peer) for g in seen.status.gpus for peer in g.nvlinks if g.index < peer} == NVLINK_PAIRS
    assert seen.gpu_link(0, 4) == "NV" and seen.gpu_link(0, 5) == "SYS" and seen.gpu_link(4, 6) == "NV"
    numa_of_cpu = {cpu.id: cpu.numa for cpu in seen.status.cpus}
    assert [numa_of_cpu[c] for c in (0, 15, 16, 31, 32, 47, 48, 63)] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert not seen.spec.unschedulable

    # A fault on GPU 3: out of allocatable, named in the annotation, unhealthy to the scheduler, and an Event.
    inject(faults, "3\n")
    node = kube.wait_for(path, lambda n: gpus(n, "allocatable") == "7", 30, "GPU 3 out of allocatable")
    assert gpus(node, "capacity") == "8"
    assert annotation(node, "phalanx.dev/unhealthy-gpus") == "3"  # named before it left allocatable
    assert unhealthy(node) == [3]
    (warning,) = wait_until(lambda: events(kube, node_name, "GPUUnhealthy"), 30, "a GPUUnhealthy Event")
    assert warning["type"] == "Warning"
    assert "GPU 3 is unhealthy: listed in the fault file" in warning["message"]

    # Recovery: back in allocatable, the annotation empty, a Normal Event.
    inject(faults, "")
    node = kube.wait_for(path, lambda n: gpus(n, "allocatable") == "8", 30, "GPU 3 back in allocatable")
    assert unhealthy(node) in ([3], [])  # allocatable first; the annotation forgets GPU 3 right after
    node = kube.wait_for(path, lambda n: annotation(n, "phalanx.dev/unhealthy-gpus") == "", 30, "no unhealthy GPU")
    assert gpus(node, "allocatable") == "8" and unhealthy(node) == []
    (normal,) = wait_until(lambda: events(kube, node_name, "GPUHealthy"), 30, "a GPUHealthy Event")
    assert normal["type"] == "Normal" and "GPU 3 is healthy again" in normal["message"]
    assert agent.alive


def test_the_agent_restores_gpu_allocatable_that_someone_else_overwrote(
    kube: Any, components: Components, node_name: str, tmp_path: Path
) -> None:
    faults = tmp_path / "faults"
    inject(faults, "1,6")
    path = f"/api/v1/nodes/{node_name}"
    start_agent(components, node_name, faults, "--heartbeat-interval", "1")
    kube.wait_for(path, lambda n: gpus(n, "allocatable") == "6", 30, "GPUs 1 and 6 out of allocatable")
    wait_until(lambda: len(events(kube, node_name, "GPUUnhealthy")) == 2, 30, "a GPUUnhealthy Event per GPU")

    # Another writer (a kubelet recomputing allocatable from capacity, a stage, a person) puts all 8 back.
    response = kube.http.patch(
        f"{path}/status",
        json={"status": {"allocatable": {"nvidia.com/gpu": "8"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    response.raise_for_status()
    assert gpus(response.json(), "allocatable") == "8"

    node = kube.wait_for(path, lambda n: gpus(n, "allocatable") == "6", 30, "allocatable repaired by the agent")
    assert annotation(node, "phalanx.dev/unhealthy-gpus") == "1,6"
    assert unhealthy(node) == [1, 6]
    assert len(events(kube, node_name, "GPUUnhealthy")) == 2  # one per GPU; the repair is no new failure
    # `phalanx get nodes` on the cluster says which GPUs are unhealthy, as it does locally.
    shown = phalanx_cli(kube, "default", tmp_path, "get", "nodes")
    assert shown.returncode == 0, shown.stderr
    [row] = [line for line in shown.stdout.splitlines() if line.startswith(f"{node_name} ")]
    assert "UNHEALTHY" in shown.stdout.splitlines()[0] and "GPU 1,6" in row


JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"


def bound_pod(kube: Any, namespace: str, job: str) -> tuple[str, int, list[int]] | None:
    """The job's one bound, running Pod that is not being deleted: (node, attempt, GPUs); None while there is none."""
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=phalanx.dev/job={job}")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName")]
    if len(live) != 1 or (live[0].get("status") or {}).get("phase") != "Running":
        return None
    meta = live[0]["metadata"]
    gpus = [int(gpu) for gpu in meta["annotations"]["phalanx.dev/gpus"].split(",")]
    return live[0]["spec"]["nodeName"], int(meta["labels"]["phalanx.dev/attempt"]), gpus


def test_a_pod_on_a_gpu_that_fails_is_replaced_on_a_healthy_one(
    kube: Any, components: Components, node_name: str, namespace: str, tmp_path: Path
) -> None:
    faults = tmp_path / "faults"
    start_agent(components, node_name, faults)
    path = f"/api/v1/nodes/{node_name}"
    kube.wait_for(path, lambda n: gpus(n, "allocatable") == "8", 30, "8 allocatable GPUs")
    components.operator()
    components.scheduler()
    retry = {"restartPolicy": "OnFailure", "backoffSeconds": 0}
    kube.create(JOBS.format(ns=namespace), gpu_job("hit", PRODUCT, runPolicy=retry))
    where, attempt, [sick] = wait_until(lambda: bound_pod(kube, namespace, "hit"), 60, "hit's Pod running")
    assert where == node_name

    inject(faults, f"{sick}\n")
    moved = wait_until(
        lambda: (found := bound_pod(kube, namespace, "hit")) and found[1] > attempt and found,
        60,
        "hit's Pod replaced",
    )
    assert moved[0] == node_name and sick not in moved[2]
    job = kube.get(JOBS.format(ns=namespace) + "/hit")
    assert job["status"]["restarts"] == 1
    reasons = {c["reason"] for c in job["status"]["conditions"]}
    assert "GPUUnhealthy" in reasons

    # Six healthy GPUs are free: a 7-GPU job waits, and takes the GPU once it is healthy again.
    kube.create(JOBS.format(ns=namespace), gpu_job("wide", PRODUCT, gpus=7))
    kube.wait_for(
        JOBS.format(ns=namespace) + "/wide",
        lambda j: (j.get("status") or {}).get("reason") == "Waiting",
        60,
        "wide waiting",
    )
    assert not kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=phalanx.dev/job=wide")["items"]
    inject(faults, "")
    _, _, wide = wait_until(lambda: bound_pod(kube, namespace, "wide"), 60, "wide's Pod running")
    assert sick in wide and not set(wide) & set(moved[2])


def test_once_through_the_console_script(phalanx_installed: Any, node_name: str, tmp_path: Path) -> None:
    kube = phalanx_installed
    kubeconfig = service_account_kubeconfig(kube, "phalanx-node-agent", tmp_path / "agent.kubeconfig", node=node_name)
    script = shutil.which("phalanx-node-agent")
    assert script, "the phalanx-node-agent console script is not installed (pip install -e .)"
    env = {key: value for key, value in os.environ.items() if key not in ("KUBECONFIG", "PHALANX_FAULT_FILE")}
    command = [script, "--kubeconfig", str(kubeconfig), "--inventory", str(DGX), "--health-port", "0", "--once"]

    done = subprocess.run(command, env={**env, "NODE_NAME": node_name}, capture_output=True, timeout=60)

    assert done.returncode == 0, done.stderr.decode()
    node = kube.get(f"/api/v1/nodes/{node_name}")
    assert gpus(node, "allocatable") == "8"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == PRODUCT
    missing = subprocess.run([*command, "--node-name", "no-such-node"], env=env, capture_output=True, timeout=60)
    assert missing.returncode == 1
    assert b"node no-such-node not updated" in missing.stderr
