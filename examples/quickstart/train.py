"""Data-parallel training with no dependency beyond Python: the Phalanx quickstart job.

Every replica (a PyTorch-style master and workers) generates the same synthetic classification data set,
keeps the shard that matches its rank, computes gradients of a softmax-regression model on its shard, and
averages them with the others at every step (an all-reduce through the master, over TCP). The master
evaluates on held-out data and writes the model and its final metrics to PHALANX_OUTPUT_DIR.

The rendezvous variables come from the JobType: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE — the same ones
torch.distributed reads, so the structure carries over to a real DDP script.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import sys
import time
from multiprocessing.connection import Client, Listener

CLASSES = 3
FEATURES = 8
SAMPLES = 6000
EPOCHS = int(os.environ.get("EPOCHS", "12"))
BATCH = 64
LEARNING_RATE = 0.2


def make_dataset(seed: int = 7) -> list[tuple[list[float], int]]:
    """Three Gaussian clouds in 8 dimensions, overlapping enough that accuracy is not trivially 100 %."""
    rng = random.Random(seed)
    centres = [[rng.uniform(-1.5, 1.5) for _ in range(FEATURES)] for _ in range(CLASSES)]
    data = []
    for i in range(SAMPLES):
        label = i % CLASSES
        data.append(([c + rng.gauss(0.0, 1.2) for c in centres[label]], label))
    rng.shuffle(data)
    return data


def softmax(scores: list[float]) -> list[float]:
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def predict(weights: list[list[float]], x: list[float]) -> list[float]:
    return softmax([w[-1] + sum(wi * xi for wi, xi in zip(w, x, strict=False)) for w in weights])


def gradient(weights: list[list[float]], batch: list[tuple[list[float], int]]) -> tuple[list[float], float]:
    """Mean cross-entropy gradient of the batch, flattened, and the batch loss."""
    grad = [[0.0] * (FEATURES + 1) for _ in range(CLASSES)]
    loss = 0.0
    for x, label in batch:
        probs = predict(weights, x)
        loss -= math.log(max(probs[label], 1e-12))
        for k in range(CLASSES):
            delta = probs[k] - (1.0 if k == label else 0.0)
            row = grad[k]
            for j in range(FEATURES):
                row[j] += delta * x[j]
            row[FEATURES] += delta
    n = max(len(batch), 1)
    return [g / n for row in grad for g in row], loss / n


class AllReduce:
    """Averages a vector across ranks through rank 0 (a parameter-server style hub)."""

    def __init__(self, rank: int, world: int, host: str, port: int, key: bytes) -> None:
        self.rank, self.world = rank, world
        self.peers = []
        if world == 1:
            return
        if rank == 0:
            with Listener((host, port), authkey=key) as listener:
                while len(self.peers) < world - 1:
                    self.peers.append(listener.accept())
        else:
            deadline = time.monotonic() + 60
            while True:
                try:
                    self.conn = Client((host, port), authkey=key)
                    break
                except (ConnectionRefusedError, OSError):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)  # the master may still be binding its port

    def mean(self, vector: list[float]) -> list[float]:
        if self.world == 1:
            return vector
        if self.rank == 0:
            total = list(vector)
            for peer in self.peers:
                for i, value in enumerate(peer.recv()):
                    total[i] += value
            average = [value / self.world for value in total]
            for peer in self.peers:
                peer.send(average)
            return average
        self.conn.send(vector)
        return self.conn.recv()


def main() -> int:
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get("MASTER_PORT", "29500"))
    key = hashlib.sha256(os.environ.get("PHALANX_JOB_UID", "quickstart").encode()).digest()
    out_dir = os.environ.get("PHALANX_OUTPUT_DIR", "outputs")

    data = make_dataset()
    split = int(len(data) * 0.8)
    train, test = data[:split], data[split:]
    shard = train[rank::world]
    print(f"rank {rank}/{world}: {len(shard)} training samples, pinned to CPUs {sorted(os.sched_getaffinity(0))}")
    sys.stdout.flush()

    reducer = AllReduce(rank, world, host, port, key)
    weights = [[0.0] * (FEATURES + 1) for _ in range(CLASSES)]
    steps = len(shard) // BATCH
    rng = random.Random(rank)
    for epoch in range(EPOCHS):
        rng.shuffle(shard)
        epoch_loss = 0.0
        for step in range(steps):
            grad, loss = gradient(weights, shard[step * BATCH : (step + 1) * BATCH])
            grad = reducer.mean(grad)
            epoch_loss += loss
            for k in range(CLASSES):
                for j in range(FEATURES + 1):
                    weights[k][j] -= LEARNING_RATE * grad[k * (FEATURES + 1) + j]
        print(f"rank {rank}: epoch {epoch + 1}/{EPOCHS} loss {epoch_loss / max(steps, 1):.4f}", flush=True)

    if rank == 0:
        correct = sum(1 for x, y in test if max(range(CLASSES), key=predict(weights, x).__getitem__) == y)
        accuracy = correct / len(test)
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "model.json"), "w") as handle:
            json.dump({"classes": CLASSES, "features": FEATURES, "weights": weights}, handle)
        with open(os.path.join(out_dir, "metrics.json"), "w") as handle:
            json.dump({"accuracy": accuracy, "loss": epoch_loss / max(steps, 1)}, handle)
        print(f"rank 0: test accuracy {accuracy:.4f}; model written to {out_dir}/model.json", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
