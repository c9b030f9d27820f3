"""Gang scheduling on Kubernetes: partial gangs, GPUs they hold idle, and makespan, per scheduler.

10 kwok nodes x 8 GPUs; 30 jobs of 4-16 GPUs (2-16 pods each, a seeded mix) submitted at once, run three times,
each on a fresh control plane:

1. ``phalanx``: TrainingJobs, admitted whole by phalanx-scheduler, Pods created by phalanx-operator;
2. ``kube``: the same jobs as raw Pods for the stock kube-scheduler of the pinned Kubernetes version;
3. ``kube-gang``: the raw Pods plus one PodGroup per job (``gang.minCount`` = every pod), with that
   kube-scheduler's alpha gang scheduling on (feature gates GenericWorkload and GangScheduling,
   ``scheduling.k8s.io/v1alpha2`` served).

A job makes progress only when all of its pods run: the driver ends it (deletes its Pods, or its TrainingJob)
``--duration`` seconds after every pod of it is Running. Pods of a partial gang just hold their GPUs. A pod
watch stamps every change; partial gangs (>= 1 but not all pods bound, for at least ``--settle`` s) are sampled
every ``--interval`` s; idle GPU-seconds integrate the GPUs bound to partial gangs between events. A run ends
when every job finished, at ``--timeout``, or when nothing was bound or finished for ``--stall`` seconds
(a deadlock).

Run: python benchmarks/k8s_gang.py [--nodes 10] [--jobs 30] [--seed 1] [--duration 5] [--quick]
Ends with: RESULT phalanx_partial_gangs_max=0 kube_partial_gangs_max=N kube_idle_gpu_seconds=S ...
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _k8s_common import (
    PODGROUPS,
    Cluster,
    GangAccounting,
    GangJob,
    PodView,
    create_all,
    delete_quietly,
    fmt,
    gang_mix,
    interleaved,
    machine,
    phalanx_missing,
    pod_group_manifest,
    pod_manifest,
    table,
    training_job_manifest,
    watch_pods,
)
from phalanx.adapters.kubernetes.api import PODS, TRAININGJOBS
from phalanx.adapters.kubernetes.informer import Informer

RUNS = {
    "phalanx": "phalanx-scheduler",
    "kube": "kube-scheduler",
    "kube-gang": "kube-scheduler, alpha gang scheduling",
}
RESULT_PREFIX = {"phalanx": "phalanx", "kube": "kube", "kube-gang": "kubegang"}


@dataclass
class RunResult:
    """One scheduler's run."""

    run: str
    status: str  # done, timeout, stalled, failed, n/a
    note: str = ""
    jobs: int = 0
    finished: int = 0
    makespan_s: float | None = None
    ended_s: float | None = None
    partial_max: int | None = None
    partial_at_end: int | None = None
    idle_gpu_s: float | None = None
    idle_gpus_max: int | None = None
    submit_s: float | None = None


def run_once(run: str, jobs: list[GangJob], args: argparse.Namespace, workdir: Path) -> RunResult:
    """Start a fresh cluster for ``run``, submit every job at once, drive them to the end, measure."""
    if run == "phalanx":
        missing = phalanx_missing()
        if missing:
            return RunResult(run, "n/a", note=missing, jobs=len(jobs))
    cluster = Cluster(
        workdir / run,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        kube_scheduler=run != "phalanx",
        gang_alpha=run == "kube-gang",
    )
    print(f"[{run}] starting a control plane with {args.nodes} nodes x {args.gpus_per_node} GPUs", flush=True)
    try:
        with cluster:
            if run == "phalanx":
                cluster.install_phalanx()
                cluster.start_phalanx("operator")
                cluster.start_phalanx("scheduler")
            return drive(run, cluster, jobs, args)
    except Exception as error:  # a failed run is a row in the table, not the end of the benchmark
        message = f"{type(error).__name__}: {error}".splitlines()
        print(f"[{run}] failed: {message[0]}\n" + "\n".join(message[1:]), flush=True)
        return RunResult(run, "failed", note=message[0][:200], jobs=len(jobs))


