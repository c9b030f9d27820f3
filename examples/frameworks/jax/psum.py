# examples/frameworks/jax/psum.py
"""Multi-process JAX on CPU under Phalanx: a cross-process psum, then a few data-parallel training steps.

jax.distributed.initialize() takes no arguments: it finds the coordinator in JAX_COORDINATOR_ADDRESS and the
process count and id through JAX's cluster detection, from the variables the jax JobType renders. Every
process then owns one CPU device of a global mesh. Each contributes process_id + 1 to a psum over the mesh and
checks the total, n (n + 1) / 2; then the processes train a linear model on a batch sharded across them (the
gradient's reduction crosses processes) and check that their parameters are identical. Each writes what it saw
to $PHALANX_OUTPUT_DIR/result-<process id>.json and exits non-zero when a check fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

STEPS = 5
ROWS_PER_PROCESS = 64
FEATURES = 4
LEARNING_RATE = 0.1


def cross_process_sum(mesh: Mesh) -> float:
    """The sum of process_id + 1 over every device of the mesh (one per process), by psum."""
    mine = jnp.array([float(jax.process_index() + 1)])
    everyone = multihost_utils.host_local_array_to_global_array(mine, mesh, P("processes"))
    total = jax.jit(
        jax.shard_map(lambda v: jax.lax.psum(v, "processes"), mesh=mesh, in_specs=P("processes"), out_specs=P())
    )(everyone)
    return float(multihost_utils.process_allgather(total, tiled=True)[0])


def train(mesh: Mesh) -> np.ndarray:
    """Data-parallel least squares: each process holds its rows of the batch, the weights are replicated."""
    rng = np.random.default_rng(jax.process_index())  # each process draws its own rows
    x_local = rng.normal(size=(ROWS_PER_PROCESS, FEATURES)).astype(np.float32)
    y_local = x_local @ np.arange(1.0, FEATURES + 1, dtype=np.float32)
    rows = P("processes")
    x = multihost_utils.host_local_array_to_global_array(x_local, mesh, rows)
    y = multihost_utils.host_local_array_to_global_array(y_local, mesh, rows)
    weights = jax.device_put(jnp.zeros(FEATURES), NamedSharding(mesh, P()))

    @jax.jit
    def step(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
        # The mean runs over the global batch, so its gradient sums across processes.
        grad = jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
        return w - LEARNING_RATE * grad

    for _ in range(STEPS):
        weights = step(weights, x, y)
    return np.asarray(multihost_utils.process_allgather(weights, tiled=True))


def main() -> int:
    jax.distributed.initialize()  # no arguments: everything comes from the environment Phalanx rendered
    n, me = jax.process_count(), jax.process_index()
    mesh = Mesh(np.array(jax.devices()), ("processes",))
    total = cross_process_sum(mesh)
    weights = train(mesh)
    digest = hashlib.sha256(weights.tobytes()).hexdigest()
    digests = multihost_utils.process_allgather(np.frombuffer(bytes.fromhex(digest), dtype=np.uint8))
    result = {
        "process_id": me,
        "process_count": n,
        "expected_processes": int(os.environ["PHALANX_WORLD_SIZE"]),
        "global_devices": len(jax.devices()),
        "psum": total,
        "expected_psum": n * (n + 1) / 2,
        "weights": weights.tolist(),
        "weights_sha256": digest,
        "same_weights_everywhere": bool((digests == digests[0]).all()),
    }
    Path(os.environ["PHALANX_OUTPUT_DIR"], f"result-{me}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result), flush=True)
    ok = n == result["expected_processes"] and total == result["expected_psum"] and result["same_weights_everywhere"]
    jax.distributed.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
