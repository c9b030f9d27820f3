"""The pure parts of the Kubernetes benchmarks' harness (benchmarks/_k8s_common.py): job mixes, manifests, and the
gang accounting (partial gangs, idle GPU-seconds). No cluster, no timing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import _k8s_common as bench


def test_gang_mix_is_deterministic_per_seed_and_within_bounds() -> None:
    first = bench.gang_mix(30, seed=1)
    assert first == bench.gang_mix(30, seed=1)
    assert first != bench.gang_mix(30, seed=2)
    assert len(first) == 30
    assert len({job.name for job in first}) == 30
    for job in first:
        assert 4 <= job.gpus <= 16 and job.gpus % 4 == 0
        assert job.pods >= 2, "a one-pod job can never be a partial gang"
        assert job.gpus_per_pod in (1, 2, 4, 8)


def test_gang_mix_respects_the_largest_pod() -> None:
    assert all(job.gpus_per_pod <= 2 for job in bench.gang_mix(50, seed=3, max_gpus_per_pod=2))


def test_gang_mix_rejects_impossible_bounds() -> None:
    with pytest.raises(ValueError):
        bench.gang_mix(3, seed=1, min_gpus=8, max_gpus=4)


def test_interleaved_takes_one_replica_of_each_job_in_turn() -> None:
    a, b = bench.GangJob("a", 3, 1), bench.GangJob("b", 1, 4)
    assert [(job.name, i) for job, i in bench.interleaved([a, b])] == [("a", 0), ("b", 0), ("a", 1), ("a", 2)]


def test_pod_manifest_matches_what_phalanx_renders() -> None:
    job = bench.GangJob("gang-1", 2, 4)
    pod = bench.pod_manifest(job, 1, "bench", pod_group=True)
    assert pod["metadata"]["name"] == "gang-1-worker-1"
    assert pod["metadata"]["labels"]["phalanx.dev/job"] == "gang-1"
    assert pod["metadata"]["annotations"]["phalanx.dev/sim-hang"] == "true"
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"] == {"cpu": "1", "memory": "1073741824", "nvidia.com/gpu": "4"}
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "gang-1"}
    assert "schedulingGroup" not in bench.pod_manifest(job, 0, "bench")["spec"]
    group = bench.pod_group_manifest(job, "bench")
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2


def test_training_job_manifest_asks_the_same_resources() -> None:
    spec = bench.training_job_manifest(bench.GangJob("gang-1", 4, 2), "bench")["spec"]
    role = spec["replicas"]["worker"]
    assert role["count"] == 4
    assert role["template"]["resources"] == {"cpu": "1", "memory": "1073741824", "gpu": 2}


def test_benchmark_stages_drop_only_the_finish_stage(tmp_path: Path) -> None:
    bench.benchmark_stages(tmp_path)
    names = [
        doc["metadata"]["name"] for path in tmp_path.glob("*.yaml") for doc in yaml.safe_load_all(path.read_text())
    ]
    assert "phalanx-pod-finish" not in names
    assert {"phalanx-pod-ready", "phalanx-pod-delete", "phalanx-node-initialize"} <= set(names)


def _observe_all(acct: bench.GangAccounting, at: float, job: bench.GangJob, count: int, running: bool = False) -> None:
    for name in job.pod_names()[:count]:
        acct.observe(at, job.name, name, bound=True, running=running)


def test_idle_gpu_seconds_integrate_gpus_bound_to_partial_gangs() -> None:
    job = bench.GangJob("a", 4, 2)
    acct = bench.GangAccounting([job], settle_s=1.0)
    _observe_all(acct, 1.0, job, 1)  # 2 GPUs idle from t=1
    _observe_all(acct, 3.0, job, 3)  # 6 GPUs idle from t=3
    acct.sample(4.0)
    assert acct.idle_gpu_seconds == pytest.approx(2 * 2 + 6 * 1)
    assert acct.idle_gpus_max == 6
    _observe_all(acct, 5.0, job, 4)  # complete: nothing idle any more
    acct.sample(10.0)
    assert acct.idle_gpu_seconds == pytest.approx(4 + 6 * 2)


def test_a_gang_bound_within_the_settle_time_is_not_partial() -> None:
    quick, stuck = bench.GangJob("quick", 2, 1), bench.GangJob("stuck", 2, 1)
    acct = bench.GangAccounting([quick, stuck], settle_s=1.0)
    _observe_all(acct, 0.0, quick, 1)
    _observe_all(acct, 0.0, stuck, 1)
    assert acct.sample(0.5) == 0
    _observe_all(acct, 0.6, quick, 2)
    assert acct.sample(1.5) == 1  # only "stuck", partial since 0.0
    assert acct.partial_max == 1
    assert acct.partial_now(1.5) == 1


def test_a_job_is_due_its_duration_after_all_pods_run_and_finishing_ends_its_accounting() -> None:
    job, other = bench.GangJob("a", 2, 4), bench.GangJob("b", 2, 4)
    acct = bench.GangAccounting([job, other])
    _observe_all(acct, 1.0, job, 2)
    assert acct.due(100.0, 5.0) == []  # bound but not running
    acct.observe(2.0, "a", "a-worker-0", bound=True, running=True)
    acct.observe(3.0, "a", "a-worker-1", bound=True, running=True)
    assert acct.due(7.9, 5.0) == []
    assert acct.due(8.0, 5.0) == ["a"]
    acct.finish(8.0, "a")
    acct.observe(8.1, "a", "a-worker-0", bound=True, running=True, exists=False)  # its deletion: ignored
    assert acct.finished == 1 and not acct.done and acct.makespan() is None
    acct.finish(9.0, "b")
    assert acct.done and acct.makespan() == pytest.approx(9.0)
    assert acct.last_progress == pytest.approx(9.0)


def test_a_deleted_pod_unbinds() -> None:
    job = bench.GangJob("a", 2, 1)
    acct = bench.GangAccounting([job], settle_s=0.0)
    _observe_all(acct, 0.0, job, 2)
    acct.observe(1.0, "a", "a-worker-1", bound=True, running=False, exists=False)
    assert acct.sample(1.0) == 1
    acct.sample(3.0)
    assert acct.idle_gpu_seconds == pytest.approx(2.0)


def test_percentile_rate_and_format() -> None:
    assert bench.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert bench.percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0
    assert bench.fmt(bench.percentile([], 50)) == "n/a"
    assert bench.per_second(10, 2.0) == 5.0
    assert bench.fmt(bench.per_second(10, 0.0)) == "n/a"
    assert bench.fmt(None) == "n/a"
    assert bench.fmt(1.25, 1) == "1.2"


def test_table_aligns_columns() -> None:
    text = bench.table(["name", "n"], [["a", 1], ["bbb", 22]])
    assert text.splitlines() == ["name   n", "----  --", "a      1", "bbb   22"]


def _metric(verb: str, resource: str, value: int, *, code: str = "200", subresource: str = "") -> str:
    """One line of apiserver_request_total as kube-apiserver's /metrics writes it."""
    labels = (
        f'code="{code}",component="apiserver",dry_run="",group="",resource="{resource}",scope="resource",'
        f'subresource="{subresource}",verb="{verb}",version="v1"'
    )
    return f"apiserver_request_total{{{labels}}} {value}"


