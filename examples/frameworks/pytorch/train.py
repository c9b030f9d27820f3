# examples/frameworks/pytorch/train.py
"""Data-parallel PyTorch over gloo, checked by its own collectives.

Every rank joins the process group from the environment (env://: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK,
set by Phalanx's pytorch JobType or by torchrun), checks an all-reduce, trains a tiny model with
DistributedDataParallel on data of its own, checks that every rank ends with the same parameters, and writes
what it saw to $PHALANX_OUTPUT_DIR/result-rank<RANK>.json. Any wrong result exits non-zero.
"""

import argparse
import hashlib
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def parameters_digest(model: torch.nn.Module) -> str:
    """sha256 of every parameter's bytes, in order: equal digests mean bit-identical parameters."""
    digest = hashlib.sha256()
    for parameter in model.parameters():
        digest.update(parameter.detach().numpy().tobytes())
    return digest.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5, help="training steps")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="pause per step (to watch it run)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a collective may wait for a peer")
    args = parser.parse_args()

    # A collective waits at most --timeout for its peers, so a rank whose peer died fails instead of hanging.
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("PHALANX_ATTEMPT", "0"))
    print(f"rank {rank} of {world} joined (attempt {attempt})", flush=True)

    # 1. All-reduce: the sum of rank + 1 over every rank is 1 + 2 + ... + world.
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    expected = world * (world + 1) / 2
    if total.item() != expected:
        print(f"rank {rank}: all-reduce gave {total.item()}, expected {expected}", file=sys.stderr)
        return 1

    # 2. DDP: each rank trains on its own data; gradients are averaged, so parameters stay identical.
    torch.manual_seed(rank)  # different initial weights per rank: DDP must broadcast rank 0's
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(1000 + rank)
    inputs = torch.randn(64, 8, generator=data)
    targets = inputs.sum(dim=1, keepdim=True) + 0.1 * torch.randn(64, 1, generator=data)
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        print(f"rank {rank} step {step + 1}/{args.steps} loss {loss.item():.4f}", flush=True)
        time.sleep(args.step_seconds)

    # 3. Every rank's parameters must be bit-identical to every other's.
    digest = parameters_digest(model.module)
    digests: list[str | None] = [None] * world
    dist.all_gather_object(digests, digest)
    if len(set(digests)) != 1:
        print(f"rank {rank}: parameters differ across ranks: {digests}", file=sys.stderr)
        return 1

    result = {
        "rank": rank,
        "world_size": world,
        "attempt": attempt,
        "allreduce_sum": total.item(),
        "params_sha256": digest,
        "loss": loss.item(),
        "steps": args.steps,
    }
    out = Path(os.environ.get("PHALANX_OUTPUT_DIR", "."))
    (out / f"result-rank{rank}.json").write_text(json.dumps(result) + "\n")
    print(f"rank {rank} done: all-reduce {total.item():.0f}, parameters {digest[:12]}", flush=True)
    dist.barrier()  # nobody leaves (and closes its sockets) while a peer still gathers
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without the interpreter's finalisation: gloo's threads may still be winding down then, and one left
    # joinable aborts the process ("terminate called without an active exception", exit 134) after a run that
    # succeeded. Everything this program writes is closed by now.
    os._exit(code)
