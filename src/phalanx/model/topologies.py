"""Built-in intra-node GPU topologies: which GPUs of a server are joined by NVLink, and on which NUMA node.

Real nodes report their topology (NVML through the node agent, or the embedded runtime's discovery). For
simulated inventories, kwok nodes and the simulator, three common 8-GPU servers are built in:

- ``dgx1-v100``: the DGX-1 (V100) hybrid cube-mesh. Each quad (0-3, 4-7) is fully linked and every GPU is
  also linked to its twin in the other quad; six links per GPU, some pairs doubled, as ``nvidia-smi topo -m``
  shows on that machine (NV1/NV2). Pairs such as 0-5 have no NVLink at all, so which four GPUs a job gets
  decides whether its all-reduce runs over NVLink.
- ``nvswitch``: HGX/DGX A100 or H100 class: every GPU reaches every other through NVSwitch at full bandwidth
  (one logical link per pair here; only "joined or not" matters to placement).
- ``pcie``: no NVLink; GPUs talk through PCIe switches and the CPU sockets.

In all three the first half of the GPUs hangs off socket/NUMA node 0 and the second half off NUMA node 1.
"""

from __future__ import annotations

from dataclasses import dataclass

DGX1_V100 = "dgx1-v100"
NVSWITCH = "nvswitch"
PCIE = "pcie"
TOPOLOGIES = (DGX1_V100, NVSWITCH, PCIE)

# GPU -> {peer: links} of the DGX-1 V100 hybrid cube-mesh.
_DGX1_LINKS: dict[int, dict[int, int]] = {
    0: {1: 1, 2: 1, 3: 2, 4: 2},
    1: {0: 1, 2: 2, 3: 1, 5: 2},
    2: {0: 1, 1: 2, 3: 2, 6: 1},
    3: {0: 2, 1: 1, 2: 2, 7: 1},
    4: {0: 2, 5: 1, 6: 1, 7: 2},
    5: {1: 2, 4: 1, 6: 2, 7: 1},
    6: {2: 1, 4: 1, 5: 2, 7: 2},
    7: {3: 1, 4: 2, 5: 1, 6: 2},
}


@dataclass(frozen=True, slots=True)
class GpuLayout:
    """One GPU of a built-in topology: its NUMA node and its NVLink peers (peer index -> links)."""

    index: int
    numa: int
    nvlinks: dict[int, int]


def gpu_layout(topology: str, count: int = 8) -> tuple[GpuLayout, ...]:
    """The GPUs of a server with a built-in ``topology``.

    Raises:
        ValueError: an unknown topology, or a count the topology does not come in (``dgx1-v100`` has 8 GPUs).
    """
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown GPU topology {topology!r}; use one of {', '.join(TOPOLOGIES)}")
    if count < 1:
        raise ValueError(f"a server needs at least one GPU, got {count}")
    if topology == DGX1_V100 and count != 8:
        raise ValueError(f"the {DGX1_V100} topology has exactly 8 GPUs, got {count}")
    half = max(1, count // 2)

    def numa(index: int) -> int:
        return 0 if index < half or count == 1 else 1

    if topology == DGX1_V100:
        return tuple(GpuLayout(index, numa(index), dict(_DGX1_LINKS[index])) for index in range(count))
    if topology == NVSWITCH:
        return tuple(
            GpuLayout(index, numa(index), {peer: 1 for peer in range(count) if peer != index}) for index in range(count)
        )
    return tuple(GpuLayout(index, numa(index), {}) for index in range(count))
