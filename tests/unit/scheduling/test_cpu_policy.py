"""Where exclusive, NUMA-aligned cores are enforced (``core.cpu_policy``), and the scheduler's use of it.

A job with ``topology: required`` that asks for whole CPUs goes only to nodes that enforce alignment (the
embedded runtime's own pinning; on Kubernetes a kubelet with the static CPU manager and an aligning topology
manager); its waiting reason says why the others do not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from scheduling_builders import admission, dgx, make_job, run, snapshot, waiting_reason

from phalanx.adapters.kubernetes.kubelet_config import (
    CPU_POLICY_ANNOTATION,
    cpu_policy_annotation,
    read_kubelet_policy,
)
from phalanx.adapters.kubernetes.objects import node_from_object
from phalanx.core.cpu_policy import kubelet_alignment
from phalanx.model.nodes import CpuPolicy, Node


@pytest.mark.parametrize(
    ("cpu", "topology", "enforced", "said"),
    [
        ("static", "single-numa-node", True, ""),
        ("static", "restricted", True, ""),
        ("static", "best-effort", False, "its topologyManagerPolicy is best-effort, which admits Pods it cannot align"),
        ("none", "single-numa-node", False, "the kubelet's cpuManagerPolicy is none, not static: cores are shared"),
        (None, "none", False, "the kubelet's cpuManagerPolicy is none, not static"),
    ],
)
def test_only_the_static_cpu_manager_with_an_aligning_topology_manager_enforces(
    cpu: str | None, topology: str, enforced: bool, said: str
) -> None:
    policy = kubelet_alignment(cpu, topology)
    assert policy.enforced is enforced
    assert said in policy.reason and bool(policy.reason) is not enforced


def test_a_node_whose_agent_reported_nothing_is_not_known_to_enforce() -> None:
    policy = kubelet_alignment(None, None)
    assert not policy.enforced and "--kubelet-config" in policy.reason


def with_policy(node: Node, policy: CpuPolicy, name: str) -> Node:
    return node.model_copy(
        update={
            "metadata": node.metadata.model_copy(update={"name": name}),
            "status": node.status.model_copy(update={"cpu_policy": policy}),
        }
    )


def test_a_required_topology_job_with_whole_cpus_goes_only_where_alignment_is_enforced() -> None:
    unaligned = with_policy(dgx(), kubelet_alignment("none", "none"), "a-unaligned")
    aligned = with_policy(dgx(), kubelet_alignment("static", "single-numa-node"), "b-aligned")
    job = make_job("job").replicas(1, cpu=8000, gpu=2).topology("required")
    (placed,) = admission(run(snapshot([unaligned, aligned]), job), "job").assignments
    assert placed.node == "b-aligned"


def test_preferred_topology_and_shared_cpus_go_anywhere() -> None:
    unaligned = with_policy(dgx(), kubelet_alignment("none", "none"), "a-unaligned")
    preferred = make_job("preferred").replicas(1, cpu=8000, gpu=2)
    assert admission(run(snapshot(unaligned), preferred), "preferred").assignments[0].node == "a-unaligned"
    shared = make_job("shared").replicas(1, cpu=1500, gpu=2).topology("required")
    assert admission(run(snapshot(unaligned), shared), "shared").assignments[0].node == "a-unaligned"


def test_the_waiting_reason_names_the_node_and_its_kubelet_policy() -> None:
    unaligned = with_policy(dgx(), kubelet_alignment("none", "none"), "a-unaligned")
    decisions = run(snapshot(unaligned), make_job("job").replicas(1, cpu=8000).topology("required"))
    assert waiting_reason(decisions, "job").endswith(
        "it requires NUMA-aligned exclusive cores (topology required), which node a-unaligned does not enforce: "
        "the kubelet's cpuManagerPolicy is none, not static: cores are shared; its topologyManagerPolicy is none, "
        "which admits Pods it cannot align (single-numa-node or restricted align)"
    )


def test_the_agent_reads_the_kubelet_configuration_and_the_scheduler_reads_its_node(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\n"
        "topologyManagerPolicy: single-numa-node\nreservedSystemCPUs: 0,1\n"
    )
    read = read_kubelet_policy(config)
    assert read == {"cpuManagerPolicy": "static", "topologyManagerPolicy": "single-numa-node"}
    node = {"metadata": {"name": "n", "annotations": {CPU_POLICY_ANNOTATION: cpu_policy_annotation(read)}}}
    policy = node_from_object(node).status.cpu_policy
    assert policy.enforced and (policy.cpu_manager, policy.topology_manager) == ("static", "single-numa-node")

    defaults = tmp_path / "defaults.yaml"
    defaults.write_text("kind: KubeletConfiguration\n")
    assert read_kubelet_policy(defaults) == {"cpuManagerPolicy": "none", "topologyManagerPolicy": "none"}
    missing = read_kubelet_policy(tmp_path / "absent.yaml")
    node["metadata"]["annotations"][CPU_POLICY_ANNOTATION] = cpu_policy_annotation(missing)
    policy = node_from_object(node).status.cpu_policy
    assert not policy.enforced and "cannot read the kubelet configuration" in policy.reason
    assert not node_from_object({"metadata": {"name": "silent"}}).status.cpu_policy.enforced
