"""Each placement plugin on a case built so that it, and not its neighbours, decides the node (or the GPU)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from scheduling_builders import T0, Holding, admission, hold, make_job, make_node, run, snapshot

from phalanx.core.scheduling import (
    ClusterSnapshot,
    DatasetNeed,
    Decisions,
    SchedulerConfig,
    SchedulingSession,
    TaskShape,
    schedule,
)
from phalanx.model.nodes import Node
from phalanx.model.topologies import DGX1_V100, gpu_layout

GI = 2**30


def node_of(decisions: Decisions, name: str) -> str:
    return admission(decisions, name).assignments[0].node


def small_busy_and_big_empty() -> ClusterSnapshot:
    """``big``: 8 free GPUs. ``small``: 2 GPUs, one taken. Same CPUs and memory, nothing else held."""
    big = make_node("big").cpus(cores=8).memory(256 * GI).gpus(8).obj()
    small = make_node("small").cpus(cores=8).memory(256 * GI).gpus(2).obj()
    return snapshot([big, small], [hold("small", cpu_milli=500, gpus=[0])])


def test_binpack_takes_the_node_with_the_least_room_left() -> None:
    decisions = run(small_busy_and_big_empty(), make_job("one").replicas(1, cpu=500, gpu=1).placement("binpack"))
    assert node_of(decisions, "one") == "small"


def test_pack_takes_the_most_allocated_node() -> None:
    decisions = run(small_busy_and_big_empty(), make_job("one").replicas(1, cpu=500, gpu=1).placement("pack"))
    assert node_of(decisions, "one") == "small"


def test_spread_takes_the_least_allocated_node() -> None:
    decisions = run(small_busy_and_big_empty(), make_job("one").replicas(1, cpu=500, gpu=1).placement("spread"))
    assert node_of(decisions, "one") == "big"


def shares_snapshot() -> ClusterSnapshot:
    """``tight``: one GPU with 400 milli free. ``roomy``: one GPU with 700 milli free."""
    tight = make_node("tight").cpus(cores=4).gpus(1).obj()
    roomy = make_node("roomy").cpus(cores=4).gpus(1).obj()
    return snapshot([tight, roomy], [hold("tight", cpu_milli=100, gpus=[0], gpu_milli=600),
                                     hold("roomy", cpu_milli=100, gpus=[0], gpu_milli=300)])  # fmt: skip


def test_fragmentation_keeps_room_the_typical_work_can_use_where_best_fit_would_not() -> None:
    # The typical task takes 400 milli-GPU. A 300 share on "tight" leaves 100 there, which no typical task can
    # use (fragmentation grows by 100); on "roomy" it leaves 400, still one typical task (no growth).
    config = SchedulerConfig(workload=(TaskShape(cpu_milli=0, gpus=1, gpu_milli=400, weight=1.0),))
    job = make_job("share").replicas(1, cpu=100, gpu_milli=300)
    by_fragmentation = schedule(shares_snapshot(), [job.placement("fragmentation").obj()], T0, config)
    by_best_fit = schedule(shares_snapshot(), [job.placement("binpack").obj()], T0, config)
    assert node_of(by_fragmentation, "share") == "roomy"
    assert node_of(by_best_fit, "share") == "tight"


def test_fragmentation_picks_the_gpu_of_a_share_by_the_same_measure() -> None:
    node = make_node("n").cpus(cores=4).gpus(2).obj()
    # GPU 0 has 450 free, GPU 1 has 700 free; the typical task takes 250. A 300 share on GPU 0 would leave 150
    # there, which no typical task can use; on GPU 1 it leaves 400, still usable. Best fit (least room left)
    # would take GPU 0.
    snap = snapshot([node], [hold("n", cpu_milli=100, gpus=[0], gpu_milli=550),
                             hold("n", cpu_milli=100, gpus=[1], gpu_milli=300)])  # fmt: skip
    config = SchedulerConfig(workload=(TaskShape(cpu_milli=0, gpus=1, gpu_milli=250, weight=1.0),))
    job = make_job("share").replicas(1, cpu=100, gpu_milli=300).placement("fragmentation").obj()
    assert admission(schedule(snap, [job], T0, config), "share").assignments[0].gpus == (1,)


def test_fragmentation_growth_beyond_the_cap_ties_and_the_node_order_decides(monkeypatch: Any) -> None:
    from phalanx.core.scheduling import scoring

    # Typical work: 8-GPU and 6-GPU tasks, equally often. One GPU on "a" (8 free) leaves 7: the 8-GPU task no
    # longer fits, fragmentation grows by 3.5 GPUs; on "b" (6 free) it grows by 2 (from 3 to 5). Both are at
    # or past the 2-GPU cap, so they tie and the node order takes "a"; the exact growth would take "b".
    a = make_node("a").cpus(cores=16).gpus(8).obj()
    b = make_node("b").cpus(cores=16).gpus(8).obj()
    snap = snapshot([a, b], [hold("b", cpu_milli=100, gpus=[0, 1])])
    shapes = (TaskShape(cpu_milli=0, gpus=8, gpu_milli=1000, weight=1.0), TaskShape(0, 6, 1000, 1.0))
    config = SchedulerConfig(workload=shapes)
    job = make_job("one").replicas(1, cpu=100, gpu=1).placement("fragmentation").obj()
    assert node_of(schedule(snap, [job], T0, config), "one") == "a"
    monkeypatch.setattr(scoring, "FRAGMENTATION_CAP", 10**12)
    assert node_of(schedule(snap, [job], T0, config), "one") == "b"


def test_random_is_seeded_and_spreads_identical_choices() -> None:
    nodes = [make_node(f"n{i}").cpus(cores=8).gpus(8).obj() for i in range(8)]
    jobs = [make_job(f"j{i}").replicas(1, cpu=500, gpu=1).placement("random").obj() for i in range(16)]

    def placements(seed: int) -> list[str]:
        decisions = schedule(snapshot(nodes), jobs, T0, SchedulerConfig(seed=seed))
        return [node_of(decisions, f"j{i}") for i in range(16)]

    first = placements(1)
    assert placements(1) == first
    assert placements(2) != first
    assert len(Counter(first)) >= 4  # 16 picks over 8 equal nodes; first fit would use one node


def cube_mesh(name: str, taken: list[int]) -> tuple[Node, list[Holding]]:
    layout = gpu_layout(DGX1_V100)
    links = sorted({(g.index, p) for g in layout for p in g.nvlinks if g.index < p})
    builder = make_node(name).cpus(sockets=2, cores=8).memory(512 * GI)
    node = builder.gpus(8, numa=[g.numa for g in layout], links=links).obj()
    return node, [hold(name, cpu_milli=100, gpus=[gpu]) for gpu in taken]


def test_topology_fit_prefers_the_node_whose_free_gpus_are_all_nvlinked() -> None:
    # "aaa" has GPUs 0, 1, 2 and 5 taken: its four free GPUs (3, 4, 6, 7) are not all linked. "bbb" has 0-3 taken:
    # 4-7 are a fully linked quad. Equal allocation, so only the topology tells them apart, and the name order
    # alone would pick "aaa".
    a, held_a = cube_mesh("aaa", [0, 1, 2, 5])
    b, held_b = cube_mesh("bbb", [0, 1, 2, 3])
    job = make_job("wide").replicas(1, cpu=100, gpu=4)
    for placement in ("auto", "pack"):
        decisions = run(snapshot([a, b], held_a + held_b), job.placement(placement))
        assert node_of(decisions, "wide") == "bbb", placement
        assert admission(decisions, "wide").assignments[0].gpus == (4, 5, 6, 7)
    without = run(snapshot([a, b], held_a + held_b), job.placement("pack").topology("none"))
    assert node_of(without, "wide") == "aaa"


def test_auto_keeps_a_gang_on_one_node_when_it_can() -> None:
    nodes = [make_node(f"n{i}").cpus(cores=8).memory(128 * GI).gpus(4).obj() for i in range(3)]
    decisions = run(snapshot(nodes), make_job("gang").replicas(4, cpu=500, gpu=1))
    assert len({a.node for a in admission(decisions, "gang").assignments}) == 1


def test_a_session_learns_the_workload_profile_from_the_jobs_it_sees() -> None:
    session = SchedulingSession(shares_snapshot())
    assert not session.profile()
    session.cycle([make_job("share").replicas(1, cpu=100, gpu_milli=300).obj()], T0)
    shapes = session.profile().shapes
    assert [(s.gpus, s.gpu_milli) for s in shapes] == [(1, 300)]


def labelled(node: Node, **datasets: str) -> Node:
    """The node with a ``dataset.phalanx.dev/<name>=<version>`` label per cached dataset."""
    labels = {f"dataset.phalanx.dev/{name}": version for name, version in datasets.items()}
    return node.model_copy(update={"metadata": node.metadata.model_copy(update={"labels": labels})})


def two_equal_nodes(**caches: dict[str, str]) -> ClusterSnapshot:
    nodes = [make_node(name).cpus(cores=8).memory(64 * GI).gpus(4).obj() for name in ("node-a", "node-b")]
    return snapshot([labelled(node, **caches.get(node.metadata.name.replace("-", "_"), {})) for node in nodes], [])


def reading(job: Any, *needs: DatasetNeed) -> Any:
    return replace(job.obj(), datasets=needs)


def test_data_locality_takes_the_node_that_caches_the_dataset() -> None:
    cluster = two_equal_nodes(node_b={"imagenet": "v1"})
    needs = DatasetNeed("imagenet", "v1", 20 * GI)
    for placement in ("auto", "pack", "spread"):
        job = make_job("train").replicas(1, cpu=1000, gpu=1).placement(placement)
        assert node_of(schedule(cluster, [reading(job, needs)], T0), "train") == "node-b", placement
    # Without datasets the same job goes to the first node by name: the plugin alone made the difference.
    plain = make_job("train").replicas(1, cpu=1000, gpu=1)
    assert node_of(schedule(cluster, [plain.obj()], T0), "train") == "node-a"


def test_data_locality_needs_the_version_and_weighs_by_bytes() -> None:
    job = make_job("train").replicas(1, cpu=1000, gpu=1)
    stale = two_equal_nodes(node_b={"imagenet": "v0"})
    assert node_of(schedule(stale, [reading(job, DatasetNeed("imagenet", "v1", 20 * GI))], T0), "train") == "node-a"
    assert node_of(schedule(stale, [reading(job, DatasetNeed("imagenet", None, 20 * GI))], T0), "train") == "node-b"
    # node-a caches the big dataset, node-b the small one: fewer bytes to fetch on node-a.
    split = two_equal_nodes(node_a={"big": "v1"}, node_b={"small": "v1"})
    needs = (DatasetNeed("big", "v1", 50 * GI), DatasetNeed("small", "v1", 1 * GI))
    assert node_of(schedule(split, [reading(job, *needs)], T0), "train") == "node-a"
    flipped = (DatasetNeed("big", "v1", 1 * GI), DatasetNeed("small", "v1", 50 * GI))
    assert node_of(schedule(split, [reading(job, *flipped)], T0), "train") == "node-b"


def test_data_locality_yields_to_keeping_a_gang_together() -> None:
    # Two 3-GPU replicas fit together only on node-a; node-b (5 GPUs free) holds one of them and the data: it
    # loses, since a gang split over two nodes costs every step of the job.
    a = make_node("node-a").cpus(cores=8).memory(64 * GI).gpus(8).obj()
    b = labelled(make_node("node-b").cpus(cores=8).memory(64 * GI).gpus(8).obj(), data="v1")
    cluster = snapshot([a, b], [hold("node-b", cpu_milli=500, gpus=[0, 1, 2])])
    job = make_job("gang").replicas(2, cpu=1000, gpu=3)
    decisions = schedule(cluster, [reading(job, DatasetNeed("data", "v1", 10 * GI))], T0)
    assert {a.node for a in admission(decisions, "gang").assignments} == {"node-a"}
    single = make_job("one").replicas(1, cpu=1000, gpu=3)
    alone = schedule(cluster, [reading(single, DatasetNeed("data", "v1", 10 * GI))], T0)
    assert node_of(alone, "one") == "node-b", "the test cannot tell: node-b must suit one replica"


def test_auto_counts_the_share_room_the_cpu_cannot_feed() -> None:
    # The typical task takes 250 milli-GPU and 2 CPUs. "a" has a free GPU and 20 CPUs, "b" a free GPU and 6 CPUs:
    # a 500 share with 1 CPU leaves a typical task room on both, so FGD's measure ties them and the node order
    # takes "a". Packed, "b" goes from 4 shares of room its CPU feeds 3 of (250 unfed) to 2 it feeds both of
    # (none unfed), and "a" stays at none: auto takes "b", keeping "a"'s CPU for GPUs that need it.
    a = make_node("a").cpus(cores=10).gpus(1).obj()
    b = make_node("b").cpus(cores=3).gpus(1).obj()
    config = SchedulerConfig(workload=(TaskShape(cpu_milli=2000, gpus=1, gpu_milli=250, weight=1.0),))
    job = make_job("share").replicas(1, cpu=1000, gpu_milli=500)
    assert node_of(schedule(snapshot([a, b]), [job.placement("fragmentation").obj()], T0, config), "share") == "a"
    assert node_of(schedule(snapshot([a, b]), [job.placement("auto").obj()], T0, config), "share") == "b"


def test_the_packed_measure_counts_what_as_many_shares_as_fit_leave_unused() -> None:
    import numpy as np

    from phalanx.core.scheduling.fragmentation import WorkloadProfile, node_fragmentation
    from phalanx.core.scheduling.working import WorkingCluster

    # One free GPU and 1.5 free CPUs. FGD: a 470 share fits, so nothing is fragmented for it. Packed: the GPU has
    # room for two such shares, the CPU feeds one: 530 unused. With 4 CPUs both are fed and the 60 no such share
    # fills is what is unused. Whole-GPU shapes are measured as FGD does.
    node = make_node("n").cpus(cores=1, threads=2).gpus(1).obj()
    table = WorkingCluster(snapshot([node], [hold("n", cpu_milli=500)])).table
    rows = np.arange(1)
    share = WorkloadProfile.build((TaskShape(cpu_milli=1000, gpus=1, gpu_milli=470, weight=1.0),), table)
    assert node_fragmentation(table, share, rows).tolist() == [0.0]
    assert node_fragmentation(table, share, rows, packed=True).tolist() == [530.0]
    roomy = WorkingCluster(snapshot([make_node("n").cpus(cores=4).gpus(1).obj()])).table
    assert node_fragmentation(roomy, WorkloadProfile.build(share.shapes, roomy), rows, packed=True).tolist() == [60.0]
    whole = WorkloadProfile.build((TaskShape(cpu_milli=1000, gpus=1, gpu_milli=1000, weight=1.0),), table)
    assert node_fragmentation(table, whole, rows, packed=True).tolist() == [0.0]
    assert node_fragmentation(table, whole, rows).tolist() == [0.0]


def test_auto_counts_what_of_a_gpu_no_typical_share_would_fill() -> None:
    # The typical task takes 400 milli-GPU. "a" has a whole GPU free, "b" 700 of one. A 300 share leaves a
    # typical task room on both, so FGD's measure ties them and the node order takes "a". Packed, "a" goes from
    # 1000 free (two tasks, 200 unused) to 700 (one task, 300 unused) and "b" from 700 to 400 (one task, none
    # unused): auto takes "b", where the share fills what no typical task would.
    a = make_node("a").cpus(cores=4).gpus(1).obj()
    b = make_node("b").cpus(cores=4).gpus(1).obj()
    snap = snapshot([a, b], [hold("b", cpu_milli=100, gpus=[0], gpu_milli=300)])
    config = SchedulerConfig(workload=(TaskShape(cpu_milli=0, gpus=1, gpu_milli=400, weight=1.0),))
    job = make_job("share").replicas(1, cpu=100, gpu_milli=300)
    assert node_of(schedule(snap, [job.placement("fragmentation").obj()], T0, config), "share") == "a"
    assert node_of(schedule(snap, [job.placement("auto").obj()], T0, config), "share") == "b"
