"""Phalanx and Slurm side by side on one machine: run latency, submissions per second, and draining N jobs.

Slurm is Debian's ``slurm-wlm`` started by ``hack/slurm_testenv.py`` in a temporary directory (munged, slurmctld
and slurmd on loopback, one node of all this machine's CPUs); Phalanx is a control plane over a fresh state
directory started with ``phalanx up``. Both run on the same machine in the same run, interleaved where they can
be, so that a busy moment falls on both:

1. **run**: ``srun true`` against ``phalanx run job.yaml`` of a one-replica job running ``true``: the wall time
   of the whole command, as a user waits for it, ``--runs`` times each, alternating. p50 and p95.
2. **submit**: ``sbatch --wrap true`` against ``phalanx submit -f job.yaml`` (the CLI), back to back,
   ``--submits`` times each; and the SDK (``Client.submit`` in this process) ``--sdk-submits`` times.
   Submissions per second.
3. **drain**: ``--drain`` jobs running ``true`` submitted (sbatch, the SDK), then waited for until every one has
   ended: seconds from the first submission to the last end.

Run from the repository root, as root (slurmd must be), on an otherwise idle machine:

    python benchmarks/vs_slurm.py [--runs 20] [--submits 30] [--sdk-submits 200] [--drain 100]

It prints a table, then ``RESULT slurm_run_p50_ms=… phalanx_run_p50_ms=… slurm_submit_per_s=…
phalanx_submit_per_s=… phalanx_sdk_submit_per_s=… slurm_drain_s=… phalanx_drain_s=…``, and the issue's bars
with yes or no: ``phalanx run`` p50 at most ``srun``'s, CLI submissions at least ``sbatch``'s, the SDK at least
5 times ``sbatch``'s, draining no slower than Slurm. It exits 1 when a bar is missed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hack"))

import slurm_testenv
from phalanx.entrypoints.client import Client
from phalanx.model.jobs import Phase, TrainingJob

PHALANX = [sys.executable, "-m", "phalanx.entrypoints.cli"]
ENDED = {Phase.SUCCEEDED, Phase.FAILED}


def job(name: str) -> dict[str, Any]:
    """A one-replica job running ``true``, as small as a job gets."""
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "type": "generic",
            "replicas": {"worker": {"count": 1, "template": {"command": ["true"], "resources": {"cpu": "100m"}}}},
        },
    }


def timed(command: list[str], env: dict[str, str], cwd: Path) -> float:
    """Seconds the command took; it must succeed."""
    started = time.perf_counter()
    subprocess.run(command, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def slurm_idle(env: dict[str, str]) -> bool:
    out = subprocess.run(["squeue", "--noheader", "--me"], env=env, capture_output=True, text=True, check=True)
    return not out.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--submits", type=int, default=30)
    parser.add_argument("--sdk-submits", type=int, default=200)
    parser.add_argument("--drain", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="phalanx-vs-slurm-") as tmp:
        root = Path(tmp)
        slurm = slurm_testenv.start(root / "slurm")
        state = root / "state"
        env = {**slurm.env, "PHALANX_HOME": str(state), "COLUMNS": "200"}
        work = root / "work"
        work.mkdir()
        try:
            subprocess.run([*PHALANX, "up"], env=env, cwd=work, check=True, capture_output=True)
            results = measure(args, slurm.env, env, work, state)
        finally:
            subprocess.run([*PHALANX, "down"], env=env, cwd=work, check=False, capture_output=True)
            slurm_testenv.stop(root / "slurm")
    return report(results)


def measure(
    args: argparse.Namespace, slurm_env: dict[str, str], env: dict[str, str], work: Path, state: Path
) -> dict[str, float]:
    run_file = work / "run.yaml"
    run_file.write_text(yaml.safe_dump(job("runner")))
    srun, prun = [], []
    timed([*PHALANX, "run", str(run_file), "--no-logs"], env, work)  # warm-up: first start of the CLI's imports
    timed(["srun", "true"], slurm_env, work)
    for _ in range(args.runs):
        srun.append(timed(["srun", "true"], slurm_env, work))
        prun.append(timed([*PHALANX, "run", str(run_file), "--no-logs"], env, work))
    sbatch = [timed(["sbatch", "--wrap", "true", "-o", "/dev/null"], slurm_env, work) for _ in range(args.submits)]
    cli = []
    for number in range(args.submits):
        path = work / f"submit-{number}.yaml"
        path.write_text(yaml.safe_dump(job(f"cli-{number}")))
        cli.append(timed([*PHALANX, "submit", "-f", str(path)], env, work))
    with Client(state_dir=state) as client:
        started = time.perf_counter()
        for number in range(args.sdk_submits):
            client.submit(job(f"sdk-{number}"))
        sdk_s = time.perf_counter() - started
        wait_all(client, lambda: slurm_idle(slurm_env))
        # Drain: N jobs submitted, then waited for until every one has ended.
        started = time.perf_counter()
        for _ in range(args.drain):
            subprocess.run(
                ["sbatch", "--wrap", "true", "-o", "/dev/null"], env=slurm_env, check=True, capture_output=True
            )
        while not slurm_idle(slurm_env):
            time.sleep(0.05)
        slurm_drain = time.perf_counter() - started
        started = time.perf_counter()
        names = [f"drain-{number}" for number in range(args.drain)]
        for name in names:
            client.submit(job(name))
        for name in names:
            client.wait(name, until=ENDED, timeout=1800)
        phalanx_drain = time.perf_counter() - started
    return {
        "slurm_run_p50_ms": statistics.median(srun) * 1000,
        "slurm_run_p95_ms": percentile(srun, 95) * 1000,
        "phalanx_run_p50_ms": statistics.median(prun) * 1000,
        "phalanx_run_p95_ms": percentile(prun, 95) * 1000,
        "slurm_submit_per_s": len(sbatch) / sum(sbatch),
        "phalanx_submit_per_s": len(cli) / sum(cli),
        "phalanx_sdk_submit_per_s": args.sdk_submits / sdk_s,
        "slurm_drain_s": slurm_drain,
        "phalanx_drain_s": phalanx_drain,
    }


def wait_all(client: Client, slurm_done: Any) -> None:
    """Let both finish what the submit step gave them, so that the drain starts from empty queues."""
    while not slurm_done() or any(Phase(j.status.phase) not in ENDED for j in client.store.list(TrainingJob)):
        time.sleep(0.1)


def report(results: dict[str, float]) -> int:
    rows = [
        ("run a one-replica `true`, p50 / p95", "slurm_run", "phalanx_run", "ms"),
        ("submissions per second (CLI)", "slurm_submit_per_s", "phalanx_submit_per_s", "/s"),
        ("submissions per second (Phalanx SDK)", "slurm_submit_per_s", "phalanx_sdk_submit_per_s", "/s"),
        ("drain the jobs", "slurm_drain_s", "phalanx_drain_s", "s"),
    ]
    print(f"{'':38} {'Slurm':>16} {'Phalanx':>16}")
    for label, slurm_key, phalanx_key, unit in rows:
        if unit == "ms":
            left = f"{results[slurm_key + '_p50_ms']:.0f} / {results[slurm_key + '_p95_ms']:.0f} ms"
            right = f"{results[phalanx_key + '_p50_ms']:.0f} / {results[phalanx_key + '_p95_ms']:.0f} ms"
        else:
            left, right = f"{results[slurm_key]:.1f} {unit}", f"{results[phalanx_key]:.1f} {unit}"
        print(f"{label:38} {left:>16} {right:>16}")
    bars = {
        "phalanx run p50 <= srun p50": results["phalanx_run_p50_ms"] <= results["slurm_run_p50_ms"],
        "CLI submissions/s >= sbatch's": results["phalanx_submit_per_s"] >= results["slurm_submit_per_s"],
        "SDK submissions/s >= 5x sbatch's": results["phalanx_sdk_submit_per_s"] >= 5 * results["slurm_submit_per_s"],
        "drain no slower than Slurm": results["phalanx_drain_s"] <= results["slurm_drain_s"],
    }
    for bar, met in bars.items():
        print(f"bar: {bar}: {'yes' if met else 'no'}")
    keys = [
        "slurm_run_p50_ms",
        "phalanx_run_p50_ms",
        "slurm_submit_per_s",
        "phalanx_submit_per_s",
        "phalanx_sdk_submit_per_s",
        "slurm_drain_s",
        "phalanx_drain_s",
    ]
    print("RESULT " + " ".join(f"{key}={results[key]:.1f}" for key in keys))
    return 0 if all(bars.values()) else 1


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("run as root: slurmd must be (hack/slurm_testenv.py)")
    sys.exit(main())
