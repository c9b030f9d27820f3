"""Check Phalanx on this machine's real GPUs: NVML discovery, GPU and CPU pinning, NCCL across replicas.

Run on a machine with NVIDIA GPUs and Phalanx installed (``pip install -e '.[gpu]'``):

    python hack/gpu_check.py --out gpu-check

It first makes sure the interpreter has the torch that hack/frameworks.lock pins (the frameworks tier's version):
kept when present, installed with pip otherwise (which needs the package registry; a machine without it must
already have that version). The report says which.

It starts the embedded control plane on a fresh state directory (the real host: NVML, no simulated inventory),
runs two ``pytorch`` jobs whose replicas each ask for one GPU and all-reduce a tensor over NCCL, a 1-GPU job and
one replica per GPU, and writes ``gpu-check/report.json`` and ``report.md``: what NVML reported, each replica's
``CUDA_VISIBLE_DEVICES``, the NUMA node of the CPUs it was pinned to against its GPU's, and the collective's
result checked on every rank. docs/gpus.md records what it gave on the machines we had. Exit 0 when every job
succeeded and every rank saw the right sum; 1 otherwise; 2 when the machine has no GPU NVML can see; 3 when the
pinned torch is neither present nor installable.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# What a user writes: init from the env the pytorch JobType renders, then one collective checked on every rank.
# Each replica sees only the GPUs it was given (CUDA_VISIBLE_DEVICES), so its first visible device is its own.
PROGRAM = """\
import json, os, socket, time
import torch
import torch.distributed as dist

started = time.monotonic()
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(0)
x = torch.full((1 << 20,), float(rank + 1), device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
expected = world * (world + 1) / 2
print("RESULT " + json.dumps({
    "rank": rank,
    "world": world,
    "local_rank": int(os.environ["LOCAL_RANK"]),
    "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "device": torch.cuda.get_device_name(0),
    "affinity": sorted(os.sched_getaffinity(0)),
    "sum": float(x[0]),
    "expected": expected,
    "ok": bool(torch.all(x == expected)),
    "seconds": round(time.monotonic() - started, 3),
    "torch": torch.__version__,
    "nccl": ".".join(map(str, torch.cuda.nccl.version())),
}), flush=True)
dist.destroy_process_group()
"""


LOCK = Path(__file__).resolve().parent / "frameworks.lock"


class CheckError(RuntimeError):
    """The check cannot run here; the message says why."""


def pinned_torch(lock: Path = LOCK) -> str:
    """The torch version hack/frameworks.lock pins."""
    for line in lock.read_text().splitlines():
        if line.startswith("torch=="):
            return line.split("==", 1)[1].strip()
    raise CheckError(f"{lock.name} pins no torch")


def installed_torch() -> str | None:
    """The torch version this interpreter imports (with its local tag, e.g. ``+cu130``), or None."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True, timeout=300
    )
    return probe.stdout.strip() if probe.returncode == 0 else None


def ensure_pinned_torch() -> dict[str, Any]:
    """Keep the pinned torch when present, install it otherwise; what was found and done.

    Raises:
        CheckError: pip could not install the pinned version (no registry, no wheel for this machine).

    """
    pinned, found = pinned_torch(), installed_torch()
    if found is not None and found.split("+", 1)[0] == pinned:
        return {"pinned": pinned, "torch": found, "installed_by_check": False}
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", f"torch=={pinned}"], capture_output=True, text=True
    )
    found_after = installed_torch()
    if install.returncode != 0 or found_after is None or found_after.split("+", 1)[0] != pinned:
        raise CheckError(
            f"this interpreter has torch {found or 'not at all'} and pip could not install the pinned "
            f"torch=={pinned} (hack/frameworks.lock): {(install.stderr or install.stdout).strip()[-600:]}"
        )
    return {"pinned": pinned, "torch": found_after, "installed_by_check": True}


