"""One trial of the sweep-quality benchmark: a noisy learning curve whose end depends on two parameters.

The objective is the Branin function (three global minima, value 0.397887) seen as a validation loss: a trial
"trains" for ``--steps`` steps of ``--step-seconds`` each and prints, after each step,

    phalanx-metric step=<n> loss=<value>

where the value moves from a common start (4.0) towards ``1 + branin(x, y) / 20`` along an exponential curve
(``RATE``),
plus Gaussian noise seeded by (benchmark seed, trial number, step) so that a rerun prints the same numbers.
Early values therefore rank trials as their final values do, with noise, as real learning curves roughly do:
what median stopping relies on. The final value (the curve's last point) also goes to
``$PHALANX_OUTPUT_DIR/metrics.json``. No dependencies beyond Python.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from pathlib import Path

START = 4.0
#: How fast a curve approaches its final level: 70 % of the way after 15 % of the steps, as a training loss
#: that drops fast at first and then flattens.
RATE = 8.0


def branin(x: float, y: float) -> float:
    """The Branin-Hoo function on x in [-5, 10], y in [0, 15]; minimum 0.397887 at three points."""
    b, c, r, s, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 6.0, 10.0, 1 / (8 * math.pi)
    return (y - b * x * x + c * x - r) ** 2 + s * (1 - t) * math.cos(x) + s


def curve(x: float, y: float, step: int, steps: int, noise: random.Random) -> float:
    """The loss after ``step`` of ``steps``: an exponential approach to the trial's final level, with noise."""
    final = 1.0 + branin(x, y) / 20.0
    progress = 1.0 - math.exp(-RATE * step / steps)
    return final + (START - final) * (1.0 - progress) + noise.gauss(0.0, 0.02)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--x", type=float, required=True)
    parser.add_argument("--y", type=float, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--trial", type=int, required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--step-seconds", type=float, default=0.1)
    args = parser.parse_args()
    value = START
    for step in range(1, args.steps + 1):
        time.sleep(args.step_seconds)
        value = curve(args.x, args.y, step, args.steps, random.Random(f"{args.seed}/{args.trial}/{step}"))
        print(f"phalanx-metric step={step} loss={value:.6f}", flush=True)
    outputs = os.environ.get("PHALANX_OUTPUT_DIR")
    if outputs:
        Path(outputs).mkdir(parents=True, exist_ok=True)
        Path(outputs, "metrics.json").write_text(json.dumps({"loss": value}))


if __name__ == "__main__":
    main()
