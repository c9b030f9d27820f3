"""A sweep controller in miniature, to be killed: asks trials of one sweep on a study database.

    python optuna_study_child.py URL SWEEP.json N        # ask N trials, print each, print "ready", wait on stdin
    python optuna_study_child.py URL SWEEP.json forever  # ask one trial after another, printing each, until killed

Each asked trial is printed as one JSON line ``{"number": N, "params": {...}}`` once ``ask`` returned it, i.e.
once it is in the database: the test compares what a reopened store sees with what was printed before the kill.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from phalanx.adapters.sweeps.optuna_study import StudyStore
from phalanx.model.sweeps import parse_sweep


def main() -> None:
    url, sweep_file, mode = sys.argv[1:4]
    study = StudyStore(url).open(parse_sweep(json.loads(Path(sweep_file).read_text())))
    rounds = None if mode == "forever" else 1
    count = 1 if mode == "forever" else int(mode)
    while rounds is None or rounds > 0:
        for number, params in sorted(study.ask(count).items()):
            print(json.dumps({"number": number, "params": params}), flush=True)
        if rounds is not None:
            rounds -= 1
    print("ready", flush=True)
    sys.stdin.read()  # held open until the test kills this process


if __name__ == "__main__":
    main()
