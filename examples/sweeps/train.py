"""A small trial program for the sweep examples: logistic regression on synthetic data, no dependencies.

It trains for ``--epochs`` epochs with the learning rate, optimizer and momentum the sweep chose, and reports
the validation loss after each epoch on stdout in Phalanx's metric format::

    phalanx-metric step=3 val_loss=0.4127 accuracy=0.871

which the sweep reads as intermediate values (early stopping compares trials on them); ``--metrics-format katib``
prints Katib's ``val_loss=0.4127 accuracy=0.871`` lines instead. At the end it writes
the final values to ``$PHALANX_OUTPUT_DIR/metrics.json`` when the job has an outputs folder.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from pathlib import Path

FEATURES = 6
SAMPLES = 9600


def make_data(seed: int = 3) -> list[tuple[list[float], int]]:
    """Two Gaussian clouds that overlap, so a well-tuned model reaches about 90 % and a badly tuned one less."""
    rng = random.Random(seed)
    centre = [rng.uniform(-0.8, 0.8) for _ in range(FEATURES)]
    data = []
    for i in range(SAMPLES):
        label = i % 2
        sign = 1.0 if label else -1.0
        data.append(([sign * c + rng.gauss(0.0, 1.0) for c in centre], label))
    rng.shuffle(data)
    return data


def loss_and_accuracy(weights: list[float], data: list[tuple[list[float], int]]) -> tuple[float, float]:
    loss, right = 0.0, 0
    for x, label in data:
        z = weights[-1] + sum(w * v for w, v in zip(weights, x, strict=False))
        p = 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))
        loss -= math.log(max(p if label else 1.0 - p, 1e-12))
        right += (p >= 0.5) == bool(label)
    return loss / len(data), right / len(data)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--optimizer", choices=["sgd", "momentum"], default="sgd")
    # A conditional parameter that is inactive in a trial (sgd has no momentum) is substituted as "".
    parser.add_argument("--momentum", type=lambda text: float(text) if text else 0.0, default=0.0)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=8)
    # An epoch of this small model takes a few hundredths of a second on a fast machine. The sweep reads a trial's
    # log every quarter second, so a trial that ended that fast ended before early stopping could act on it: each
    # epoch lasts at least this long, as a real model's would (0: as fast as the machine goes).
    parser.add_argument("--epoch-seconds", type=float, default=0.15)
    # Katib's metrics collector reads `name=value` lines; Phalanx reads its own format, and Katib's in a Sweep
    # converted from a Katib Experiment.
    parser.add_argument("--metrics-format", choices=["phalanx", "katib"], default="phalanx")
    args = parser.parse_args()

    data = make_data()
    train, val = data[: SAMPLES * 3 // 4], data[SAMPLES * 3 // 4 :]
    weights = [0.0] * (FEATURES + 1)
    velocity = [0.0] * (FEATURES + 1)
    beta = args.momentum if args.optimizer == "momentum" else 0.0
    rng = random.Random(0)
    val_loss, accuracy = loss_and_accuracy(weights, val)
    for epoch in range(1, args.epochs + 1):
        began = time.monotonic()
        rng.shuffle(train)
        for start in range(0, len(train), args.batch):
            grad = [0.0] * (FEATURES + 1)
            batch = train[start : start + args.batch]
            for x, label in batch:
                z = weights[-1] + sum(w * v for w, v in zip(weights, x, strict=False))
                error = 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z)))) - label
                for i, v in enumerate(x):
                    grad[i] += error * v / len(batch)
                grad[-1] += error / len(batch)
            for i, g in enumerate(grad):
                velocity[i] = beta * velocity[i] + g
                weights[i] -= args.lr * velocity[i]
        val_loss, accuracy = loss_and_accuracy(weights, val)
        time.sleep(max(0.0, args.epoch_seconds - (time.monotonic() - began)))
        if args.metrics_format == "katib":
            print(f"epoch {epoch}: val_loss={val_loss:.6f} accuracy={accuracy:.4f}", flush=True)
        else:
            print(f"phalanx-metric step={epoch} val_loss={val_loss:.6f} accuracy={accuracy:.4f}", flush=True)

    outputs = os.environ.get("PHALANX_OUTPUT_DIR")
    if outputs:
        Path(outputs).mkdir(parents=True, exist_ok=True)
        Path(outputs, "metrics.json").write_text(json.dumps({"val_loss": val_loss, "accuracy": accuracy}))


if __name__ == "__main__":
    main()
