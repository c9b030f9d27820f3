"""Bind throughput on Kubernetes: pods bound per second by phalanx-scheduler and by kube-scheduler.

100 kwok nodes; two workloads, each submitted at once on a fresh control plane per scheduler:

- ``single``: 2,000 one-pod jobs;
- ``gang``: 200 gangs of 8 pods.

Every pod asks 1 GPU, 1 CPU and 1 GiB; nodes have ``--gpus-per-node`` GPUs (32 by default, so that every pod fits
at once: this measures binding, not packing). Pods never finish. Schedulers:

- ``phalanx``: TrainingJobs (``generic``, one role of 1 or 8 replicas); phalanx-scheduler admits each job whole,
  phalanx-operator creates its Pods, phalanx-scheduler binds them once the gang's Pods all exist (a one-Pod job's
  Pod is created on its node: there is no gang to wait for, so its seen -> bound latency is 0);
- ``kube``: the same pods created directly (8 client threads), stock kube-scheduler of the pinned version, default
  settings (its API client is limited to 50 requests/s, burst 100);
- ``kube-fast``: the same with ``--kube-api-qps=1000 --kube-api-burst=1000``;
- ``kube-gang`` (gang workload only): kube-scheduler with its alpha gang scheduling and one PodGroup per gang.

Throughput counts from the first submit call to the last pod seen bound (``spec.nodeName`` set, through the pod
watch): for Phalanx that includes validation, admission and the operator's pod creation. The table also gives,
in seconds from the first submit call, when the submit calls returned, when the last job was admitted (Phalanx),
when the last pod was first seen (created) and the last bound; the bind phase alone (first pod seen -> last pod
bound); and each pod's seen -> bound latency.

Every run also counts the API server's write requests (``apiserver_request_total`` from its ``/metrics``, by verb
and resource): from the first submit to the last bind, and to when the run has settled (every pod Running, and for
Phalanx every job Running, or ``--settle-timeout``), divided by the number of jobs. Node heartbeats and leader
Leases are shown apart (``BACKGROUND_RESOURCES``): they do not grow with the workload. Reads (GET, LIST, WATCH)
follow, per job.

Run: python benchmarks/k8s_bind_throughput.py [--nodes 100] [--pods 2000] [--gangs 200] [--gang-size 8] [--quick]
Ends with: RESULT phalanx_pods_per_s=… kube_pods_per_s=… phalanx_gang_pods_per_s=… kube_gang_pods_per_s=…
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _k8s_common import (
    BACKGROUND_RESOURCES,
    PODGROUPS,
    Cluster,
    GangJob,
    PodView,
    create_all,
    fmt,
    interleaved,
    job_writes,
    machine,
    per_second,
    percentile,
    phalanx_missing,
    pod_group_manifest,
    pod_manifest,
    reads_between,
    request_totals,
    table,
    training_job_manifest,
    uniform_jobs,
    watch_pods,
    writes_between,
)
from phalanx.adapters.kubernetes.api import PODS, TRAININGJOBS
from phalanx.adapters.kubernetes.informer import Informer

RUNS = {
    "phalanx": "phalanx-scheduler",
    "kube": "kube-scheduler (defaults)",
    "kube-fast": "kube-scheduler, 1000 QPS",
    "kube-gang": "kube-scheduler, alpha gangs",
}
RESULT_PREFIX = {"phalanx": "phalanx", "kube": "kube", "kube-fast": "kubefast", "kube-gang": "kubegang"}
REQUIRED = {("phalanx", "single"), ("kube", "single"), ("phalanx", "gang")}  # in RESULT even when not run
FAST_ARGS = ("--kube-api-qps=1000", "--kube-api-burst=1000")


@dataclass
class Measure:
    """One scheduler on one workload."""

    run: str
    workload: str
    pods: int
    status: str = "done"
    note: str = ""
    submit_s: float | None = None
    first_seen_s: float | None = None
    last_seen_s: float | None = None
    last_bound_s: float | None = None
    bound: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    last_admitted_s: float | None = None
    jobs: int = 0
    writes_to_bound: Counter[tuple[str, str]] = field(default_factory=Counter)
    writes_to_settled: Counter[tuple[str, str]] = field(default_factory=Counter)
    reads_to_settled: Counter[tuple[str, str]] = field(default_factory=Counter)
    settled: bool = False

    @property
    def pods_per_s(self) -> float | None:
        """Pods bound per second, from the first submit call to the last bind (of those bound, on a timeout)."""
        if self.status not in ("done", "timeout") or not self.last_bound_s:
            return None
        return per_second(self.bound, self.last_bound_s)

    @property
    def bind_phase_per_s(self) -> float | None:
        """Pods bound per second from the first pod seen to the last bind."""
        if self.status not in ("done", "timeout") or self.last_bound_s is None or self.first_seen_s is None:
            return None
        return per_second(self.bound, self.last_bound_s - self.first_seen_s)


def measure(run: str, workload: str, jobs: list[GangJob], args: argparse.Namespace, workdir: Path) -> Measure:
    """A fresh cluster, the workload submitted at once, until every pod is bound (or the timeout)."""
    total = sum(job.pods for job in jobs)
    result = Measure(run, workload, total, jobs=len(jobs))
    if run == "phalanx":
        missing = phalanx_missing()
        if missing:
            result.status, result.note = "n/a", missing
            return result
    cluster = Cluster(
        workdir / f"{run}-{workload}",
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        kube_scheduler=run != "phalanx",
        gang_alpha=run == "kube-gang",
        scheduler_args=FAST_ARGS if run == "kube-fast" else (),
    )
    print(f"[{run}/{workload}] starting a control plane with {args.nodes} nodes", flush=True)
    try:
        with cluster:
            if run == "phalanx":
                cluster.install_phalanx()
                cluster.start_phalanx("operator")
                cluster.start_phalanx("scheduler")
            drive(run, cluster, jobs, args, result)
    except Exception as error:
        message = f"{type(error).__name__}: {error}".splitlines()
        print(f"[{run}/{workload}] failed: " + "\n".join(message), flush=True)
        result.status, result.note = "failed", message[0][:200]
    return result


def drive(run: str, cluster: Cluster, jobs: list[GangJob], args: argparse.Namespace, result: Measure) -> None:
    """Submit everything, then wait for the binds."""
    api, namespace = cluster.api, cluster.namespace
    lock = threading.Lock()
    all_bound = threading.Event()
    all_settled = threading.Event()
    seen: dict[str, float] = {}
    bound: dict[str, float] = {}
    admitted: dict[str, float] = {}
    running_pods: set[str] = set()
    running_jobs: set[str] = set()
    t0 = time.monotonic()

    def check_settled() -> None:  # with the lock held
        if len(running_pods) >= result.pods and (run != "phalanx" or len(running_jobs) >= len(jobs)):
            all_settled.set()

    def on_pod(now: float, view: PodView) -> None:
        with lock:
            seen.setdefault(view.name, now - t0)
            if view.node and view.name not in bound:
                bound[view.name] = now - t0
                if len(bound) >= result.pods:
                    all_bound.set()
            if view.phase == "Running" and view.exists:
                running_pods.add(view.name)
                check_settled()

    def on_job(kind: str, obj: dict[str, Any]) -> None:
        status = obj.get("status") or {}
        with lock:
            if status.get("placements"):
                admitted.setdefault(str(obj["metadata"]["name"]), time.monotonic() - t0)
            if status.get("phase") == "Running":
                running_jobs.add(str(obj["metadata"]["name"]))
                check_settled()

    if run == "phalanx":
        bodies = [training_job_manifest(job, cluster.namespace) for job in jobs]
    else:
        bodies = [pod_manifest(job, i, namespace, pod_group=run == "kube-gang") for job, i in interleaved(jobs)]
    if run == "kube-gang":
        create_all(api, PODGROUPS, [pod_group_manifest(job, namespace) for job in jobs], threads=args.threads)
    job_watch = Informer(api, TRAININGJOBS, namespace=namespace, on_change=on_job) if run == "phalanx" else None
    if job_watch is not None:
        job_watch.start()
        job_watch.wait_synced(30)
    try:
        with watch_pods(api, namespace, on_pod):
            before = request_totals(api)
            t0 = time.monotonic()
            print(f"[{result.run}/{result.workload}] submitting {len(bodies)} objects", flush=True)
            create_all(api, TRAININGJOBS if run == "phalanx" else PODS, bodies, threads=args.threads)
            result.submit_s = time.monotonic() - t0
            deadline = t0 + args.timeout
            while not all_bound.wait(1.0):
                if time.monotonic() > deadline:
                    result.status = "timeout"
                    result.note = f"{len(bound)} of {result.pods} bound in {args.timeout:.0f}s"
                    break
                dead = cluster.dead_processes()
                if dead:
                    result.status, result.note = "failed", f"{dead[0].name} exited; log ends: {dead[0].tail(3)}"
                    break
            result.writes_to_bound = writes_between(before, request_totals(api))
            if result.status == "done":
                result.settled = all_settled.wait(args.settle_timeout)
                after = request_totals(api)
                result.writes_to_settled = writes_between(before, after)
                result.reads_to_settled = reads_between(before, after)
    finally:
        if job_watch is not None:
            job_watch.stop()
    with lock:
        result.bound = len(bound)
        result.first_seen_s = min(seen.values()) if seen else None
        result.last_seen_s = max(seen.values()) if seen else None
        result.last_bound_s = max(bound.values()) if bound else None
        result.latencies_ms = [(bound[name] - seen[name]) * 1000 for name in bound if name in seen]
        result.last_admitted_s = max(admitted.values()) if admitted else None
    rate = result.pods_per_s
    print(
        f"[{result.run}/{result.workload}] {result.status}: {result.bound}/{result.pods} bound, "
        f"{fmt(rate)} pods/s {result.note}",
        flush=True,
    )
    if result.status == "failed":
        print(cluster.logs(15), flush=True)


def report(results: list[Measure], args: argparse.Namespace) -> None:
    """The table and the RESULT line."""
    print()
    print(
        f"{args.nodes} nodes x {args.gpus_per_node} GPUs; single: {args.pods} one-pod jobs; gang: {args.gangs} gangs "
        f"of {args.gang_size}; every pod 1 GPU; creation with {args.threads} client threads"
    )
    print(machine())
    print()
    rows = []
    for r in results:
        rows.append(
            [
                f"{RUNS[r.run]}, {r.workload}",
                r.status,
                f"{r.bound}/{r.pods}",
                fmt(r.submit_s),
                fmt(r.last_admitted_s) if r.run == "phalanx" else "",
                fmt(r.last_seen_s),
                fmt(r.last_bound_s),
                fmt(r.pods_per_s),
                fmt(r.bind_phase_per_s),
                fmt(percentile(r.latencies_ms, 50), 0),
                fmt(percentile(r.latencies_ms, 99), 0),
            ]
        )
    headers = [
        "scheduler, workload",
        "status",
        "bound",
        "submit s",
        "admitted s",
        "created s",
        "bound s",
        "pods/s",
        "bind phase pods/s",
        "p50 ms",
        "p99 ms",
    ]
    print(table(headers, rows))
    for r in results:
        if r.note:
            print(f"  {RUNS[r.run]}, {r.workload}: {r.note}")
    for r in results:
        if r.writes_to_bound:
            print()
            print(write_report(r))
    by_key = {(r.run, r.workload): r for r in results}
    fields = []
    for run in RUNS:
        prefix = RESULT_PREFIX[run]
        for workload, suffix in (("single", ""), ("gang", "gang_")):
            found = by_key.get((run, workload))
            if found is None and (run, workload) not in REQUIRED:
                continue
            fields.append(f"{prefix}_{suffix}pods_per_s={fmt(found.pods_per_s if found else None)}")
    first = ["phalanx_pods_per_s", "kube_pods_per_s", "phalanx_gang_pods_per_s"]
    fields.sort(key=lambda item: first.index(item.split("=")[0]) if item.split("=")[0] in first else len(first))
    print("RESULT " + " ".join(fields))


def write_report(result: Measure) -> str:
    """The run's API writes per job, by verb and resource: to the last bind, and once settled."""
    jobs = max(1, result.jobs)
    keys = sorted(set(result.writes_to_bound) | set(result.writes_to_settled), key=lambda k: (k[1], k[0]))
    rows = [
        [
            f"{verb} {resource}" + (" (background)" if resource in BACKGROUND_RESOURCES else ""),
            result.writes_to_bound.get((verb, resource), 0),
            fmt(result.writes_to_bound.get((verb, resource), 0) / jobs, 2),
            result.writes_to_settled.get((verb, resource), 0),
            fmt(result.writes_to_settled.get((verb, resource), 0) / jobs, 2),
        ]
        for verb, resource in keys
    ]
    rows.append(
        [
            "per job, background excluded",
            job_writes(result.writes_to_bound),
            fmt(job_writes(result.writes_to_bound) / jobs, 2),
            job_writes(result.writes_to_settled),
            fmt(job_writes(result.writes_to_settled) / jobs, 2),
        ]
    )
    settled = "settled" if result.settled else "not settled: counted at --settle-timeout"
    title = f"API writes, {RUNS[result.run]}, {result.workload} ({result.jobs} jobs; {settled})"
    headers = ["verb resource", "to bound", "per job", "to settled", "per job"]
    reads = ", ".join(
        f"{verb} {resource} {count / jobs:.2f}"
        for (verb, resource), count in result.reads_to_settled.most_common()
        if count / jobs >= 0.01
    )
    return f"{title}\n{table(headers, rows)}\nreads per job, to settled: {reads or 'none'}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--gpus-per-node", type=int, default=32)
    parser.add_argument("--pods", type=int, default=2000, help="one-pod jobs of the single workload")
    parser.add_argument("--gangs", type=int, default=200)
    parser.add_argument("--gang-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=8, help="client threads creating the objects")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds a run may take")
    parser.add_argument(
        "--settle-timeout",
        type=float,
        default=60.0,
        help="seconds to wait after the last bind for every pod (and Phalanx job) to be Running, for the write counts",
    )
    parser.add_argument("--runs", default="phalanx,kube,kube-fast", help=f"comma-separated, from: {', '.join(RUNS)}")
    parser.add_argument("--workloads", default="single,gang", help="comma-separated, from: single, gang")
    parser.add_argument("--workdir", type=Path, help="keep each run's logs here (default: a temporary directory)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 nodes, 200 pods, 20 gangs")
    args = parser.parse_args()
    if args.quick:
        args.nodes, args.pods, args.gangs, args.timeout = 20, 200, 20, 60.0
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if any(r not in RUNS for r in runs) or any(w not in ("single", "gang") for w in workloads):
        parser.error("unknown run or workload")
    logging.getLogger("phalanx.adapters.kubernetes.informer").setLevel(logging.ERROR)  # watches cut at teardown
    mixes = {
        "single": uniform_jobs(args.pods, 1, 1, "single"),
        "gang": uniform_jobs(args.gangs, args.gang_size, 1, "gang"),
    }
    results = []
    with tempfile.TemporaryDirectory(prefix="phalanx-k8s-bind-") as tmp:
        workdir = args.workdir or Path(tmp)
        for workload in workloads:
            for run in runs:
                if run == "kube-gang" and workload != "gang":
                    continue
                results.append(measure(run, workload, mixes[workload], args, workdir))
    report(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