def drive(run: str, cluster: Cluster, jobs: list[GangJob], args: argparse.Namespace) -> RunResult:
    """Submit, then every ``--interval``: sample, and end the jobs whose gang has run ``--duration`` seconds."""
    api, namespace = cluster.api, cluster.namespace
    lock = threading.Lock()
    accounting = GangAccounting(jobs, settle_s=args.settle)
    pods: dict[str, dict[str, str]] = collections.defaultdict(dict)  # job -> pod name -> uid
    t0 = time.monotonic()

    def on_pod(now: float, view: PodView) -> None:
        with lock:
            bound, running = bool(view.node), view.phase == "Running"
            accounting.observe(now - t0, view.job, view.name, bound=bound, running=running, exists=view.exists)
            if view.exists:
                pods[view.job][view.name] = view.uid
            else:
                pods[view.job].pop(view.name, None)

    def submit() -> None:
        if run == "phalanx":
            create_all(api, TRAININGJOBS, [training_job_manifest(job, namespace) for job in jobs])
            return
        if run == "kube-gang":
            create_all(api, PODGROUPS, [pod_group_manifest(job, namespace) for job in jobs])
        bodies = [pod_manifest(job, i, namespace, pod_group=run == "kube-gang") for job, i in interleaved(jobs)]
        create_all(api, PODS, bodies)

    def finish(name: str, members: dict[str, str]) -> None:
        if run == "phalanx":
            delete_quietly(api, TRAININGJOBS, name, namespace)
        for pod, uid in members.items():
            delete_quietly(api, PODS, pod, namespace, uid=uid, grace_period_seconds=0)

    failures: list[str] = []

    def on_job(kind: str, obj: dict[str, Any]) -> None:
        status = obj.get("status") or {}
        if kind != "DELETED" and status.get("phase") == "Failed":
            failures.append(f"TrainingJob {obj['metadata']['name']} Failed: {status.get('message', '')}")

    status = "done"
    note = ""
    submitted: list[float] = []
    job_watch = Informer(api, TRAININGJOBS, namespace=namespace, on_change=on_job) if run == "phalanx" else None
    with (
        job_watch_running(job_watch),
        watch_pods(api, namespace, on_pod),
        ThreadPoolExecutor(4, thread_name_prefix="finish") as finisher,
    ):
        t0 = time.monotonic()
        accounting.last_progress = 0.0

        def submit_and_stamp() -> None:
            try:
                submit()
            except Exception as error:  # reported by the loop below
                failures.append(f"submitting failed: {type(error).__name__}: {error}")
            submitted.append(time.monotonic() - t0)

        submitter = threading.Thread(target=submit_and_stamp, name="submit", daemon=True)
        submitter.start()
        print(f"[{run}] submitting {len(jobs)} jobs ({sum(j.pods for j in jobs)} pods)", flush=True)
        last_report = 0.0
        while True:
            now = time.monotonic() - t0
            with lock:
                partial = accounting.sample(now)
                due = accounting.due(now, args.duration)
                ending = []
                for name in due:
                    accounting.finish(now, name)
                    ending.append((name, dict(pods[name])))
                done, finished, last_progress = accounting.done, accounting.finished, accounting.last_progress
            for name, members in ending:
                finisher.submit(finish, name, members)
            if now - last_report >= 10:
                last_report = now
                print(f"[{run}] {now:5.1f}s  finished {finished}/{len(jobs)}  partial gangs {partial}", flush=True)
            if done:
                break
            if now > args.timeout:
                status, note = "timeout", f"{args.timeout:.0f}s"
                break
            if submitted and now - last_progress > args.stall:
                status, note = "stalled", f"nothing bound or finished for {args.stall:.0f}s from {last_progress:.0f}s"
                break
            dead = cluster.dead_processes()
            if dead:
                status, note = "failed", f"{dead[0].name} exited; log ends: {dead[0].tail(3)}"
                break
            if failures:
                status, note = "failed", failures[0]
                break
            time.sleep(args.interval)
        ended = time.monotonic() - t0
        with lock:
            accounting.sample(ended)
            result = RunResult(
                run,
                status,
                note=note,
                jobs=len(jobs),
                finished=accounting.finished,
                makespan_s=accounting.makespan(),
                ended_s=ended,
                partial_max=accounting.partial_max,
                partial_at_end=accounting.partial_now(ended),
                idle_gpu_s=accounting.idle_gpu_seconds,
                idle_gpus_max=accounting.idle_gpus_max,
                submit_s=submitted[0] if submitted else None,
            )
    print(f"[{run}] {status} after {ended:.1f}s: {result.finished}/{len(jobs)} jobs finished {note}", flush=True)
    if status == "failed":
        print(cluster.logs(15), flush=True)
    return result


@contextlib.contextmanager
def job_watch_running(informer: Informer | None) -> Iterator[None]:
    """Run the TrainingJob watch (when there is one) for the duration of the block."""
    if informer is None:
        yield
        return
    informer.start()
    informer.wait_synced(30)
    try:
        yield
    finally:
        informer.stop()


def idle_share(result: RunResult, gpus: int) -> str:
    """Idle GPU-seconds as a share of every GPU-second of the run."""
    if result.idle_gpu_s is None or not result.ended_s or not gpus:
        return "n/a"
    return f"{100 * result.idle_gpu_s / (gpus * result.ended_s):.1f}"


