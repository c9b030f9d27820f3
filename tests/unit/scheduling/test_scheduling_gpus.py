"""GPU choice: NVLink sets, best fit, topology rules, model filter, health, and GPU sharing.

The simulated server's NVLink is a hybrid cube-mesh: quads 0-3 and 4-7 are fully linked, plus 0-4, 1-5, 2-6,
3-7; GPUs 0-3 sit on NUMA node 0 and 4-7 on NUMA node 1.
"""

from __future__ import annotations

import pytest
from scheduling_builders import (
    DGX_MODEL,
    admission,
    changed,
    dgx,
    hold,
    make_job,
    make_node,
    run,
    snapshot,
    two_nodes,
    waiting_reason,
)


def gpus_for(count: int, held: list[int], *, topology: str = "preferred") -> tuple[int, ...] | str:
    """The GPUs a single ``count``-GPU replica gets with ``held`` GPUs taken, or its waiting reason."""
    holdings = [hold("dgx-0", gpus=held)] if held else []
    decisions = run(snapshot(dgx(), holdings), make_job("job").replicas(1, gpu=count).topology(topology))
    if decisions.admitted:
        return decisions.admitted[0].assignments[0].gpus
    return waiting_reason(decisions, "job")


@pytest.mark.parametrize(
    ("count", "held", "expected"),
    [
        pytest.param(1, [], (0,), id="one-gpu-lowest-index"),
        pytest.param(2, [], (0, 1), id="two-gpus-joined-on-one-numa"),
        pytest.param(4, [], (0, 1, 2, 3), id="four-gpus-a-full-quad"),
        pytest.param(8, [], tuple(range(8)), id="eight-gpus-all"),
        pytest.param(2, [1, 2, 3, 4], (5, 6), id="two-nvlinked-not-lowest-unlinked-0-5"),
        pytest.param(4, [1], (4, 5, 6, 7), id="four-fully-linked-quad-over-lowest-indices"),
        pytest.param(2, [1, 2, 3, 5, 6, 7], (0, 4), id="two-linked-across-numa-beats-nothing"),
    ],
)
def test_nvlink_connected_sets_are_chosen(count: int, held: list[int], expected: tuple[int, ...]) -> None:
    assert gpus_for(count, held) == expected


@pytest.mark.parametrize(
    ("links", "numa", "count", "topology", "expected"),
    [
        pytest.param([(0, 2), (1, 3)], [0, 0, 1, 1], 2, "preferred", (0, 2), id="nvlink-beats-same-numa"),
        pytest.param([(0, 2), (1, 3)], [0, 0, 1, 1], 2, "none", (0, 1), id="topology-none-ignores-nvlink"),
        pytest.param([(1, 2), (2, 3), (1, 3)], [0, 0, 0, 0], 3, "preferred", (1, 2, 3), id="linked-triangle"),
        pytest.param(
            [(0, 1), (1, 2), (0, 2)], [0, 0, 1, 1], 3, "required", (0, 1, 2), id="required-linked-across-numa"
        ),
    ],
)
def test_nvlink_outranks_numa_and_indices(
    links: list[tuple[int, int]], numa: list[int], count: int, topology: str, expected: tuple[int, ...]
) -> None:
    node = make_node("box").cpus(sockets=2, cores=2).gpus(4, numa=numa, links=links).obj()
    decisions = run(snapshot(node), make_job("job").replicas(1, gpu=count).topology(topology))
    assert admission(decisions, "job").assignments[0].gpus == expected


@pytest.mark.parametrize(
    ("count", "held", "expected"),
    [
        pytest.param(1, [0], (1,), id="single-gpu-goes-to-the-fuller-numa-node"),
        pytest.param(1, [4], (5,), id="single-gpu-fills-numa-1-when-it-is-fuller"),
        pytest.param(2, [0], (1, 2), id="pair-keeps-the-free-quad-whole"),
        pytest.param(3, [0], (1, 2, 3), id="triple-fills-the-broken-quad"),
    ],
)
def test_best_fit_keeps_large_free_blocks_whole(count: int, held: list[int], expected: tuple[int, ...]) -> None:
    assert gpus_for(count, held) == expected