def phalanx(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One ``phalanx`` command on the check's state directory."""
    return subprocess.run(
        [sys.executable, "-m", "phalanx.entrypoints.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )


def job_spec(name: str, replicas: int, program: Path) -> dict[str, Any]:
    """A pytorch job of ``replicas`` one-GPU replicas running ``program`` (rank 0 the master)."""
    role = {"template": {"command": [sys.executable, str(program)], "resources": {"cpu": 1, "memory": "4Gi", "gpu": 1}}}
    spec: dict[str, Any] = {"type": "pytorch", "replicas": {"master": {"count": 1, **role}}}
    if replicas > 1:
        spec["replicas"]["worker"] = {"count": replicas - 1, **role}
    spec["runPolicy"] = {"activeDeadlineSeconds": 240, "backoffLimit": 0}
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name}, "spec": spec}


def run_job(name: str, replicas: int, program: Path, work: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run the job to its end with ``phalanx run``; what it did, with every rank's RESULT line."""
    spec = work / f"{name}.json"
    spec.write_text(json.dumps(job_spec(name, replicas, program)))
    started = time.monotonic()
    ran = phalanx("run", str(spec), "--no-logs", env=env)
    seconds = time.monotonic() - started
    job = json.loads(phalanx("get", "job", name, "-o", "json", env=env).stdout)
    logs = phalanx("logs", name, env=env).stdout
    ranks = [json.loads(line.split("RESULT ", 1)[1]) for line in logs.splitlines() if "RESULT " in line]
    return {
        "name": name,
        "replicas": replicas,
        "exit_code": ran.returncode,
        "phase": job["status"]["phase"],
        "seconds": round(seconds, 2),
        "placements": job["status"].get("placements", {}),
        "ranks": sorted(ranks, key=lambda r: r["rank"]),
        "run_output": (ran.stdout + ran.stderr)[-4000:],
    }


def placed_gpus(run_output: str) -> list[list[int]]:
    """The GPUs each replica was given, in rank order (master, then workers), from ``phalanx run``'s Admitted line.

    A finished job has given its placements back, so the Admitted line is where the scheduler's choice stays.
    """
    placed = re.findall(r"\S+-(master|worker)-(\d+) CPUs [\d,]+ GPUs ([\d,]+)", run_output)
    ordered = sorted(placed, key=lambda p: (p[0] != "master", int(p[1])))
    return [[int(g) for g in gpus.split(",")] for _, _, gpus in ordered]


def numa_of(cpus: list[int], node: dict[str, Any]) -> list[int]:
    """The NUMA nodes of ``cpus`` as the Node object lists them."""
    by_cpu = {c["id"]: c.get("numa") for c in node["status"].get("cpus", [])}
    return sorted({by_cpu[c] for c in cpus if by_cpu.get(c) is not None})


def markdown(report: dict[str, Any]) -> str:
    """The report as the tables docs/gpus.md shows."""
    node = report["node"]
    gpus = node["status"].get("gpus", [])
    lines = [f"# GPU check on {report['host']} ({report['when']})", ""]
    torch = report.get("torch", {})
    if torch:
        how = "installed by the check" if torch["installed_by_check"] else "already installed"
        lines += [f"torch {torch['torch']} ({how}; hack/frameworks.lock pins {torch['pinned']})", ""]
    lines += ["## NVML", ""]
    lines.append("| index | model | memory | NUMA | NVLink peers | healthy |")
    lines.append("|---|---|---|---|---|---|")
    for g in gpus:
        lines.append(
            f"| {g.get('index')} | {g.get('model')} | {g.get('memory')} | {g.get('numa')} | "
            f"{g.get('nvlinks', {})} | {g.get('healthy')} |"
        )
    for job in report["jobs"]:
        lines += ["", f"## {job['name']}: {job['replicas']} replica(s), {job['phase']} in {job['seconds']} s", ""]
        header = "| rank | CUDA_VISIBLE_DEVICES | placed GPUs | CPUs | CPUs' NUMA | GPU's NUMA | sum/expected | ok |"
        lines.append(header)
        lines.append("|---|---|---|---|---|---|---|---|")
        for r in job["ranks"]:
            lines.append(
                f"| {r['rank']} | {r['cuda_visible_devices']} | {r.get('placed_gpus')} | {r['affinity']} | "
                f"{r.get('cpu_numa')} | {r.get('gpu_numa')} | {r['sum']}/{r['expected']} | {r['ok']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    """Run the check; the exit code the module docstring gives."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-check"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="phalanx-gpu-check-"))
    env = {**os.environ, "PHALANX_HOME": str(work / "state")}
    program = work / "allreduce.py"
    program.write_text(PROGRAM)
    up = phalanx("up", env=env)
    if up.returncode != 0:
        print(up.stdout + up.stderr, file=sys.stderr)
        return 1
    try:
        node = json.loads(phalanx("get", "nodes", "-o", "json", env=env).stdout)
        node = node[0] if isinstance(node, list) else node
        gpus = node["status"].get("gpus", [])
        if not gpus:
            print("no GPU: NVML found none on this machine (see `phalanx describe node`)", file=sys.stderr)
            return 2
        try:
            torch = ensure_pinned_torch()  # after the GPU check: a machine without GPUs never downloads torch
        except CheckError as error:
            print(f"error: {error}", file=sys.stderr)
            return 3
        jobs = [run_job("one-gpu", 1, program, work, env)]
        if len(gpus) > 1:
            jobs.append(run_job("all-gpus", len(gpus), program, work, env))
        gpu_numa = {g.get("index"): g.get("numa") for g in gpus}
        for job in jobs:
            order = placed_gpus(job["run_output"])
            for r in job["ranks"]:
                chosen = order[r["rank"]] if r["rank"] < len(order) else []
                r["placed_gpus"] = chosen
                r["cpu_numa"] = numa_of(r["affinity"], node)
                r["gpu_numa"] = sorted({gpu_numa[g] for g in chosen if g in gpu_numa})
        report = {
            "host": os.uname().nodename,
            "torch": torch,
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "node": node,
            "describe_node": phalanx("describe", "node", node["metadata"]["name"], env=env).stdout,
            "jobs": jobs,
        }
    finally:
        phalanx("down", env=env)
    (args.out / "report.json").write_text(json.dumps(report, indent=2))
    (args.out / "report.md").write_text(markdown(report))
    print(markdown(report))
    good = all(j["phase"] == "Succeeded" and j["ranks"] and all(r["ok"] for r in j["ranks"]) for j in jobs)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