def report(results: list[RunResult], jobs: list[GangJob], args: argparse.Namespace) -> None:
    """The table and the RESULT line."""
    shapes = collections.Counter(f"{j.pods}x{j.gpus_per_pod}" for j in jobs)
    demand = sum(j.gpus for j in jobs)
    print()
    print(
        f"{len(jobs)} jobs, {sum(j.pods for j in jobs)} pods, {demand} GPUs asked of {args.nodes * args.gpus_per_node}"
        f" ({args.nodes} nodes x {args.gpus_per_node}); seed {args.seed}; pods x GPUs: "
        + ", ".join(f"{shape} ({n})" for shape, n in sorted(shapes.items()))
    )
    print(f"each job runs {args.duration:g}s once all its pods run; partial = for >= {args.settle:g}s")
    print(machine())
    print()
    rows = []
    for r in results:
        makespan = fmt(r.makespan_s) if r.makespan_s is not None else ("n/a" if r.status in ("n/a", "failed") else "-")
        rows.append(
            [
                RUNS[r.run],
                r.status,
                f"{r.finished}/{r.jobs}",
                makespan,
                fmt(r.ended_s),
                "n/a" if r.partial_max is None else r.partial_max,
                "n/a" if r.partial_at_end is None else r.partial_at_end,
                fmt(r.idle_gpu_s),
                idle_share(r, args.nodes * args.gpus_per_node),
                "n/a" if r.idle_gpus_max is None else r.idle_gpus_max,
            ]
        )
    headers = [
        "scheduler",
        "status",
        "finished",
        "makespan s",
        "ran s",
        "partial max",
        "partial at end",
        "idle GPU-s",
        "idle %",
        "idle GPUs max",
    ]
    print(table(headers, rows))
    for r in results:
        if r.note:
            print(f"  {RUNS[r.run]}: {r.note}")
    by_run = {r.run: r for r in results}
    fields = []

    def value(r: RunResult | None, name: str) -> str:
        if r is None or r.status in ("n/a", "failed"):
            return "n/a"
        if name == "partial_gangs_max":
            return str(r.partial_max)
        if name == "idle_gpu_seconds":
            return fmt(r.idle_gpu_s)
        if name == "makespan_s":
            return fmt(r.makespan_s) if r.makespan_s is not None else r.status
        return str(r.finished)

    fields.append(f"phalanx_partial_gangs_max={value(by_run.get('phalanx'), 'partial_gangs_max')}")
    fields.append(f"kube_partial_gangs_max={value(by_run.get('kube'), 'partial_gangs_max')}")
    fields.append(f"kube_idle_gpu_seconds={value(by_run.get('kube'), 'idle_gpu_seconds')}")
    for run in RUNS:
        found = by_run.get(run)
        prefix = RESULT_PREFIX[run]
        for name in ("partial_gangs_max", "idle_gpu_seconds", "makespan_s", "finished"):
            key = f"{prefix}_{name}"
            if key not in ("phalanx_partial_gangs_max", "kube_partial_gangs_max", "kube_idle_gpu_seconds"):
                fields.append(f"{key}={value(found, name)}")
    print("RESULT " + " ".join(fields))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--min-gpus", type=int, default=4, help="smallest job, in GPUs")
    parser.add_argument("--max-gpus", type=int, default=16, help="largest job, in GPUs")
    parser.add_argument("--seed", type=int, default=1, help="seeds the job mix")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds a job runs once all its pods run")
    parser.add_argument("--settle", type=float, default=1.0, help="seconds a gang must stay partial to count")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between samples")
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds a run may take")
    parser.add_argument("--stall", type=float, default=30.0, help="end a run when nothing happened this long")
    parser.add_argument(
        "--runs", default=",".join(RUNS), help=f"comma-separated, in order: {', '.join(RUNS)} (default: all)"
    )
    parser.add_argument("--workdir", type=Path, help="keep each run's logs here (default: a temporary directory)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 4 nodes, 10 jobs, 2 s jobs, short limits")
    args = parser.parse_args()
    logging.getLogger("phalanx.adapters.kubernetes.informer").setLevel(logging.ERROR)  # watches cut at teardown
    if args.quick:
        args.nodes, args.jobs, args.duration, args.timeout, args.stall = 4, 10, 2.0, 60.0, 15.0
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = [r for r in runs if r not in RUNS]
    if unknown:
        parser.error(f"unknown run(s) {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    jobs = gang_mix(
        args.jobs, args.seed, min_gpus=args.min_gpus, max_gpus=args.max_gpus, max_gpus_per_pod=args.gpus_per_node
    )
    with tempfile.TemporaryDirectory(prefix="phalanx-k8s-gang-") as tmp:
        workdir = args.workdir or Path(tmp)
        results = [run_once(run, jobs, args, workdir) for run in runs]
    report(results, jobs, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