@pytest.mark.parametrize(
    ("count", "held", "topology", "expected"),
    [
        pytest.param(3, [1, 2, 5, 6], "preferred", (0, 3, 4), id="preferred-takes-the-best-imperfect-set"),
        pytest.param(
            3,
            [1, 2, 5, 6],
            "required",
            "needs 1 replica (3 GPUs, 1 CPU exclusive, 2Gi); it does not fit: node dgx-0 has 4 GPUs free but "
            "no 3 of them joined by NVLink or on one NUMA node (topology required)",
            id="required-refuses-an-unlinked-cross-numa-set",
        ),
        pytest.param(2, [1, 2, 3, 5, 6, 7], "required", (0, 4), id="required-accepts-linked-0-4-across-numa"),
        pytest.param(2, [1, 2, 3, 4, 6, 7], "preferred", (0, 5), id="preferred-accepts-an-unlinked-pair"),
        pytest.param(2, [0, 2, 3, 4, 6, 7], "required", (1, 5), id="required-accepts-linked-1-5"),
        pytest.param(2, [0, 1, 2, 3], "required", (4, 5), id="required-accepts-one-numa-node"),
    ],
)
def test_topology_rules(count: int, held: list[int], topology: str, expected: tuple[int, ...] | str) -> None:
    assert gpus_for(count, held, topology=topology) == expected


def test_required_refuses_an_unlinked_pair_across_numa_nodes() -> None:
    reason = gpus_for(2, [1, 2, 3, 4, 6, 7], topology="required")
    assert isinstance(reason, str)
    assert reason.endswith(
        "node dgx-0 has 2 GPUs free but no 2 of them joined by NVLink or on one NUMA node (topology required)"
    )


@pytest.mark.parametrize(
    "model",
    [
        pytest.param(DGX_MODEL, id="exact"),
        pytest.param(DGX_MODEL.lower(), id="case-insensitive"),
        pytest.param(None, id="any-model"),
    ],
)
def test_gpu_model_matches(model: str | None) -> None:
    decisions = run(snapshot(dgx()), make_job("job").replicas(1, gpu=2, gpu_model=model))
    assert admission(decisions, "job").assignments[0].gpus == (0, 1)


@pytest.mark.parametrize(
    "model",
    [pytest.param("V100", id="other-model"), pytest.param("NVIDIA-A100", id="prefix-is-not-a-match")],
)
def test_gpu_model_filter_refuses_other_models(model: str) -> None:
    decisions = run(snapshot(dgx()), make_job("job").replicas(1, gpu=1, gpu_model=model))
    assert waiting_reason(decisions, "job") == (f"needs GPU model {model}; no node has it (nodes have {DGX_MODEL})")


def test_gpu_model_picks_the_node_that_has_it() -> None:
    nodes = [dgx(), *two_nodes()]
    job = make_job("job").replicas(2, gpu=2, gpu_model="nvidia-a100-pcie-40gb")
    placed = admission(run(snapshot(nodes), job), "job").assignments
    assert {a.node for a in placed} <= {"node-a", "node-b"}


def test_gpu_model_on_a_cpu_only_replica_constrains_nothing() -> None:
    decisions = run(snapshot(dgx()), make_job("job").replicas(1, cpu=2000, gpu_model="V100"))
    assert admission(decisions, "job").assignments[0].gpus == ()


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        pytest.param(1, (1,), id="one-gpu-skips-the-unhealthy-one"),
        pytest.param(4, (4, 5, 6, 7), id="four-gpus-avoid-the-broken-quad"),
        pytest.param(
            8,
            "a replica needs 8 GPUs but no node has that many healthy ones: the largest has 7 healthy GPUs and "
            "1 unhealthy (node dgx-0)",
            id="eight-gpus-cannot-fit",
        ),
    ],
)
def test_unhealthy_gpus_are_never_chosen(count: int, expected: tuple[int, ...] | str) -> None:
    decisions = run(snapshot(changed(dgx(), unhealthy=[0])), make_job("job").replicas(1, gpu=count))
    if isinstance(expected, str):
        assert waiting_reason(decisions, "job") == expected
    else:
        assert admission(decisions, "job").assignments[0].gpus == expected


