"""How long each CLI verb takes, as a user waits for it: handed to the preloaded process, and in a process of its own.

A fresh state directory gets a control plane (``phalanx up``) and ``--jobs`` finished one-replica jobs, so the
tables have rows to read. Then each verb below runs ``--runs`` times two ways, alternating so that a busy moment
falls on both: as ``phalanx`` runs it by default (handed to the control plane's preloaded process,
``entrypoints/cli/preload.py``), and with ``PHALANX_CLI_PRELOAD=0`` (the whole command in its own process, the
baseline). Each figure is the wall time of the whole command, Python's start included.

It also measures what every command pays before it sends a byte: the import time of the launcher (the modules
that hand a verb over) against that of the typer app and the job verbs (what a command in its own process
imports), from ``python -X importtime``, median of ``--runs``.

Run from the repository root on an otherwise idle machine:

    python benchmarks/cli_latency.py [--runs 20] [--jobs 20]

It prints a table, then ``RESULT max_p50_ms=… launcher_import_ms=… direct_import_ms=…`` with each verb's p50,
and the issue's bar (every read verb and ``submit`` at most 150 ms p50) with yes or no; it exits 1 when missed.
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

from phalanx.entrypoints.client import Client
from phalanx.model.jobs import Phase, TrainingJob

PHALANX = [sys.executable, "-m", "phalanx.entrypoints.cli"]
BAR_MS = 150.0
VERBS: list[tuple[str, list[str]]] = [
    ("get jobs", ["get", "jobs"]),
    ("get job -o yaml", ["get", "job", "j0", "-o", "yaml"]),
    ("describe job", ["describe", "job", "j0"]),
    ("logs", ["logs", "j0"]),
    ("get queues", ["get", "queues"]),
    ("history", ["history"]),
    ("status", ["status"]),
    ("submit", ["submit", "{file}"]),
]


def job(name: str) -> dict[str, Any]:
    """A one-replica job that prints a line, as small as a job gets."""
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "type": "generic",
            "replicas": {"worker": {"count": 1, "template": {"command": ["echo", name], "resources": {"cpu": "100m"}}}},
        },
    }


def timed(command: list[str], env: dict[str, str], cwd: Path) -> float:
    """Milliseconds the command took; fails the benchmark when it fails."""
    started = time.perf_counter()
    result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = (time.perf_counter() - started) * 1000
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command[3:])} exited {result.returncode}: {result.stderr.strip()}")
    return elapsed


def import_ms(modules: list[str], env: dict[str, str]) -> float:
    """Milliseconds ``python -X importtime`` counts for importing ``modules`` (the sum of every module's own)."""
    code = "; ".join(f"import {name}" for name in modules)
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True, text=True, check=True
    )
    total_us = 0
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            own = line.split(":", 1)[1].split("|")[0].strip()
            if own.isdigit():
                total_us += int(own)
    return total_us / 1000


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="phalanx-cli-") as temp:
        root = Path(temp)
        state = root / "state"
        env = {**os.environ, "PHALANX_HOME": str(state), "COLUMNS": "160"}
        direct_env = {**env, "PHALANX_CLI_PRELOAD": "0"}
        subprocess.run([*PHALANX, "up"], env=env, check=True, capture_output=True)
        try:
            with Client(state_dir=state) as client:
                for index in range(args.jobs):
                    client.submit(job(f"j{index}"))
                for index in range(args.jobs):
                    client.wait_for(TrainingJob, f"j{index}", {Phase.SUCCEEDED, Phase.FAILED}, timeout=120)
            for index in range(2 * args.runs):
                (root / f"s{index}.yaml").write_text(yaml.safe_dump(job(f"s{index}")))
            socket_path = state / "cli.sock"
            deadline = time.monotonic() + 60
            while not socket_path.exists() and time.monotonic() < deadline:
                time.sleep(0.05)  # the preloaded process imports for a second or so after the control plane leads
            results = measure(args.runs, env, direct_env, root)
            launcher = statistics.median(
                import_ms(["phalanx.entrypoints.cli.launcher", "phalanx.entrypoints.cli.preload_client"], env)
                for _ in range(args.runs)
            )
            direct = statistics.median(
                import_ms(["phalanx.entrypoints.cli.main", "phalanx.entrypoints.job_verbs"], env)
                for _ in range(args.runs)
            )
        finally:
            subprocess.run([*PHALANX, "down"], env=env, check=False, capture_output=True)
    return report(results, launcher, direct)


def measure(
    runs: int, env: dict[str, str], direct_env: dict[str, str], root: Path
) -> dict[str, tuple[list[float], list[float]]]:
    """Each verb ``runs`` times each way, alternating: (handed over, in its own process) wall times in ms."""
    results: dict[str, tuple[list[float], list[float]]] = {label: ([], []) for label, _ in VERBS}
    submitted = 0
    for _ in range(runs):
        for label, argv in VERBS:
            for way, environment in ((0, env), (1, direct_env)):
                command = [*PHALANX, *(str(root / f"s{submitted}.yaml") if a == "{file}" else a for a in argv)]
                if "{file}" in argv:
                    submitted += 1
                results[label][way].append(timed(command, environment, root))
    return results


def report(results: dict[str, tuple[list[float], list[float]]], launcher: float, direct: float) -> int:
    print(f"{'verb':<18} {'preloaded p50':>14} {'p95':>8} {'own process p50':>16} {'p95':>8} {'ratio':>7}")
    p50s: dict[str, float] = {}
    for label, (handed, own) in results.items():
        p50s[label] = statistics.median(handed)
        own_p50 = statistics.median(own)
        print(
            f"{label:<18} {p50s[label]:>12.1f}ms {percentile(handed, 0.95):>6.1f}ms "
            f"{own_p50:>14.1f}ms {percentile(own, 0.95):>6.1f}ms {own_p50 / p50s[label]:>6.1f}x"
        )
    print(f"{'imports':<18} {launcher:>12.1f}ms {'':>8} {direct:>14.1f}ms")
    worst = max(p50s.values())
    fields = " ".join(f"{label.replace(' ', '_').replace('-', '')}_p50_ms={value:.1f}" for label, value in p50s.items())
    print(f"RESULT max_p50_ms={worst:.1f} launcher_import_ms={launcher:.1f} direct_import_ms={direct:.1f} {fields}")
    met = worst <= BAR_MS
    print(f"every read verb and submit at most {BAR_MS:.0f} ms p50: {'yes' if met else 'no'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
