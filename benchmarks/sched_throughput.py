"""Scheduling decision throughput of the core with exact device choice, on large simulated clusters.

One cycle of ``core.scheduling.schedule`` (the function the embedded runtime, phalanx-scheduler and the
simulator all call) on N simulated 8-GPU servers (2 sockets x 16 cores x 2 threads, 1 TiB, 8 NVSwitch-linked
GPUs, four per socket) with 10,000 pending pods in gangs of 1-16 (sizes drawn uniformly, seeded). Every pod
asks for one GPU, 4 exclusive CPUs (so NUMA-aligned core choice runs for every pod) and 64 GiB; the
scheduler picks exact GPU indices and CPU ids for each. With 1,000 nodes the 10,000 pods ask for more GPUs
than exist (8,000), so the cycle also explains the gangs left waiting, as a real cycle must; with 5,000, 20,000
and 50,000 nodes everything fits, and the question is what a cluster's size costs each decision.

Each size runs in a fresh subprocess, so the peak resident memory it reports is that run's own. Throughput is
pods placed per second of cycle wall time: the whole ``schedule`` call, which builds its working copy and node
table from the snapshot (the snapshot stands for the informer cache and is built beforehand). For reference,
kube-scheduler's published CI floor is 680 pods/s at 5,000 nodes (scheduler_perf, no gangs, no device choice).

Run:  python benchmarks/sched_throughput.py [--pods 10000] [--sizes 1000,5000,20000,50000] [--placements auto]
Ends with: RESULT pods_per_s_1k=… pods_per_s_5k=… pods_per_s_20k=… pods_per_s_50k=… peak_mb=…
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime

from phalanx.core.scheduling import (
    ClusterSnapshot,
    CpuSlot,
    GpuSlot,
    NodeSnapshot,
    PendingJob,
    ReplicaRequest,
    schedule,
)
from phalanx.model.resources import ResourceVector

GIB = 2**30
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def server(name: str) -> NodeSnapshot:
    cpus = tuple(
        CpuSlot(id=socket * 32 + thread * 16 + core, core=core, socket=socket, numa=socket)
        for socket in range(2)
        for thread in range(2)
        for core in range(16)
    )
    everyone = frozenset(range(8))
    gpus = tuple(GpuSlot(index=i, model="A100", numa=i // 4, nvlink_peers=everyone - {i}) for i in range(8))
    return NodeSnapshot(name=name, cpus=cpus, memory=1024 * GIB, gpus=gpus)


def workload(pods: int, seed: int, placement: str) -> list[PendingJob]:
    rng = random.Random(seed)
    jobs: list[PendingJob] = []
    made = 0
    while made < pods:
        size = min(rng.randint(1, 16), pods - made)
        index = len(jobs)
        jobs.append(
            PendingJob(
                key=f"team/job-{index:05d}",
                priority=0,
                created=T0,
                queue="default",
                replicas=tuple(
                    ReplicaRequest(
                        name=f"job-{index:05d}-worker-{r}",
                        role="worker",
                        resources=ResourceVector(cpu_milli=4000, memory=64 * GIB, gpu=1),
                    )
                    for r in range(size)
                ),
                placement=placement,
            )
        )
        made += size
    return jobs


def run_one(nodes: int, pods: int, seed: int, placement: str) -> dict[str, float]:
    """One cycle in this process; returns the numbers as a dict."""
    jobs = workload(pods, seed, placement)
    snapshot = ClusterSnapshot(nodes=tuple(server(f"node-{i:05d}") for i in range(nodes)))
    started = time.perf_counter()
    decisions = schedule(snapshot, jobs, T0)
    elapsed = time.perf_counter() - started
    placed = sum(len(admission.assignments) for admission in decisions.admitted)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "nodes": nodes,
        "pods": pods,
        "placed": placed,
        "waiting_jobs": len(decisions.waiting),
        "seconds": elapsed,
        "pods_per_s": placed / elapsed,
        "peak_mb": peak_mb,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--sizes", default="1000,5000,20000,50000", help="node counts, comma-separated")
    parser.add_argument("--placements", default="auto", help="placement policies, comma-separated")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: nodes:placement, run in a subprocess
    args = parser.parse_args()
    if args.one:
        nodes, placement = args.one.split(":")
        print(json.dumps(run_one(int(nodes), args.pods, args.seed, placement)))
        return 0
    sizes = [int(size) for size in args.sizes.split(",")]
    placements = args.placements.split(",")
    rows = []
    for placement in placements:
        for nodes in sizes:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--one",
                    f"{nodes}:{placement}",
                    "--pods",
                    str(args.pods),
                    "--seed",
                    str(args.seed),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            rows.append((placement, json.loads(out.stdout.strip().splitlines()[-1])))
    header = ("nodes", "pods", "placed", "waiting jobs", "seconds", "pods/s", "peak MB")
    print(f"{'placement':<10} " + " ".join(f"{name:>{max(6, len(name))}}" for name in header))
    for placement, row in rows:
        print(
            f"{placement:<10} {row['nodes']:>6} {row['pods']:>6} {row['placed']:>6} {row['waiting_jobs']:>12} "
            f"{row['seconds']:>8.2f} {row['pods_per_s']:>8.0f} {row['peak_mb']:>8.0f}"
        )
    headline = [row for placement, row in rows if placement == placements[0]]
    by_size = {int(row["nodes"]): row for row in headline}
    parts = [f"pods_per_s_{size // 1000}k={by_size[size]['pods_per_s']:.0f}" for size in sizes if size % 1000 == 0]
    parts.append(f"peak_mb={max(row['peak_mb'] for _, row in rows):.0f}")
    print("RESULT " + " ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
