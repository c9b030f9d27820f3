# examples/frameworks/mpi/allreduce.py
"""An mpi4py all-reduce across the ranks that mpirun starts from the hostfile Phalanx renders.

The launcher runs ``mpirun python allreduce.py``: no ``--hostfile`` and no ``-n``, so mpirun takes its hosts and
its number of ranks (one per slot) from the hostfile the mpi JobType points it at. Every rank contributes
``rank + 1`` (and a vector scaled by it) to each of ``--steps`` all-reduces, checks the sum against the formula,
and writes ``result-rank<r>.json`` to ``$PHALANX_OUTPUT_DIR``. A wrong sum exits non-zero, which fails the run.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1, help="how many all-reduces to run")
parser.add_argument("--pause", type=float, default=0.0, help="seconds between two all-reduces")
options = parser.parse_args()

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
attempt = os.environ.get("PHALANX_ATTEMPT", "0")
hostfile = os.environ["PHALANX_HOSTFILE"]  # the same file the JobType's variables point mpirun at

triangle = size * (size + 1) // 2  # 1 + 2 + ... + size
for step in range(1, options.steps + 1):
    total = comm.allreduce((rank + 1) * step, op=MPI.SUM)
    vector = np.empty(4, dtype=np.int64)
    comm.Allreduce(np.arange(4, dtype=np.int64) * (rank + 1), vector, op=MPI.SUM)
    if total != triangle * step or vector.tolist() != [i * triangle for i in range(4)]:
        print(f"rank {rank}: step {step}: wrong sums {total} and {vector.tolist()}", file=sys.stderr, flush=True)
        comm.Abort(1)
    print(f"rank {rank}/{size} step {step}/{options.steps} sum {total} (attempt {attempt})", flush=True)
    time.sleep(options.pause)

result = {
    "rank": rank,
    "size": size,
    "universe_size": comm.Get_attr(MPI.UNIVERSE_SIZE),  # the slots mpirun was given, from the hostfile
    "processor": MPI.Get_processor_name(),
    "steps": options.steps,
    "sum": total,
    "expected": triangle * options.steps,
    "vector": vector.tolist(),
    "attempt": int(attempt),
    "hostfile": Path(hostfile).read_text(),
    "mpi": MPI.Get_library_version().rstrip("\x00").splitlines()[0],
}
with open(os.path.join(os.environ["PHALANX_OUTPUT_DIR"], f"result-rank{rank}.json"), "w") as out:
    json.dump(result, out, indent=2)
comm.Barrier()  # every rank has written its result before mpirun (and so the launcher) exits