METRICS = "\n".join(
    [
        "# TYPE apiserver_request_total counter",
        _metric("POST", "pods", 10, code="201"),
        _metric("POST", "pods", 2, code="409"),
        _metric("POST", "pods", 4, code="201", subresource="binding"),
        _metric("PUT", "leases", 7),
        _metric("GET", "pods", 3),
        'apiserver_request_duration_seconds_count{verb="POST",resource="pods"} 99',
    ]
)


def test_request_totals_are_summed_by_verb_and_resource_across_codes() -> None:
    totals = bench.parse_request_totals(METRICS)
    assert totals == {("POST", "pods"): 12, ("POST", "pods/binding"): 4, ("PUT", "leases"): 7, ("GET", "pods"): 3}


def test_writes_and_reads_between_two_readings_and_what_a_job_cost() -> None:
    before = bench.parse_request_totals(METRICS)
    after = before.copy()
    after.update({("POST", "pods"): 5, ("PUT", "leases"): 3, ("GET", "pods"): 1, ("POST", "trainingjobs"): 2})
    writes = bench.writes_between(before, after)
    assert writes == {("POST", "pods"): 5, ("PUT", "leases"): 3, ("POST", "trainingjobs"): 2}
    assert bench.reads_between(before, after) == {("GET", "pods"): 1}
    assert bench.job_writes(writes) == 7, "Lease renewals are background, not the workload's"
