"""Sweeps, Pipelines and PipelineRuns through the real CLI on a real SQLite store: `submit` (component files read
relative to the pipeline file and stored inline), `get` with its tables and short names, `-o yaml`, `describe
pipeline`, `delete`, and the acceptance's malformed inputs, each refused by path with nothing stored.

No control plane runs: submitting and reading work on the store alone (the controllers are other tests')."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import yaml

from conftest import Runtime, parse_table

PREP = {
    "name": "prep",
    "inputs": [{"name": "rows", "type": "Integer", "default": "10"}],
    "outputs": [{"name": "data", "type": "Dataset"}],
    "implementation": {
        "container": {"image": "python:3.11", "command": ["prep", {"inputValue": "rows"}, {"outputPath": "data"}]}
    },
}
TRAIN = {
    "name": "train",
    "inputs": [{"name": "data", "type": "Dataset"}, {"name": "lr", "type": "Float"}],
    "outputs": [{"name": "model", "type": "Model"}],
    "implementation": {
        "container": {
            "image": "python:3.11",
            "command": ["train", {"inputPath": "data"}, {"inputValue": "lr"}, {"outputPath": "model"}],
        }
    },
}
BAD_PLACEHOLDER = {**TRAIN, "implementation": {"container": {"image": "x", "command": [{"inputValue": "nope"}]}}}
JOB = {"type": "generic", "replicas": {"worker": {"count": 1, "template": {"command": ["true"]}}}}


def sweep(name: str, **changes: Any) -> dict[str, Any]:
    template = {"command": ["python", "train.py", "--lr", "${params.lr}"]}
    spec = {
        "parameters": [{"name": "lr", "type": "double", "min": 0.001, "max": 0.1, "log": True}],
        "algorithm": {"name": "tpe", "seed": 1},
        "objective": {"metric": "loss", "direction": "minimize"},
        "maxTrials": 6,
        "parallelTrials": 2,
        "trial": {"spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}}},
        **changes,
    }
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Sweep", "metadata": {"name": name}, "spec": spec}


def pipeline(name: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    spec = {"parameters": [{"name": "lr", "type": "Float", "default": "0.01"}], "steps": steps}
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Pipeline", "metadata": {"name": name}, "spec": spec}


GOOD_STEPS = [
    {"name": "prep", "component": {"path": "components/prep.yaml"}},
    {
        "name": "train",
        "component": {"path": "components/train.yaml"},
        "arguments": {"data": "{{steps.prep.outputs.data}}", "lr": "{{params.lr}}"},
    },
    {"name": "report", "trainingJob": {"spec": JOB}, "after": ["train"]},
]


def write(path: Path, *documents: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def test_submit_get_describe_and_delete_sweeps_pipelines_and_runs(runtime: Runtime) -> None:
    folder = runtime.work_dir / "flows"  # the file is not in the working directory: paths start at the file
    write(folder / "components" / "prep.yaml", PREP)
    write(folder / "components" / "train.yaml", TRAIN)
    run = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "PipelineRun",
        "metadata": {"name": "nightly"},
        "spec": {"pipelineRef": {"name": "train-eval"}, "arguments": {"lr": "0.05"}},
    }
    write(folder / "all.yaml", run, pipeline("train-eval", GOOD_STEPS), sweep("lr-search"))

    dry = yaml.safe_load(runtime.cli("submit", "--dry-run", "-f", "flows/all.yaml", check=True).stdout)["items"]
    assert [d["kind"] for d in dry] == ["PipelineRun", "Pipeline", "Sweep"]
    assert dry[1]["spec"]["steps"][1]["component"] == {"inline": TRAIN}  # what would be stored, files read
    assert runtime.cli("get", "pipelines", check=True).stdout.startswith("No ")  # and nothing was

    submitted = runtime.cli("submit", "-f", "flows/all.yaml", check=True).stdout
    for line in ("pipeline/train-eval created", "pipelinerun/nightly created", "sweep/lr-search created"):
        assert line in submitted

    (row,) = parse_table(runtime.cli("get", "sweeps", check=True).stdout)
    assert (row["NAME"], row["PHASE"], row["TRIALS"], row["RUNNING"], row["BEST"]) == (
        "lr-search",
        "Pending",
        "0/6",
        "0",
        "-",
    )
    (row,) = parse_table(runtime.cli("get", "pl", check=True).stdout)
    assert (row["NAME"], row["STEPS"]) == ("train-eval", "3")
    (row,) = parse_table(runtime.cli("get", "plr", check=True).stdout)
    assert (row["NAME"], row["PIPELINE"], row["PHASE"], row["STEPS"]) == ("nightly", "train-eval", "Pending", "0/3")

    stored = yaml.safe_load(runtime.cli("get", "pipeline", "train-eval", "-o", "yaml", check=True).stdout)
    assert stored["spec"]["steps"][0]["component"] == {"inline": PREP}  # self-contained: the file is not needed
    assert json.loads(stored["metadata"]["annotations"]["phalanx.dev/component-paths"]) == {
        "prep": "components/prep.yaml",
        "train": "components/train.yaml",
    }

    described = runtime.cli("describe", "pipeline", "train-eval", check=True).stdout
    steps = parse_table(described.split("Steps", 1)[1])
    assert [(s["NAME"], s["KIND"], s["AFTER"]) for s in steps] == [
        ("prep", "component", "-"),
        ("train", "component", "prep"),
        ("report", "trainingJob", "train"),
    ]
    assert "components/train.yaml" in described and "0.01" in described.split("Steps", 1)[0]

    refused = runtime.cli("delete", "pipeline", "train-eval")
    assert refused.returncode == 1 and "named by pipelineruns: nightly (Pending)" in refused.stderr
    assert runtime.cli("delete", "plr", "nightly", check=True).stdout.strip() == "pipelinerun/nightly deleted"
    assert "pipeline/train-eval deleted" in runtime.cli("delete", "pipeline", "train-eval", check=True).stdout
    assert "sweep/lr-search deleted" in runtime.cli("delete", "sw", "lr-search", check=True).stdout
    for noun in ("sweeps", "pipelines", "pipelineruns"):
        assert runtime.cli("get", noun, check=True).stdout.startswith("No ")


def test_malformed_sweeps_and_pipelines_are_refused_by_path_and_nothing_is_stored(runtime: Runtime) -> None:
    write(runtime.work_dir / "components" / "prep.yaml", PREP)
    write(runtime.work_dir / "components" / "train.yaml", TRAIN)
    write(runtime.work_dir / "components" / "bad.yaml", BAD_PLACEHOLDER)
    cycle = [
        {"name": "a", "trainingJob": {"spec": JOB}, "after": ["b"]},
        {"name": "b", "trainingJob": {"spec": JOB}, "after": ["a"]},
    ]
    unknown = [dict(GOOD_STEPS[1], arguments={"data": "{{steps.prepare.outputs.data}}", "lr": "0.1"})]
    mismatch = [
        *GOOD_STEPS[:2],
        dict(GOOD_STEPS[1], name="again", arguments={"data": "{{steps.train.outputs.model}}", "lr": "1"}),
    ]
    placeholder = [{"name": "bad", "component": {"path": "components/bad.yaml"}}]
    missing = [{"name": "gone", "component": {"path": "components/gone.yaml"}}]
    unsampleable = sweep("grid-search", algorithm={"name": "grid"})
    file = write(
        runtime.work_dir / "bad.yaml",
        pipeline("cycle", cycle),
        pipeline("unknown", unknown),
        pipeline("mismatch", mismatch),
        pipeline("placeholder", placeholder),
        pipeline("missing", missing),
        unsampleable,
        sweep("fine"),
    )
    result = runtime.cli("submit", "-f", str(file))
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [" ".join(line.split()) for line in result.stderr.splitlines()]

    def said(path: str, *words: str) -> bool:
        return any(line.startswith(f"{path}:") and all(word in line for word in words) for line in lines)

    assert said("spec.steps[0]", "document 1", "cycle a -> b -> a"), lines
    assert said("spec.steps[0].arguments.data", "document 2", "no step is called 'prepare'"), lines
    assert said("spec.steps[2].arguments.data", "document 3", "type Model", "wants Dataset"), lines
    assert said("spec.steps[0].component.path", "document 4", "components/bad.yaml", "'nope'"), lines
    assert said("spec.steps[0].component.path", "document 5", "components/gone.yaml", "no such file"), lines
    assert said("spec.algorithm.name", "document 6", "grid", "lr"), lines
    for noun in ("sweeps", "pipelines"):
        assert runtime.cli("get", noun, check=True).stdout.startswith("No "), noun


def test_the_store_knows_the_new_kinds_feeds_their_changes_and_quarantines_a_bad_row(runtime: Runtime) -> None:
    with runtime.client() as client:
        before = client.store.latest_seq()
        client.submit(sweep("kept"))
        assert [(c.kind, c.name) for c in client.store.changes_since(before)] == [("Sweep", "kept")]
        assert client.ops.quarantined() == []  # an audit no longer takes Sweep rows for an unknown kind
    with sqlite3.connect(runtime.state_dir / "phalanx.db") as raw:  # a row written behind the store's back
        raw.execute(
            "INSERT INTO objects (kind, namespace, name, uid, resource_version, generation, body) "
            "VALUES ('Sweep', 'default', 'broken', 'uid-broken', 1, 1, ?)",
            ('{"kind": "Sweep", "spec": 5}',),
        )
    got = runtime.cli("get", "sweep", "broken")
    said = " ".join((got.stdout + got.stderr).split())
    assert got.returncode == 1 and said.startswith("error: sweep default/broken is stored but cannot be read"), said
    assert "phalanx delete --quarantined" in said
    deleted = runtime.cli("delete", "--quarantined", check=True)
    assert "sweep/broken deleted" in deleted.stdout
    (row,) = parse_table(runtime.cli("get", "sweeps", check=True).stdout)
    assert row["NAME"] == "kept"


def test_the_sweep_examples_are_accepted_as_documented(runtime: Runtime) -> None:
    examples = Path(__file__).parents[3] / "examples" / "sweeps"
    for name in ("sweep.yaml", "katib-experiment.yaml"):
        result = runtime.cli("submit", "-f", str(examples / name))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "created" in result.stdout and "Traceback" not in result.stderr
    names = sorted(row["NAME"] for row in parse_table(runtime.cli("get", "sweeps", check=True).stdout))
    assert len(names) == 2, names
