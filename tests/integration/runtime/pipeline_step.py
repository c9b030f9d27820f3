"""The program of the pipeline integration tests' KFP v1 components: each run appends one line to a starts file.

``pipeline_step.py STARTS MODE ARGS...``:

- ``make COUNT SHARDS_OUT DATA_OUT``: writes the JSON list ``[0, .., COUNT-1]`` and a folder of COUNT files;
- ``work DATA SHARD SCORE_OUT [FLAKY_DIR]``: reads its shard's file from DATA, writes a score; with FLAKY_DIR, the
  first run of shard 1 fails (it leaves a marker there); a ``hold-<shard>`` file in the starts file's folder
  makes it wait until ``go-<shard>`` appears there (the kill -9 test holds a step mid-run so);
- ``join SCORES BEST_OUT``: the largest score of the JSON list;
- ``report BEST``: prints it.

The line appended is ``MODE[ SHARD] PID``, before anything else, so the test counts every process started.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    starts, mode, *args = argv
    shard = args[1] if mode == "work" else ""
    with open(starts, "a") as log:
        log.write(f"{mode}{' ' + shard if shard else ''} {os.getpid()}\n")
    folder = Path(starts).parent
    if mode == "make":
        count, shards_out, data_out = int(args[0]), Path(args[1]), Path(args[2])
        shards_out.write_text(json.dumps(list(range(count))))
        data_out.mkdir(parents=True, exist_ok=True)
        for index in range(count):
            (data_out / f"shard-{index}.txt").write_text(f"{index * 10}\n")
        return 0
    if mode == "work":
        data, score_out = Path(args[0]), Path(args[2])
        if len(args) > 3 and shard == "1":
            marker = Path(args[3]) / "failed-once"
            if not marker.exists():
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.write_text("1")
                print("failing on purpose, once", file=sys.stderr)
                return 3
        if (folder / f"hold-{shard}").exists():
            while not (folder / f"go-{shard}").exists():  # released by the test, after a kill -9 and a restart
                time.sleep(0.05)
        value = int((data / f"shard-{shard}.txt").read_text())
        score_out.write_text(str(0.5 + value / 100))
        return 0
    if mode == "join":
        scores, best_out = json.loads(args[0]), Path(args[1])
        best_out.write_text(str(max(float(s) for s in scores)))
        return 0
    if mode == "report":
        print(f"best {args[0]}")
        return 0
    print(f"unknown mode {mode}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
