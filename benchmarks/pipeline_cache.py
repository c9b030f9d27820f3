"""Step caching on the embedded runtime: a 6-step pipeline with fan-out, run twice with nothing changed.

The pipeline (KFP v1 container components, inline; each step a real process the embedded runtime starts):

    generate -> split -> process[0..3] (parallelFor over split's output) -> aggregate -> train -> report

Each step sleeps ``--step-seconds`` to stand for work, writes its outputs through ``outputPath`` and appends its
name to a ledger file, which counts the step processes that really started. The first PipelineRun runs every
step; the second, with the same arguments, should complete from the step cache: no process starts (the ledger
does not grow) and every step instance reports a cache hit.

Run: python benchmarks/pipeline_cache.py [--step-seconds 1.0]
Ends with: RESULT first_run_s=… cached_rerun_s=… cached_steps=…
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from phalanx.entrypoints.client import Client
from phalanx.model.pipelines import PipelineRun, RunPhase
from phalanx.services.embedded.daemon import start_control_plane, stop_control_plane

FINISHED = {RunPhase.SUCCEEDED, RunPhase.FAILED}

# One program plays every step: it records that it ran, waits, and writes its outputs.
STEP = """
import json, pathlib, sys, time
ledger, name, seconds, *outputs = sys.argv[1:]
outputs = outputs[: outputs.index("--")] if "--" in outputs else outputs  # the inputs' values follow "--"
with open(ledger, "a") as f:
    f.write(name + "\\n")
time.sleep(float(seconds))
for pair in outputs:
    path, value = pair.split("=", 1)
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(path).write_text(value)
"""


def component(
    name: str, inputs: list[str], outputs: list[tuple[str, str]], program: Path, ledger: Path, seconds: float
) -> dict[str, object]:
    """A KFP v1 component that runs the step program; each output gets a fixed value (a JSON list for shards)."""
    args: list[object] = [str(ledger), name, str(seconds)]
    for output, value in outputs:
        args.append({"concat": [{"outputPath": output}, f"={value}"]})
    for item in inputs:
        args.extend(["--", {"inputValue": item}])
    return {
        "name": name,
        "inputs": [{"name": item, "type": "String"} for item in inputs],
        "outputs": [{"name": output, "type": "String"} for output, _ in outputs],
        "implementation": {
            "container": {"image": "python:3.11", "command": [sys.executable, str(program)], "args": args}
        },
    }


def pipeline(program: Path, ledger: Path, seconds: float) -> dict[str, object]:
    def step(name: str, inputs: dict[str, str], outputs: list[tuple[str, str]], **extra: object) -> dict[str, object]:
        return {
            "name": name,
            "component": {"inline": component(name, list(inputs), outputs, program, ledger, seconds)},
            "arguments": inputs,
            **extra,
        }

    steps = [
        step("generate", {"rows": "{{params.rows}}"}, [("data", "rows")]),
        step("split", {"data": "{{steps.generate.outputs.data}}"}, [("shards", "[0, 1, 2, 3]")]),
        step(
            "process",
            {"shard": "{{item}}"},
            [("part", "done")],
            parallelFor={"items": "{{steps.split.outputs.shards}}", "as": "shard"},
        ),
        step("aggregate", {"parts": "{{steps.process.outputs.part}}"}, [("table", "merged")]),
        step("train", {"table": "{{steps.aggregate.outputs.table}}"}, [("model", "weights")]),
        step("report", {"model": "{{steps.train.outputs.model}}"}, [("summary", "ok")]),
    ]
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": "six-steps"},
        "spec": {"parameters": [{"name": "rows", "type": "Integer", "default": "1000"}], "steps": steps},
    }


def run(client: Client, name: str, timeout: float) -> tuple[float, PipelineRun]:
    began = time.monotonic()
    client.submit(
        {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "PipelineRun",
            "metadata": {"name": name},
            "spec": {"pipelineRef": {"name": "six-steps"}, "arguments": {"rows": "1000"}},
        }
    )
    try:
        found = client.wait_for(PipelineRun, name, FINISHED, timeout=began + timeout - time.monotonic())
    except TimeoutError as error:
        raise SystemExit(str(error)) from None
    elapsed = time.monotonic() - began
    if found.status.phase != RunPhase.SUCCEEDED:
        raise SystemExit(f"run {name} ended {found.status.phase}: {found.status.message}")
    return elapsed, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step-seconds", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="phalanx-pipeline-bench-") as tmp:
        work = Path(tmp)
        program, ledger = work / "step.py", work / "ledger.txt"
        program.write_text(STEP)
        ledger.touch()
        client = Client(state_dir=work / "state")
        start_control_plane(client.layout)
        try:
            client.submit(pipeline(program, ledger, args.step_seconds))
            first_s, first = run(client, "first", args.timeout)
            started_first = len(ledger.read_text().split())
            rerun_s, rerun = run(client, "rerun", args.timeout)
            started_rerun = len(ledger.read_text().split()) - started_first
        finally:
            stop_control_plane(client.layout)
            client.close()
    instances = rerun.status.instances
    cached = sum(1 for instance in instances if instance.cache_hit)
    print(f"{'run':>8}  {'seconds':>8}  {'instances':>9}  {'cache hits':>10}  {'processes started':>17}")
    print(
        f"{'first':>8}  {first_s:>8.2f}  {len(first.status.instances):>9}  "
        f"{sum(i.cache_hit for i in first.status.instances):>10}  {started_first:>17}"
    )
    print(f"{'rerun':>8}  {rerun_s:>8.2f}  {len(instances):>9}  {cached:>10}  {started_rerun:>17}")
    print()
    print(f"the rerun starts no step process:       {'yes' if started_rerun == 0 else 'NO'}")
    print(
        f"the rerun takes under 10 % of the first: {'yes' if rerun_s < 0.1 * first_s else 'NO'} "
        f"({100 * rerun_s / first_s:.1f} %)"
    )
    print(f"RESULT first_run_s={first_s:.2f} cached_rerun_s={rerun_s:.2f} cached_steps={cached}")


if __name__ == "__main__":
    main()
