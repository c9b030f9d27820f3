# examples/frameworks/xgboost/train.py
"""Distributed XGBoost under Phalanx: every replica trains on its shard; the master hosts the tracker.

The xgboost JobType gives every replica DMLC_TRACKER_URI and DMLC_TRACKER_PORT (the master's address),
DMLC_NUM_WORKER and DMLC_TASK_ID. XGBoost 3 reads none of them from the environment: the master starts a
RabitTracker for DMLC_NUM_WORKER workers on that port, and every replica, the master included, passes them to
the collective as arguments. Phalanx's Dataset sharding gives each replica its own CSV files
(PHALANX_DATASET_TRAIN_PATH). The replicas train one model together (histograms are summed across them at
every split) and compare its digest; the master then trains the same parameters in one process on all the data
(PHALANX_DATASET_FULL_PATH) and checks that both have the same trees and predict the same. Each replica writes
$PHALANX_OUTPUT_DIR/result-<rank>.json and exits non-zero when a check fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import xgboost as xgb
from xgboost import collective
from xgboost.tracker import RabitTracker

PARAMS = {
    "objective": "binary:logistic",
    "tree_method": "hist",
    "max_depth": 4,
    "eta": 0.3,
    "base_score": 0.5,  # fixed, not estimated from the data: one less thing that depends on the split
    "nthread": 1,
    "seed": 0,
}
ROUNDS = 20
TOLERANCE = 1e-6  # largest difference allowed between the two models' predicted probabilities


def load(directory: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The CSV files under ``directory`` (label first, then the features), in name order."""
    files = sorted(str(p.relative_to(directory)) for p in Path(directory).rglob("*.csv"))
    tables = [np.loadtxt(Path(directory, f), delimiter=",", skiprows=1, ndmin=2) for f in files]
    data = np.concatenate(tables) if tables else np.empty((0, 6))
    return files, data[:, 1:], data[:, 0]


def trees(booster: xgb.Booster) -> list[dict[str, list[float]]]:
    """The trees as the model predicts with them, without the training statistics.

    Per tree: its structure, split features and thresholds, leaf values (kept in split_conditions) and the
    default directions.
    """
    model = json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["model"]
    fields = ("left_children", "right_children", "split_indices", "split_conditions", "default_left")
    return [{field: tree[field] for field in fields} for tree in model["trees"]]


def digest(booster: xgb.Booster) -> str:
    return hashlib.sha256(json.dumps(trees(booster)).encode()).hexdigest()


def main() -> int:
    rank, workers = int(os.environ["RANK"]), int(os.environ["DMLC_NUM_WORKER"])
    host, port = os.environ["DMLC_TRACKER_URI"], int(os.environ["DMLC_TRACKER_PORT"])
    master = os.environ["PHALANX_ROLE"] == "master"
    if master:
        # timeout: a replica that never joins (or never leaves) fails the master instead of hanging it.
        tracker = RabitTracker(n_workers=workers, host_ip=host, port=port, sortby="task", timeout=120)
        tracker.start()
    files, x, y = load(os.environ["PHALANX_DATASET_TRAIN_PATH"])
    args = {"dmlc_tracker_uri": host, "dmlc_tracker_port": port, "dmlc_task_id": os.environ["DMLC_TASK_ID"]}
    with collective.CommunicatorContext(dmlc_retry=10, **args):
        booster = xgb.train(PARAMS, xgb.DMatrix(x, label=y), num_boost_round=ROUNDS)
        mine = digest(booster)
        total_rows = int(collective.allreduce(np.array([len(y)], dtype=np.int64), collective.Op.SUM)[0])
        digests = [collective.broadcast(mine, root) for root in range(workers)]
        collective_rank = collective.get_rank()
    result = {
        "rank": rank,
        "collective_rank": collective_rank,
        "shard_index": int(os.environ["PHALANX_DATASET_TRAIN_SHARD_INDEX"]),
        "shard_count": int(os.environ["PHALANX_DATASET_TRAIN_SHARD_COUNT"]),
        "files": files,
        "rows": len(y),
        "total_rows": total_rows,
        "model_sha256": mine,
        "same_model_everywhere": len(set(digests)) == 1,
    }
    ok = result["same_model_everywhere"]
    if master:
        tracker.wait_for()
        all_files, full_x, full_y = load(os.environ["PHALANX_DATASET_FULL_PATH"])
        single = xgb.train(PARAMS, xgb.DMatrix(full_x, label=full_y), num_boost_round=ROUNDS)
        everything = xgb.DMatrix(full_x)
        distributed, alone = booster.predict(everything), single.predict(everything)
        difference = float(np.abs(distributed - alone).max())
        result.update(
            {
                "all_files": all_files,
                "all_rows": len(full_y),
                "single_process_model_sha256": digest(single),
                # Compared as numbers: a threshold may be -0.0 in one model and 0.0 in the other.
                "same_trees_as_single_process": trees(booster) == trees(single),
                "max_prediction_difference": difference,
                "tolerance": TOLERANCE,
                "accuracy": float(((distributed > 0.5) == full_y).mean()),
            }
        )
        ok = ok and total_rows == len(full_y) and result["same_trees_as_single_process"] and difference <= TOLERANCE
    Path(os.environ["PHALANX_OUTPUT_DIR"], f"result-{rank}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
