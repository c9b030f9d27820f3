"""A stand-in for a PyTorch DDP program: the rendezvous torch.distributed.init_process_group("env://") does.

The project's test environment has no torch, and the images of Kubeflow's examples cannot run here, so this
program does what matters to Phalanx with the same variables: rank 0 listens on MASTER_ADDR:MASTER_PORT, every
other rank connects and says its rank, and rank 0 exits 0 only once it has heard WORLD_SIZE - 1 distinct ranks.
Each replica first writes its environment to ENV_DIR/<RANK>.json.

python ddp_standin.py ENV_DIR
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

TIMEOUT_SECONDS = 60.0


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    (out / f"{rank}.json").write_text(json.dumps(dict(os.environ)))
    address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    if rank == 0:
        heard: set[int] = set()
        with socket.create_server(address) as server:
            server.settimeout(TIMEOUT_SECONDS)
            while len(heard) < world - 1:
                peer, _ = server.accept()
                with peer:
                    heard.add(int(peer.recv(16).decode()))
        print(f"rank 0 heard ranks {sorted(heard)} of world size {world}", flush=True)
        return 0 if heard == set(range(1, world)) else 4
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while True:
        try:
            with socket.create_connection(address, timeout=5) as connection:
                connection.sendall(str(rank).encode())
            print(f"rank {rank} joined rank 0 at {address[0]}:{address[1]}", flush=True)
            return 0
        except OSError:
            if time.monotonic() > deadline:
                print(f"rank {rank}: nobody listens at {address}", flush=True)
                return 5
            time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
