"""XGBoost under Phalanx: a master and two workers of the xgboost JobType train one model together through
XGBoost's collective (the master hosts the RabitTracker), each on its own shard of a Dataset, and the model
predicts what a model trained in one process on all the data predicts (examples/frameworks/xgboost)."""

from __future__ import annotations

import pytest

from support.frameworks import FrameworksRuntime, load_example
from support.rendering_parity import assert_kubernetes_renders_the_same


@pytest.mark.timeout(300)
def test_xgboost_trains_on_dataset_shards_like_one_process_on_all_the_data(fw: FrameworksRuntime) -> None:
    _, job = load_example("xgboost")
    replicas = sum(role["count"] for role in job["spec"]["replicas"].values())
    assert replicas >= 3

    run = fw.run_example("xgboost")

    assert run.returncode == 0, run.stdout + run.stderr
    assert fw.job("xgboost-train")["status"]["phase"] == "Succeeded"
    results = fw.results("xgboost-train")
    assert sorted(results) == [f"result-{rank}" for rank in range(replicas)]
    by_rank = [results[f"result-{rank}"] for rank in range(replicas)]
    master = by_rank[0]
    # Phalanx's sharding: replica of rank i got shard i of n; the shards are disjoint, non-empty, and cover
    # every file of the Dataset.
    assert [(r["shard_index"], r["shard_count"]) for r in by_rank] == [(i, replicas) for i in range(replicas)]
    shards = [set(r["files"]) for r in by_rank]
    assert all(shards) and sum(len(s) for s in shards) == len(set().union(*shards))
    assert set().union(*shards) == set(master["all_files"])
    assert sum(r["rows"] for r in by_rank) == master["all_rows"] == master["total_rows"] > 0
    # One model across the replicas (the collective gave every task its own rank), equal in its predictions
    # to the single-process one.
    assert sorted(r["collective_rank"] for r in by_rank) == list(range(replicas))
    assert len({r["model_sha256"] for r in by_rank}) == 1
    assert master["max_prediction_difference"] <= master["tolerance"] <= 1e-6
    assert master["accuracy"] > 0.8
    # Kubernetes would tell each replica what these working replicas were told (env, command line, Service).
    assert_kubernetes_renders_the_same(fw, "xgboost-train", load_example("xgboost"))
