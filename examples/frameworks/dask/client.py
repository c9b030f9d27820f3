# examples/frameworks/dask/client.py
"""Linear regression by full-batch gradient descent on the Dask cluster Phalanx started.

The data is split into partitions spread over every worker; each step, every partition's gradient is computed
on the worker that holds it and the client adds them up. The same steps run here in one process must give the
same weights. Writes $PHALANX_OUTPUT_DIR/result-client.json and exits non-zero when anything is wrong.
"""

import json
import os
import sys
from collections.abc import Callable

import numpy as np
from distributed import Client, get_worker, wait

PARTITIONS = 6
ROWS = 2_000
FEATURES = 8
STEPS = 15
LEARNING_RATE = 0.5
TRUE_WEIGHTS = np.linspace(-1.0, 1.0, FEATURES)


def make_partition(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(ROWS, FEATURES))
    return x, x @ TRUE_WEIGHTS + 0.01 * rng.normal(size=ROWS)


def gradient(partition: tuple[np.ndarray, np.ndarray], weights: np.ndarray) -> tuple[np.ndarray, str]:
    x, y = partition
    return x.T @ (x @ weights - y), get_worker().address


def replica_index() -> str:
    """Run on each worker: which Phalanx replica it is."""
    return os.environ["PHALANX_REPLICA_INDEX"]


def descend(gradients_of: Callable[[np.ndarray], list[np.ndarray]]) -> np.ndarray:
    """The training loop, the same for the cluster and for the local check: only the gradients' source differs."""
    weights = np.zeros(FEATURES)
    for _ in range(STEPS):
        weights = weights - LEARNING_RATE * sum(gradients_of(weights)) / (PARTITIONS * ROWS)
    return weights


def main() -> int:
    client = Client()  # the scheduler's address comes from DASK_SCHEDULER_ADDRESS, which the JobType sets
    expected = int(os.environ["EXPECTED_WORKERS"])
    client.wait_for_workers(expected, timeout=120)
    workers = sorted(client.scheduler_info()["workers"])
    replicas = client.run(replica_index)  # Dask worker address -> Phalanx replica index

    # Partition i lives on worker i mod n, so every worker holds data; its gradient runs where it lives.
    home = {i: workers[i % len(workers)] for i in range(PARTITIONS)}
    partitions = [client.submit(make_partition, i, workers=[home[i]], pure=False) for i in range(PARTITIONS)]
    wait(partitions)
    holders = {i: sorted(client.who_has([p])[p.key]) for i, p in enumerate(partitions)}
    ran_on: set[str] = set()

    def cluster_gradients(weights: np.ndarray) -> list[np.ndarray]:
        futures = [client.submit(gradient, p, weights, workers=[home[i]], pure=False) for i, p in enumerate(partitions)]
        results = client.gather(futures)
        ran_on.update(address for _, address in results)
        return [g for g, _ in results]

    local = [make_partition(i) for i in range(PARTITIONS)]
    distributed_weights = descend(cluster_gradients)
    local_weights = descend(lambda w: [x.T @ (x @ w - y) for x, y in local])
    difference = float(np.max(np.abs(distributed_weights - local_weights)))
    error = float(np.max(np.abs(distributed_weights - TRUE_WEIGHTS)))
    scheduler = client.scheduler.address
    client.close()  # closes this client only: the scheduler and the workers run on until Phalanx stops them

    result = {
        "scheduler": scheduler,
        "workers": workers,
        "replicas": {address: replicas[address] for address in workers},
        "partition_holders": holders,
        "ran_on": sorted(ran_on),
        "weights": distributed_weights.tolist(),
        "local_weights": local_weights.tolist(),
        "max_difference_from_local": difference,
        "max_error_from_true_weights": error,
    }
    with open(os.path.join(os.environ["PHALANX_OUTPUT_DIR"], "result-client.json"), "w") as out:
        json.dump(result, out, indent=1)
    print(f"{len(workers)} workers, weights {np.round(distributed_weights, 3)}, difference from local {difference:.2e}")

    problems = []
    if len(workers) != expected or sorted(replicas.values()) != [str(i) for i in range(expected)]:
        problems.append(f"expected one Dask worker per worker replica (0..{expected - 1}), got {replicas}")
    if any(holders[i] != [home[i]] for i in holders) or ran_on != set(workers):
        problems.append(f"work did not run where its data lives on every worker: {holders}, ran on {ran_on}")
    if difference > 1e-9:
        problems.append(f"the cluster's weights differ from the local run's by {difference}")
    if error > 0.05:
        problems.append(f"gradient descent did not converge: the weights are {error} from the true ones")
    for problem in problems:
        print("FAILED:", problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
