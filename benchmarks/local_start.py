"""Embedded runtime start latency and `phalanx run` overhead.

1. Start latency with a warm control plane: submit a one-replica job through the SDK and measure the time to
   (a) the replica's process running (its Replica object turns Running: the process exists, pinned) and
   (b) the first line of the replica's own program executing (it records its start time).
2. Overhead of `phalanx run` on a 10-second job against running the same script directly, in the same run.

Run: python benchmarks/local_start.py [--jobs 40] [--job-seconds 10] [--repeats 3]
Ends with: RESULT start_p50_ms=… start_p95_ms=… overhead_pct=…
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

import yaml

from phalanx.entrypoints.client import Client
from phalanx.model.jobs import Phase
from phalanx.model.replicas import Replica, ReplicaPhase
from phalanx.services.embedded.daemon import start_control_plane, stop_control_plane

STAMP = """
import sys, time
open(sys.argv[1], "w").write(repr(time.time()))
"""
SLEEPER = """
import sys, time
time.sleep(float(sys.argv[1]))
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def job(name: str, command: list[str], cpu: str = "100m") -> dict[str, object]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "type": "generic",
            "replicas": {
                "worker": {
                    "count": 1,
                    "template": {"command": command, "resources": {"cpu": cpu, "memory": "64Mi"}},
                }
            },
        },
    }


def measure_start(client: Client, work: Path, jobs: int) -> tuple[list[float], list[float]]:
    stamp = work / "stamp.py"
    stamp.write_text(STAMP)
    to_running, to_exec = [], []
    for i in range(jobs + 2):
        name = f"start-{i}"
        marker = work / f"{name}.t"
        submitted = time.time()
        client.submit(job(name, ["python", str(stamp), str(marker)], cpu="1"))
        running_at = None
        while running_at is None:
            seq = client.store.latest_seq()
            replica = client.store.try_get(Replica, "default", f"{name}-worker-0")
            if replica is not None and replica.status.phase != ReplicaPhase.PENDING and replica.status.start_time:
                running_at = replica.status.start_time.timestamp()
                break
            client.store.wait_for_change(seq, 0.5)
        final = client.wait(name, timeout=60)
        assert final.status.phase == Phase.SUCCEEDED, final.status.message
        if i < 2:
            continue  # warm-up: imports and caches of the first jobs
        to_running.append((running_at - submitted) * 1000)
        to_exec.append((float(marker.read_text()) - submitted) * 1000)
        client.delete(name)
    return to_running, to_exec


def measure_overhead(
    client: Client, state: Path, work: Path, seconds: float, repeats: int
) -> tuple[float, float, float, float]:
    script = work / "sleeper.py"
    script.write_text(SLEEPER)
    spec = work / "ten-seconds.yaml"
    # One whole core, as the direct run has: the comparison is about Phalanx, not about a CPU quota.
    spec.write_text(yaml.safe_dump(job("ten-seconds", ["python", str(script), str(seconds)], cpu="1")))
    env = {**os.environ, "PHALANX_HOME": str(state)}
    direct, managed, inside, interpreter = [], [], [], []
    for _ in range(repeats):
        began = time.monotonic()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        interpreter.append(time.monotonic() - began)
        began = time.monotonic()
        subprocess.run([sys.executable, str(script), str(seconds)], check=True)
        direct.append(time.monotonic() - began)
        began = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "phalanx.entrypoints.cli", "run", str(spec), "--no-logs"],
            check=True,
            env=env,
            cwd=work,
            stdout=subprocess.DEVNULL,
        )
        managed.append(time.monotonic() - began)
        finished = client.get("ten-seconds")
        assert finished.status.completion_time and finished.metadata.creation_timestamp
        inside.append((finished.status.completion_time - finished.metadata.creation_timestamp).total_seconds())
    return (
        statistics.median(direct),
        statistics.median(managed),
        statistics.median(inside),
        statistics.median(interpreter),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--job-seconds", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="phalanx-bench-") as tmp:
        state, work = Path(tmp) / "state", Path(tmp) / "work"
        work.mkdir()
        client = Client(state_dir=state)
        start_control_plane(client.layout)
        try:
            to_running, to_exec = measure_start(client, work, args.jobs)
            direct, managed, inside, interpreter = measure_overhead(client, state, work, args.job_seconds, args.repeats)
        finally:
            stop_control_plane(client.layout)
            client.close()
    overhead_pct = (managed - direct) / direct * 100
    job_overhead_pct = (inside - direct) / direct * 100
    rows = [
        ("submit -> replica process running", to_running),
        ("submit -> replica program executing", to_exec),
    ]
    print(f"{'measure':<40} {'n':>4} {'p50 ms':>9} {'p95 ms':>9} {'max ms':>9}")
    for label, values in rows:
        print(
            f"{label:<40} {len(values):>4} {percentile(values, 50):>9.1f} {percentile(values, 95):>9.1f} "
            f"{max(values):>9.1f}"
        )
    print()
    print(f"{f'{args.job_seconds:g}-second job, median of {args.repeats}':<40} {'seconds':>9} {'overhead':>9}")
    print(f"{'  python -c pass (interpreter start)':<40} {interpreter:>9.3f} {'':>9}")
    print(f"{'  python script.py (direct)':<40} {direct:>9.3f} {'':>9}")
    print(f"{'  phalanx run job.yaml (whole command)':<40} {managed:>9.3f} {overhead_pct:>8.2f}%")
    print(f"{'  submitted -> Succeeded (in Phalanx)':<40} {inside:>9.3f} {job_overhead_pct:>8.2f}%")
    print(
        f"RESULT start_p50_ms={percentile(to_running, 50):.1f} start_p95_ms={percentile(to_running, 95):.1f} "
        f"exec_p50_ms={percentile(to_exec, 50):.1f} overhead_pct={overhead_pct:.2f} "
        f"job_overhead_pct={job_overhead_pct:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
