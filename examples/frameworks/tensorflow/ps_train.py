# examples/frameworks/tensorflow/ps_train.py
"""Asynchronous training under tf.distribute.ParameterServerStrategy, one program for every role.

The chief, the workers and the parameter servers each learn their part from TF_CONFIG. Workers and parameter
servers start a TensorFlow server and serve until they are stopped: Phalanx stops them once the chief has
succeeded. The chief is the coordinator: it places the model's variables on the
parameter servers, schedules training steps on the workers (each worker reads its own synthetic data), and
waits for them. It then checks that the variables live on the parameter servers, that every scheduled step
ran (a step counter on a parameter server) and that the model found the true weights, writes
result-chief-0.json, and exits 1 when any check fails.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

STEPS = 40
BATCH = 64
FEATURES = 4
LEARNING_RATE = 0.1
TRUE_WEIGHTS = np.array([1.5, -2.0, 0.5, 3.0], dtype=np.float32)
TRUE_BIAS = 0.25

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
cluster = resolver.cluster_spec()
print(f"{resolver.task_type} {resolver.task_id}: cluster {cluster.as_dict()}", flush=True)

if resolver.task_type in ("worker", "ps"):
    server = tf.distribute.Server(
        cluster, job_name=resolver.task_type, task_index=resolver.task_id, protocol="grpc", start=True
    )
    server.join()  # serves the chief's requests until Phalanx stops this replica

strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

with strategy.scope():
    weights = tf.Variable(tf.zeros([FEATURES]))
    bias = tf.Variable(0.0)
    steps_run = tf.Variable(0, dtype=tf.int64)


def dataset_fn():
    # Runs on each worker: an endless stream of fresh (features, targets) batches of one linear problem.
    def batch(_):
        features = tf.random.normal([BATCH, FEATURES])
        return features, tf.linalg.matvec(features, TRUE_WEIGHTS) + TRUE_BIAS

    return tf.data.Dataset.from_tensors(0).repeat().map(batch)


@tf.function
def train_step(iterator):
    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.linalg.matvec(x, weights) + bias - y))
        grad_weights, grad_bias = tape.gradient(loss, [weights, bias])
        weights.assign_sub(LEARNING_RATE * grad_weights)  # on the parameter server
        bias.assign_sub(LEARNING_RATE * grad_bias)
        steps_run.assign_add(1)
        return loss

    x, y = next(iterator)
    return strategy.run(replica_step, args=(x, y))


iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
losses = [coordinator.schedule(train_step, args=(iterator,)) for _ in range(STEPS)]
coordinator.join()  # every scheduled step has run on some worker
losses = [float(loss.fetch()) for loss in losses]

result = {
    "workers": len(cluster.as_dict().get("worker", [])),
    "ps": len(cluster.as_dict().get("ps", [])),
    "variable_devices": sorted({weights.device, bias.device, steps_run.device}),
    "steps_scheduled": STEPS,
    "steps_run": int(steps_run.numpy()),
    "weights": [*weights.numpy().tolist(), float(bias.numpy())],
    # Steps run in any order on the workers, so the first scheduled step's loss need not be the largest:
    # judge the model by its distance from the weights that generated the data.
    "error": float(max(np.abs(weights.numpy() - TRUE_WEIGHTS).max(), abs(bias.numpy() - TRUE_BIAS))),
    "losses": losses,
}
with open(os.path.join(os.environ["PHALANX_OUTPUT_DIR"], "result-chief-0.json"), "w") as out:
    json.dump(result, out)
print(json.dumps(result), flush=True)
on_ps = all("/job:ps/" in device for device in result["variable_devices"])
if not on_ps or result["steps_run"] != STEPS or not result["error"] < 0.01:
    sys.exit(f"chief: the parameter servers did not train the model: {result}")
