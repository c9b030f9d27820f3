"""A stand-in for mpi-operator's pi image (``phalanx run --stand-in mpioperator/mpi-pi:openmpi=PROGRAM``).

One program plays both roles of the MPIJob, by the argv its container would run, handed to it as arguments:

- the launcher's ``mpirun -n 2 /home/mpiuser/pi``: runs the real ``mpirun`` of this environment with the same
  arguments, the image's pi program played by mpi_pi.py (mpi4py). mpirun finds the hostfile Phalanx renders through
  the mpi JobType's variables. What the image's environment would give mpirun is given here: running as root is
  allowed (CI runs as root) and ranks are not bound to cores (on one machine they share the launcher's CPUs).
- a worker's ``/usr/sbin/sshd -De ...``: holds its place until Phalanx stops it once the launcher has succeeded,
  as mpi-operator's workers serve sshd until the job ends.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

PI = "/home/mpiuser/pi"


def main() -> int:
    argv = sys.argv[1:]
    if argv and argv[0] == "mpirun":
        program = [sys.executable, str(Path(__file__).with_name("mpi_pi.py"))]
        args = [word for arg in argv[1:] for word in (program if arg == PI else [arg])]
        mpirun = str(Path(sys.executable).with_name("mpirun"))
        os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        os.execv(mpirun, [mpirun, "--bind-to", "none", *args])
    if argv and Path(argv[0]).name == "sshd":
        print(f"worker: playing {' '.join(argv)} until the launcher is done", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            signal.pause()
    print(f"mpi_pi_standin.py plays mpirun and sshd; it was asked to run {argv}", file=sys.stderr, flush=True)
    return 2


if __name__ == "__main__":
    sys.exit(main())
