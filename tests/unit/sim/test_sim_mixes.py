"""Workload mixes drawn from an openb pod list: each keeps the statistic it is named after, seeded."""

from __future__ import annotations

import pytest

from phalanx.sim.mixes import Mix, make_mix
from phalanx.sim.traces import OpenbNode, OpenbPod


def pod(name: str, cpu: int, gpus: int, milli: int) -> OpenbPod:
    return OpenbPod(name, cpu, 1024, gpus, milli, (), "LS", "Running", 0.0, None, 0.0)


PODS = (
    *(pod(f"whole{i}", 4000, 1, 1000) for i in range(20)),
    *(pod(f"share{i}", 2000, 1, 250 + 50 * i) for i in range(10)),
    *(pod(f"multi{i}", 16000, 4, 1000) for i in range(3)),
    *(pod(f"cpu{i}", 8000, 0, 0) for i in range(10)),
)
NODES = (
    *(OpenbNode(f"t{i}", 64000, 262144, 4, "T4") for i in range(4)),
    *(OpenbNode(f"v{i}", 96000, 524288, 8, "V100M32") for i in range(2)),
)


def demand(p: OpenbPod) -> int:
    return p.num_gpu * p.gpu_milli


def share_of(pods: list[OpenbPod], chosen: object) -> float:
    gpu = [p for p in pods if p.num_gpu]
    return sum(demand(p) for p in gpu if chosen(p)) / sum(demand(p) for p in gpu)  # type: ignore[operator]


@pytest.mark.parametrize("percent", [40, 60, 100])
def test_gpushare_sets_the_sharing_share_of_gpu_demand_and_keeps_the_pod_counts(percent: int) -> None:
    mixed = make_mix(PODS, Mix("gpushare", percent), seed=3)
    assert share_of(mixed, lambda p: p.gpu_milli < 1000) == pytest.approx(percent / 100, abs=0.06)
    assert sum(1 for p in mixed if p.num_gpu) == sum(1 for p in PODS if p.num_gpu)
    assert [p for p in mixed if not p.num_gpu] == [p for p in PODS if not p.num_gpu]
    assert len({p.name for p in mixed}) == len(mixed)


def test_multigpu_adds_multi_gpu_pods_until_their_share_is_reached() -> None:
    mixed = make_mix(PODS, Mix("multigpu", 50), seed=3)
    assert share_of(mixed, lambda p: p.num_gpu > 1) >= 0.5
    assert mixed[: len(PODS)] == list(PODS)
    assert all(p.num_gpu == 4 for p in mixed[len(PODS) :])


def test_cpu_draws_cpu_only_pods_until_they_ask_the_share_of_the_clusters_cpu() -> None:
    mixed = make_mix(PODS, Mix("cpu", 25), seed=3, nodes=NODES)
    capacity = sum(n.cpu_milli for n in NODES)
    asked = sum(p.cpu_milli for p in mixed if not p.num_gpu)
    assert 0.25 * capacity <= asked < 0.25 * capacity + 8000
    assert [p for p in mixed if p.num_gpu] == [p for p in PODS if p.num_gpu]


def test_gpuspec_constrains_the_share_of_gpu_pods_to_models_some_node_can_hold_them_on() -> None:
    mixed = make_mix(PODS, Mix("gpuspec", 50), seed=3, nodes=NODES)
    gpu = [p for p in mixed if p.num_gpu]
    constrained = [p for p in gpu if p.gpu_spec]
    assert len(constrained) == pytest.approx(len(gpu) / 2, abs=1)
    models = {n.model for n in NODES}
    for p in constrained:
        assert set(p.gpu_spec) & models, p
        assert any(n.model in p.gpu_spec and n.gpus >= p.num_gpu for n in NODES), p


def test_a_mix_is_the_same_for_a_seed_and_another_for_another() -> None:
    mix = Mix("gpushare", 60)
    assert make_mix(PODS, mix, seed=1) == make_mix(PODS, mix, seed=1)
    assert make_mix(PODS, mix, seed=1) != make_mix(PODS, mix, seed=2)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpushare", "write a kind and a percentage"),
        ("sharing=40", "write a kind and a percentage"),
        ("cpu=140", "percent must be within 0..100"),
    ],
)
def test_a_bad_mix_is_refused_saying_how_to_write_one(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Mix.parse(text)


def test_a_mix_the_pods_cannot_make_is_refused_naming_what_is_missing() -> None:
    only_whole = tuple(p for p in PODS if p.gpu_milli >= 1000 or not p.num_gpu)
    with pytest.raises(ValueError, match="needs GPU pods that share a GPU"):
        make_mix(only_whole, Mix("gpushare", 50), seed=1)
    with pytest.raises(ValueError, match="needs the node list"):
        make_mix(PODS, Mix("cpu", 10), seed=1)
