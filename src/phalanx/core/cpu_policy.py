"""Whether a Kubernetes node enforces the cores Phalanx's placement counts on, decided once from its kubelet's policy.

Phalanx places a replica that asks for whole CPUs with no higher limit (Guaranteed QoS) on exclusive cores, and
with ``topology: required`` only where those cores, its GPUs and its memory share a NUMA node. On one machine the
embedded runtime pins the cores itself. On Kubernetes the kubelet decides: exclusive cores come only from its
static CPU manager (``cpuManagerPolicy: static``), and they are NUMA-aligned with the Pod's devices only under a
topology manager that refuses what it cannot align (``topologyManagerPolicy: single-numa-node`` or
``restricted``); ``none`` and ``best-effort`` admit the Pod anyway. The kubelet picks the cores, not Phalanx:
what is enforced is exclusivity and alignment, Phalanx's choice of ids stays advisory there.

The node agent reads the policies from the kubelet's configuration file and reports them on the Node
(``phalanx.dev/cpu-policy``); ``kubelet_alignment`` turns them into the ``CpuPolicy`` the scheduler reads. A node
whose agent reported nothing is not known to enforce anything, so a job that requires alignment is not placed
there.
"""

from __future__ import annotations

from phalanx.model.nodes import CpuPolicy

#: Topology manager policies under which the kubelet refuses a Pod it cannot align (the others admit it anyway).
ALIGNING_TOPOLOGY_POLICIES = frozenset({"single-numa-node", "restricted"})
#: The CPU manager policy that gives Guaranteed Pods with whole CPUs exclusive cores.
EXCLUSIVE_CPU_POLICY = "static"


def kubelet_alignment(cpu_manager: str | None, topology_manager: str | None, *, unknown: str = "") -> CpuPolicy:
    """What a kubelet with these policies enforces.

    Args:
        cpu_manager: its ``cpuManagerPolicy`` (the kubelet's default is ``none``); None: not reported.
        topology_manager: its ``topologyManagerPolicy`` (default ``none``); None: not reported.
        unknown: why nothing was reported, when the agent could not say (used when both are None).
    """
    if cpu_manager is None and topology_manager is None:
        why = unknown or "its node agent reports no kubelet CPU policy (start it with --kubelet-config)"
        return CpuPolicy(enforced=False, reason=why)
    cpu = (cpu_manager or "none").lower()
    topology = (topology_manager or "none").lower()
    problems = []
    if cpu != EXCLUSIVE_CPU_POLICY:
        problems.append(f"the kubelet's cpuManagerPolicy is {cpu}, not {EXCLUSIVE_CPU_POLICY}: cores are shared")
    if topology not in ALIGNING_TOPOLOGY_POLICIES:
        problems.append(
            f"its topologyManagerPolicy is {topology}, which admits Pods it cannot align "
            f"(single-numa-node or restricted align)"
        )
    return CpuPolicy(enforced=not problems, cpu_manager=cpu, topology_manager=topology, reason="; ".join(problems))
