"""pi by the midpoint rule over the MPI ranks (mpi4py), as mpi-operator's pi example computes it in C.

Each rank sums its share of the intervals; rank 0 reduces the shares and prints the estimate and the world size.
"""

from __future__ import annotations

from mpi4py import MPI

INTERVALS = 1_000_000


def main() -> None:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    width = 1.0 / INTERVALS
    share = sum(4.0 / (1.0 + ((i + 0.5) * width) ** 2) for i in range(rank, INTERVALS, size)) * width
    total = comm.reduce(share, op=MPI.SUM, root=0)
    if rank == 0:
        print(f"pi is approximately {total:.8f} over {size} ranks", flush=True)


if __name__ == "__main__":
    main()
