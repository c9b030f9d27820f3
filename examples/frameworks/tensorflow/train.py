# examples/frameworks/tensorflow/train.py
"""Data-parallel training under tf.distribute.MultiWorkerMirroredStrategy, configured by TF_CONFIG alone.

Every worker fits the same linear model on its own shard of a synthetic regression problem. The strategy keeps
the variables mirrored: each step's update is all-reduced across the workers, so the weights stay identical
although no two workers see the same data. After training every worker checks, through the strategy's own
collectives, that an all-reduce of task numbers gives the expected sum and that the weights it gathers from
every worker are bit-for-bit its own; it writes result-worker-<index>.json and exits 1 when either is wrong.

A custom training loop on tf.Variables, not Keras: Keras 3's model.fit does not support
MultiWorkerMirroredStrategy (it does MirroredStrategy, one machine only).
"""

import hashlib
import json
import os
import sys

import numpy as np
import tensorflow as tf

STEPS = 30
BATCH = 64  # examples per worker and step
FEATURES = 4
LEARNING_RATE = 0.1
TRUE_WEIGHTS = np.array([1.5, -2.0, 0.5, 3.0], dtype=np.float32)
TRUE_BIAS = 0.25

# Reads TF_CONFIG (the cluster's workers and this worker's task), starts this worker's gRPC server and waits
# for every other worker to start its own.
strategy = tf.distribute.MultiWorkerMirroredStrategy()
resolver = strategy.cluster_resolver
task = resolver.task_id
workers = strategy.num_replicas_in_sync  # one replica per worker: these are CPU processes
print(f"worker {task} of {workers}: cluster {resolver.cluster_spec().as_dict()}", flush=True)

# This worker's shard: its own seed, so the workers' gradients differ and only the all-reduce keeps them equal.
rng = np.random.default_rng(1000 + task)
features = rng.normal(size=(STEPS, BATCH, FEATURES)).astype(np.float32)
targets = features @ TRUE_WEIGHTS + TRUE_BIAS

with strategy.scope():
    # aggregation=MEAN: an update made in a replica is averaged over all replicas (an all-reduce) before it
    # is applied to every copy, which is data-parallel SGD with the mean gradient.
    weights = tf.Variable(tf.zeros([FEATURES]), aggregation=tf.VariableAggregation.MEAN)
    bias = tf.Variable(0.0, aggregation=tf.VariableAggregation.MEAN)


@tf.function
def train_step(x, y):
    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.linalg.matvec(x, weights) + bias - y))
        grad_weights, grad_bias = tape.gradient(loss, [weights, bias])
        weights.assign_sub(LEARNING_RATE * grad_weights)
        bias.assign_sub(LEARNING_RATE * grad_bias)
        return loss

    losses = strategy.run(replica_step, args=(x, y))
    return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)


@tf.function
def check():
    def replica_check():
        context = tf.distribute.get_replica_context()
        task_sum = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(task + 1, tf.float32))
        mine = tf.concat([weights, tf.reshape(bias, [1])], axis=0)
        everyone = context.all_gather(tf.expand_dims(mine, 0), axis=0)  # one row per worker
        return task_sum, mine, everyone

    return strategy.run(replica_check)


losses = [float(train_step(tf.constant(features[s]), tf.constant(targets[s]))) for s in range(STEPS)]
task_sum, mine, everyone = (t.numpy() for t in check())

expected_sum = workers * (workers + 1) / 2
identical = everyone.shape == (workers, FEATURES + 1) and all(np.array_equal(row, mine) for row in everyone)
result = {
    "task": task,
    "workers": workers,
    "task_sum": float(task_sum),
    "expected_task_sum": expected_sum,
    "weights_identical": identical,
    "digest": hashlib.sha256(mine.tobytes()).hexdigest(),
    "weights": mine.tolist(),
    "loss_first": losses[0],
    "loss_last": losses[-1],
}
with open(os.path.join(os.environ["PHALANX_OUTPUT_DIR"], f"result-worker-{task}.json"), "w") as out:
    json.dump(result, out)
print(json.dumps(result), flush=True)
if task_sum != expected_sum or not identical or not losses[-1] < losses[0] / 10:
    sys.exit(f"worker {task}: the collectives disagree or training did not converge: {result}")
