"""Full Sweep, Pipeline and PipelineRun documents (every section used), and statuses as the controllers write them.

Shared by the CRD unit tests and the e2e tier, so that what the generated schemas are checked against is exactly
what is sent to a real API server. Values are chosen to catch a schema that is too narrow: fractional and integral
numbers side by side, free text next to numbers, nested lists and maps in the raw parts, ``${params.x}`` where the
TrainingJob schema wants a number.
"""

from __future__ import annotations

import copy
from typing import Any

API_VERSION = "phalanx.dev/v1alpha1"


def trial_job_spec() -> dict[str, Any]:
    """A TrainingJob spec whose replica count is a reference: valid only once substituted."""
    return {
        "type": "generic",
        "replicas": {
            "worker": {
                "count": "${params.workers}",
                "template": {
                    "image": "example.org/trainer:1",
                    "command": ["python", "train.py", "--lr", "${params.lr}", "--opt", "${params.optimizer}"],
                    "env": {"TRIAL": "${trial.name}", "MOMENTUM": "${params.momentum}"},
                    "resources": {"cpu": "500m", "memory": "1Gi"},
                },
            }
        },
    }


def sweep_document(name: str = "lr-search", namespace: str = "default") -> dict[str, Any]:
    """A Sweep with every parameter type, a condition, sampler settings, a goal and early stopping."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Sweep",
        "metadata": {"name": name, "namespace": namespace, "labels": {"team": "vision"}},
        "spec": {
            "parameters": [
                {"name": "lr", "type": "double", "min": 1.0e-5, "max": 0.1, "log": True},
                {"name": "dropout", "type": "double", "min": 0, "max": 0.5, "step": 0.05},
                {"name": "workers", "type": "int", "min": 1, "max": 4},
                {"name": "batch", "type": "discrete", "values": [16, 32.5, 64]},
                {"name": "optimizer", "type": "categorical", "values": ["adam", "sgd"]},
                {"name": "momentum", "type": "double", "min": 0.5, "max": 0.99, "when": {"optimizer": ["sgd"]}},
            ],
            "algorithm": {"name": "tpe", "seed": 7, "settings": {"n_startup_trials": 5, "multivariate": True}},
            "objective": {"metric": "val_loss", "direction": "minimize", "goal": 0.05},
            "parallelTrials": 2,
            "maxTrials": 12,
            "maxFailedTrials": 3,
            "earlyStopping": {"rule": "median", "minTrials": 3, "startStep": 2},
            "trial": {
                "spec": trial_job_spec(),
                "metadata": {"labels": {"sweep": "${sweep.name}"}, "annotations": {"lr": "${params.lr}"}},
            },
        },
    }


def sweep_status() -> dict[str, Any]:
    """A running sweep's status, as the sweep controller writes it."""
    return {
        "phase": "Running",
        "reason": "TrialsRunning",
        "message": "2 trials running, 3 finished",
        "trials": {"created": 5, "running": 2, "succeeded": 2, "failed": 0, "stopped": 1},
        "bestTrial": {
            "name": "lr-search-3",
            "number": 3,
            "parameters": {"lr": 0.0031, "workers": 2, "batch": 32.5, "optimizer": "adam"},
            "value": 0.125,
        },
    }


def component() -> dict[str, Any]:
    """A KFP v1 component.yaml, inline: inputs with and without defaults, an output path, concat and if."""
    return {
        "name": "Prepare shards",
        "inputs": [
            {"name": "rows", "type": "Integer", "default": "100"},
            {"name": "seed", "type": "Integer", "optional": True},
        ],
        "outputs": [{"name": "shard list", "type": "JsonArray"}],
        "implementation": {
            "container": {
                "image": "python:3.12",
                "command": [
                    "python",
                    "-c",
                    "import sys; print(sys.argv)",
                    {"concat": ["--rows=", {"inputValue": "rows"}]},
                    {"if": {"cond": {"isPresent": "seed"}, "then": ["--seed", {"inputValue": "seed"}]}},
                    {"outputPath": "shard list"},
                ],
            }
        },
    }