def test_a_gang_that_only_unhealthy_gpus_would_let_fit_says_so() -> None:
    """docs/scheduling.md, GPU health: a job that only a sick GPU would fit waits, saying so.

    Two 4-GPU nodes with GPU 0 of each unhealthy: a 4-GPU replica must not read as if no node had 4 GPUs.
    """
    nodes = [changed(node, unhealthy=[0]) for node in two_nodes()]
    decisions = run(snapshot(nodes), make_job("job").replicas(1, gpu=4))
    assert waiting_reason(decisions, "job") == (
        "a replica needs 4 GPUs but no node has that many healthy ones: the largest has 3 healthy GPUs and "
        "1 unhealthy (node node-a)"
    )


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        pytest.param(None, "needs a GPU; no schedulable node has a healthy one", id="any-model"),
        pytest.param(
            DGX_MODEL,
            f"needs GPU model {DGX_MODEL}; every such GPU on a schedulable node is unhealthy",
            id="named-model",
        ),
    ],
)
def test_all_gpus_unhealthy(model: str | None, reason: str) -> None:
    node = changed(dgx(), unhealthy=range(8))
    decisions = run(snapshot(node), make_job("job").replicas(1, gpu=1, gpu_model=model))
    assert waiting_reason(decisions, "job") == reason


def test_gpu_shares_pack_onto_one_gpu_and_whole_requests_take_the_rest() -> None:
    shares = make_job("shares").replicas(2, cpu=500, gpu_milli=500).created(0)
    whole = make_job("whole").replicas(1, gpu=7).created(1)
    more = make_job("more").replicas(1, gpu=1).created(2)
    decisions = run(snapshot(dgx()), shares, whole, more)
    assert [(a.gpus, a.gpu_milli) for a in admission(decisions, "shares").assignments] == [((0,), 500)] * 2
    assert admission(decisions, "whole").assignments[0].gpus == (1, 2, 3, 4, 5, 6, 7)
    assert admission(decisions, "whole").assignments[0].gpu_milli == 0
    assert waiting_reason(decisions, "more").startswith("needs 1 GPU on one node; largest free block is 0")


@pytest.mark.parametrize(
    ("share", "expected_gpu"),
    [
        pytest.param(300, 2, id="fits-the-partly-used-gpu-exactly"),
        pytest.param(400, 0, id="too-big-for-it-goes-to-a-free-gpu"),
    ],
)
def test_gpu_share_goes_where_it_fits_tightest(share: int, expected_gpu: int) -> None:
    snap = snapshot(dgx(), [hold("dgx-0", gpus=[2], gpu_milli=700)])
    decisions = run(snap, make_job("job").replicas(1, gpu_milli=share))
    assert admission(decisions, "job").assignments[0].gpus == (expected_gpu,)


def test_whole_gpu_requests_avoid_shared_gpus() -> None:
    snap = snapshot(dgx(), [hold("dgx-0", gpus=[index], gpu_milli=100) for index in range(4)])
    assert run(snap, make_job("job").replicas(1, gpu=4)).admitted[0].assignments[0].gpus == (4, 5, 6, 7)
    assert waiting_reason(run(snap, make_job("job").replicas(1, gpu=5)), "job") == (
        "needs 5 GPUs on one node; largest free block is 4 on node dgx-0 (4 free in total)"
    )


def test_gpu_share_without_room_names_the_most_free_gpu() -> None:
    holdings = [hold("dgx-0", gpus=list(range(7))), hold("dgx-0", gpus=[7], gpu_milli=600)]
    decisions = run(snapshot(dgx(), holdings), make_job("job").replicas(1, gpu_milli=500))
    assert waiting_reason(decisions, "job") == (
        "needs 1 replica (500 milli-GPU, 1 CPU exclusive, 2Gi); it does not fit: "
        "no GPU has 500 milli-GPU free; the most on one GPU is 400 (node dgx-0, GPU 7)"
    )
