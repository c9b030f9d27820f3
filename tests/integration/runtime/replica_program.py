"""A configurable replica program for the runtime tests: record, wait, crash, exit — as told by its arguments.

python replica_program.py --record FILE     append "<role>-<index> <attempt> <pid> <start>" to FILE
                          --hold FILE       keep running until FILE exists
                          --crash-once DIR  exit 3 the first time this replica runs (marker in DIR)
                          --crash-always    exit with --exit-code
                          --exit-code N
                          --sleep S
                          --progress FILE   append a line every 0.05 s while holding
                          --await-lines FILE N  after --record, wait until FILE has N lines
                          --env-dir DIR     first write the whole environment as JSON to DIR/<role>-<index>.json
                          --hostfile-out FILE   copy the hostfile named by $OMPI_MCA_orte_default_hostfile to FILE
                          --hostfile-var NAME   read the hostfile's path from $NAME instead (e.g. HYDRA_HOST_FILE)
                          --expect-slots N  exit 5 unless that hostfile lists N slots in all ("host slots=N" lines,
                                            or Hydra's "host:N")
                          --quiet-exit      print nothing at the end (the log's disk may be full by then)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record")
    parser.add_argument("--hold")
    parser.add_argument("--crash-once")
    parser.add_argument("--crash-always", action="store_true")
    parser.add_argument("--exit-code", type=int, default=3)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--progress")
    parser.add_argument("--await-lines", nargs=2, metavar=("FILE", "N"))
    parser.add_argument("--env-dir")
    parser.add_argument("--hostfile-out")
    parser.add_argument("--hostfile-var", default="OMPI_MCA_orte_default_hostfile")
    parser.add_argument("--expect-slots", type=int)
    parser.add_argument("--quiet-exit", action="store_true")
    args = parser.parse_args()
    me = f"{os.environ['PHALANX_ROLE']}-{os.environ['PHALANX_REPLICA_INDEX']}"
    attempt = os.environ.get("PHALANX_ATTEMPT", "?")
    if args.env_dir:
        # Written under a temporary name and renamed, so a reader never sees half a file.
        target = Path(args.env_dir) / f"{me}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_suffix(f".tmp{os.getpid()}")
        temporary.write_text(json.dumps(dict(os.environ)))
        temporary.replace(target)
    if args.hostfile_out or args.expect_slots is not None:
        hostfile = Path(os.environ[args.hostfile_var]).read_text()
        print(f"{me} hostfile:\n{hostfile}", end="", flush=True)
        if args.hostfile_out:
            Path(args.hostfile_out).write_text(hostfile)
        slots = sum(int(word.split("=", 1)[1]) for word in hostfile.split() if word.startswith("slots="))
        slots += sum(int(line.rsplit(":", 1)[1]) for line in hostfile.splitlines() if ":" in line)
        if args.expect_slots is not None and slots != args.expect_slots:
            print(f"{me}: the hostfile lists {slots} slots, expected {args.expect_slots}", flush=True)
            return 5
    if args.record:
        with open(args.record, "a") as handle:
            handle.write(f"{me} {attempt} {os.getpid()} {time.time():.6f}\n")
    print(f"{me} started, pid {os.getpid()}, cpus {sorted(os.sched_getaffinity(0))}", flush=True)
    if args.await_lines:
        path, lines = Path(args.await_lines[0]), int(args.await_lines[1])
        while not path.exists() or len(path.read_text().splitlines()) < lines:
            time.sleep(0.01)
    if args.crash_always:
        print(f"{me} failing with exit code {args.exit_code}", flush=True)
        return args.exit_code
    if args.crash_once:
        marker = Path(args.crash_once) / f"crashed-{me}"
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text("1")
            print(f"{me} crashing once", flush=True)
            return args.exit_code
    deadline = time.monotonic() + args.sleep
    while time.monotonic() < deadline:
        time.sleep(0.01)
    if args.hold:
        while not Path(args.hold).exists():
            if args.progress:
                with open(args.progress, "a") as handle:
                    handle.write(f"{me} {time.time():.3f}\n")
            time.sleep(0.05)
    if not args.quiet_exit:
        print(f"{me} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