def pipeline_spec() -> dict[str, Any]:
    """Steps of every kind: an inline component, a TrainingJob, a Sweep; fan-out over a literal list and over an
    output, a fan-in, a condition, retries, caching off, an extra edge."""
    return {
        "parameters": [
            {"name": "lr", "type": "Float", "default": "0.01"},
            {"name": "shards", "type": "JsonArray", "default": "[1, 2, 3]", "description": "shard ids"},
        ],
        "steps": [
            {"name": "prepare", "component": {"inline": component()}, "arguments": {"rows": "500"}},
            {
                "name": "train",
                "trainingJob": {
                    "spec": {
                        "type": "generic",
                        "replicas": {
                            "worker": {
                                "count": 1,
                                "template": {"command": ["python", "train.py", "--lr", "${inputs.lr}"]},
                            }
                        },
                    },
                    "metadata": {"labels": {"stage": "train"}},
                },
                "arguments": {"lr": "{{params.lr}}"},
                "inputs": [{"name": "lr", "type": "Float"}],
                "outputs": [{"name": "model", "type": "Model"}],
                "after": ["prepare"],
                "retries": 2,
            },
            {
                "name": "tune",
                "sweep": {"spec": copy.deepcopy(sweep_document()["spec"])},
                "outputs": [{"name": "best", "type": "JsonObject"}],
                "cache": False,
            },
            {
                "name": "evaluate",
                "component": {"inline": component()},
                "parallelFor": {"items": [1, 2.5, "three", {"shard": [4, 5]}], "as": "shard"},
                "arguments": {"rows": "{{item}}"},
                "when": "{{params.lr}} < 0.5",
            },
            {
                "name": "score",
                "component": {"inline": component()},
                "parallelFor": {"items": "{{steps.prepare.outputs.shard list}}"},
                "arguments": {"rows": "{{item}}"},
            },
        ],
    }


def pipeline_document(name: str = "train-eval", namespace: str = "default") -> dict[str, Any]:
    """A Pipeline with ``pipeline_spec``'s steps."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Pipeline",
        "metadata": {"name": name, "namespace": namespace, "annotations": {"owner": "ml-team"}},
        "spec": pipeline_spec(),
    }


def pipeline_run_document(
    name: str = "train-eval-1", namespace: str = "default", *, pipeline: str | None = "train-eval"
) -> dict[str, Any]:
    """A PipelineRun of a stored Pipeline (``pipeline``), or of ``pipeline_spec`` inline (``pipeline=None``)."""
    spec: dict[str, Any] = {"arguments": {"lr": "0.02"}}
    if pipeline is None:
        spec["pipelineSpec"] = pipeline_spec()
    else:
        spec["pipelineRef"] = {"name": pipeline}
    return {
        "apiVersion": API_VERSION,
        "kind": "PipelineRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def pipeline_run_status() -> dict[str, Any]:
    """A running run's status: a finished step with an output, a cache hit, a fan-out with its items, a skip."""
    return {
        "phase": "Running",
        "instances": [
            {
                "step": "prepare",
                "phase": "Succeeded",
                "attempts": 1,
                "cacheKey": "sha256:" + "a" * 64,
                "outputs": {"shard list": "[1, 2]"},
                "outputDigests": {"shard list": "sha256:" + "b" * 64},
                "startTime": "2026-11-26T22:00:00Z",
                "completionTime": "2026-11-26T22:00:05Z",
            },
            {"step": "train", "phase": "Succeeded", "cacheHit": True, "outputs": {"model": "file:///a/model"}},
            {"step": "evaluate", "item": 0, "phase": "Running", "attempts": 2, "message": "retrying: exit 1"},
            {"step": "evaluate", "item": 3, "phase": "Skipped", "retryable": False},
        ],
        "fanouts": {"evaluate": [1, 2.5, "three", {"shard": [4, 5]}], "score": [1, 2]},
        "joined": ["score"],
        "componentDigests": {"prepare": "sha256:" + "c" * 64},
        "message": "3 of 5 steps done",
    }
