"""Step caching on the embedded runtime: a 6-step pipeline with a fan-out, run twice with nothing changed.

The pipeline (KFP v1 components inline, each step a real process that works ``--step-seconds`` and appends a line
to a starts file): prep -> split (a JsonArray of shards) -> train (fans out over the shards, each writing a model
folder) -> merge (fans the models in) -> evaluate (a Float) -> report (runs when the score is high enough). The
first run starts every process; the second, a new PipelineRun with the same arguments, must complete from the
step cache without starting any (checked on the starts file) and in a fraction of the first run's time.

Run: python benchmarks/pipeline_cache.py [--shards 4] [--step-seconds 1.0]
Ends with: RESULT first_run_s=… cached_rerun_s=… cached_steps=… rerun_processes=… rerun_pct=…
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from phalanx.entrypoints.client import Client
from phalanx.model.pipelines import PipelineRun
from phalanx.services.embedded.daemon import start_control_plane, stop_control_plane

PROGRAM = """
import json, pathlib, sys, time
starts, mode, seconds, *args = sys.argv[1:]
with open(starts, "a") as log:
    log.write(mode + "\\n")
time.sleep(float(seconds))
out = pathlib.Path(args[-1])
out.parent.mkdir(parents=True, exist_ok=True)
if mode == "split":
    out.write_text(json.dumps(list(range(int(args[0])))))
elif mode == "train":
    out.mkdir(parents=True, exist_ok=True)
    (out / "weights.bin").write_bytes(bytes(1024) + args[1].encode())
elif mode == "evaluate":
    out.write_text("0.9")
elif mode != "report":
    out.mkdir(parents=True, exist_ok=True)
    (out / "part.txt").write_text(mode + " " + " ".join(args[:-1]))
"""


def component(mode: str, inputs: list[tuple[str, str, str]], outputs: list[tuple[str, str]]) -> dict[str, Any]:
    """A component running PROGRAM in ``mode``: inputs as (name, type, inputValue|inputPath), outputs last."""
    args: list[Any] = [{"inputValue": "starts"}, mode, {"inputValue": "seconds"}]
    args += [{use: name} for name, _, use in inputs]
    args += [{"outputPath": name} for name, _ in outputs]
    if not outputs:
        args.append("-")
    return {
        "name": mode,
        "inputs": [{"name": "starts"}, {"name": "seconds"}, *({"name": n, "type": t} for n, t, _ in inputs)],
        "outputs": [{"name": name, "type": kind} for name, kind in outputs],
        "implementation": {"container": {"image": "python:3.12", "command": [sys.executable, "{program}", *args]}},
    }


def pipeline(program: Path) -> dict[str, Any]:
    common = {"starts": "{{params.starts}}", "seconds": "{{params.seconds}}"}
    steps = [
        ("prep", component("prep", [], [("raw", "Dataset")]), {}),
        (
            "split",
            component("split", [("shards", "Integer", "inputValue")], [("list", "JsonArray")]),
            {"shards": "{{params.shards}}"},
        ),
        (
            "train",
            component(
                "train", [("raw", "Dataset", "inputPath"), ("shard", "Integer", "inputValue")], [("model", "Model")]
            ),
            {"raw": "{{steps.prep.outputs.raw}}", "shard": "{{item}}"},
        ),
        (
            "merge",
            component("merge", [("models", "JsonArray", "inputPath")], [("model", "Model")]),
            {"models": "{{steps.train.outputs.model}}"},
        ),
        (
            "evaluate",
            component("evaluate", [("model", "Model", "inputPath")], [("score", "Float")]),
            {"model": "{{steps.merge.outputs.model}}"},
        ),
        (
            "report",
            component("report", [("score", "Float", "inputValue")], []),
            {"score": "{{steps.evaluate.outputs.score}}"},
        ),
    ]
    documents = []
    for name, spec, arguments in steps:
        spec["implementation"]["container"]["command"][1] = str(program)
        step: dict[str, Any] = {"name": name, "component": {"inline": spec}, "arguments": {**common, **arguments}}
        if name == "train":
            step["parallelFor"] = {"items": "{{steps.split.outputs.list}}"}
        if name == "report":
            step["when"] = "{{steps.evaluate.outputs.score}} > 0.5"
        documents.append(step)
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": "bench"},
        "spec": {
            "parameters": [{"name": "starts"}, {"name": "seconds"}, {"name": "shards", "type": "Integer"}],
            "steps": documents,
        },
    }


def run(client: Client, name: str, arguments: dict[str, str], timeout: float = 600.0) -> tuple[float, PipelineRun]:
    document = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "PipelineRun",
        "metadata": {"name": name},
        "spec": {"pipelineRef": {"name": "bench"}, "arguments": arguments},
    }
    began = time.monotonic()
    client.submit(document)
    deadline = began + timeout
    while time.monotonic() < deadline:
        seq = client.store.latest_seq()
        found = client.ops.get_pipelinerun("default", name)
        if found.status.phase in ("Succeeded", "Failed"):
            elapsed = time.monotonic() - began
            if found.status.phase != "Succeeded":
                raise SystemExit(f"pipelinerun {name} failed: {found.status.message}")
            return elapsed, found
        client.store.wait_for_change(seq, 0.5)
    raise SystemExit(f"pipelinerun {name} did not finish in {timeout:.0f}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--step-seconds", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="phalanx-bench-") as tmp:
        state, work = Path(tmp) / "state", Path(tmp) / "work"
        work.mkdir()
        program, starts = work / "step.py", work / "starts.log"
        program.write_text(PROGRAM)
        client = Client(state_dir=state)
        start_control_plane(client.layout)
        try:
            client.submit(pipeline(program))
            arguments = {"starts": str(starts), "seconds": str(args.step_seconds), "shards": str(args.shards)}
            first_s, first = run(client, "first", arguments)
            processes = len(starts.read_text().splitlines())
            rerun_s, rerun = run(client, "rerun", arguments)
            rerun_processes = len(starts.read_text().splitlines()) - processes
        finally:
            stop_control_plane(client.layout)
            client.close()
    cached = sum(1 for entry in rerun.status.instances if entry.cache_hit)
    print(f"first run:  {first_s:6.2f} s, {processes} step processes, {len(first.status.instances)} instances")
    print(f"cached run: {rerun_s:6.2f} s, {rerun_processes} step processes, {cached} instances from the cache")
    print(
        f"RESULT first_run_s={first_s:.2f} cached_rerun_s={rerun_s:.2f} cached_steps={cached} "
        f"rerun_processes={rerun_processes} rerun_pct={100 * rerun_s / first_s:.1f}"
    )
    return 0 if rerun_processes == 0 and rerun_s < 0.1 * first_s else 1


if __name__ == "__main__":
    sys.exit(main())
