"""The operator runs Sweeps and PipelineRuns on a real control plane: trials and steps are TrainingJobs it creates,
phalanx-scheduler places and kwok "runs" (tests/e2e/stages: each Pod succeeds after a while, printing nothing).

phalanx-operator (with ``--state-dir``: its study database and artifact store in a temporary directory) and
phalanx-scheduler run as local processes under their own ServiceAccounts, so the RBAC of deploy/ is what is
checked. Every TrainingJob of the test's namespace is watched from the start (an informer of our own), so what
is asserted about concurrency and about jobs never created is what the API server saw, not a sample.

A kwok Pod prints no ``phalanx-metric`` line and writes no ``metrics.json``, so a trial reports no objective: it
counts as failed (the sweep allows all 6 to fail and ends NoObjectiveValue once all are done). Pipeline steps
have no outputs here: a step's outputs are files its process writes, which kwok's Pods do not
(test_pipeline_files_operator.py plays a step's process to pass files through the artifact store's claim).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

import k8s_testenv
from components import Component, Components, phalanx_cli, wait_alive
from phalanx.adapters.kubernetes.api import TRAININGJOBS, KubeApi
from phalanx.adapters.kubernetes.informer import Informer
from phalanx.model.pipelines import parse_pipeline, parse_pipeline_run
from phalanx.model.sweeps import Sweep, parse_sweep
from phalanx.services.kubernetes.operations import KubeBackend
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

GROUP = "/apis/phalanx.dev/v1alpha1"
FINISHED = ("Succeeded", "Failed")


@dataclass
class JobWatch:
    """Every TrainingJob of a namespace as the API server reports it: names created, most unfinished at once."""

    created: list[str] = field(default_factory=list)
    uids: dict[str, set[str]] = field(default_factory=dict)  # name -> every uid seen under it
    unfinished: set[str] = field(default_factory=set)
    most_unfinished: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def changed(self, kind: str, obj: dict[str, Any]) -> None:
        name = str(obj["metadata"]["name"])
        phase = (obj.get("status") or {}).get("phase")
        with self.lock:
            if name not in self.created:
                self.created.append(name)
            self.uids.setdefault(name, set()).add(str(obj["metadata"].get("uid")))
            if kind == "DELETED" or phase in FINISHED:
                self.unfinished.discard(name)
            else:
                self.unfinished.add(name)
            self.most_unfinished = max(self.most_unfinished, len(self.unfinished))

    def names(self, prefix: str) -> list[str]:
        with self.lock:
            return sorted(name for name in self.created if name.startswith(prefix))

    def created_once(self, prefix: str) -> bool:
        """Whether every job of that prefix was created once (one uid under its name: never deleted and made again)."""
        with self.lock:
            return all(len(uids) == 1 for name, uids in self.uids.items() if name.startswith(prefix))


@dataclass
class Cluster:
    namespace: str
    model: str
    backend: KubeBackend
    jobs: JobWatch
    kube: Any
    operator: Component
    directory: Path

    def get(self, plural: str, name: str) -> dict[str, Any]:
        return self.kube.get(f"{GROUP}/namespaces/{self.namespace}/{plural}/{name}")  # type: ignore[no-any-return]

    def finished(self, plural: str, name: str, timeout: float) -> dict[str, Any]:
        seen: dict[str, Any] = {}

        def done() -> bool:
            seen["object"] = self.get(plural, name)
            return (seen["object"].get("status") or {}).get("phase") in FINISHED

        wait_until(done, timeout, f"{plural}/{name} finished", interval=0.2)
        return seen["object"]


@pytest.fixture
def cluster(components: Components, namespace: str, tmp_path: Path) -> Iterator[Cluster]:
    kube = components.kube
    nodes = [kube.unique("flows"), kube.unique("flows")]
    model = kube.unique("FLOWS-GPU")
    k8s_testenv.create_fake_gpu_nodes(kube.env, nodes, product=model)
    operator = components.operator("--state-dir", str(tmp_path / "operator-state"))
    scheduler = components.scheduler("--lease-duration", "3")
    wait_alive(operator)
    wait_alive(scheduler)
    api = KubeApi.from_kubeconfig(kube.kubeconfig)
    watch = JobWatch()
    # Short watch requests: a stopped informer ends with the request in flight.
    informer = Informer(api, TRAININGJOBS, namespace=namespace, on_change=watch.changed, watch_timeout_s=3).start()
    try:
        assert informer.wait_synced(30)
        yield Cluster(namespace, model, KubeBackend(api), watch, kube, operator, tmp_path)
    finally:
        informer.stop()
        assert informer.join(30), "the test's informer thread outlived its fixture"
        api.close()
        for name in nodes:
            kube.request("DELETE", f"/api/v1/nodes/{name}")


def sweep_document(namespace: str, model: str) -> dict[str, Any]:
    """6 trials, 2 at a time; each trial one GPU of this test's model, running 1.5 s under kwok."""
    template = {
        "image": "example.org/trainer:1",
        "command": ["python", "train.py", "--lr", "${params.lr}", "--layers", "${params.layers}"],
        "metadata": {"annotations": {"phalanx.dev/sim-duration-ms": "1500"}},
        "resources": {"cpu": "1", "memory": "1Gi", "gpu": 1, "gpuModel": model},
    }
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Sweep",
        "metadata": {"name": "lr", "namespace": namespace},
        "spec": {
            "parameters": [
                {"name": "lr", "type": "double", "min": 1.0e-4, "max": 0.1, "log": True},
                {"name": "layers", "type": "int", "min": 1, "max": 4},
            ],
            "algorithm": {"name": "random", "seed": 3},
            "objective": {"metric": "loss", "direction": "minimize"},
            "parallelTrials": 2,
            "maxTrials": 6,
            "maxFailedTrials": 6,  # kwok's trials report no loss: each counts as failed
            "trial": {"spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}}},
        },
    }


def test_a_sweep_of_6_trials_runs_at_most_2_at_once_and_finishes(cluster: Cluster) -> None:
    cluster.backend.create(parse_sweep(sweep_document(cluster.namespace, cluster.model)))
    sweep = cluster.finished("sweeps", "lr", timeout=180)

    assert cluster.jobs.names("lr-") == [f"lr-{n}" for n in range(6)]  # 6 created in all, each once
    assert cluster.jobs.created_once("lr-")
    assert cluster.jobs.most_unfinished == 2, "parallelTrials 2: two at once, never more"
    status = sweep["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "NoObjectiveValue")
    assert status["message"] == "all 6 trials done, and no succeeded trial reported loss"
    assert status["trials"]["created"] == 6 and status["trials"]["running"] == 0
    results = sorted(status["results"], key=lambda result: result["number"])
    assert [(r["name"], r["reason"]) for r in results] == [(f"lr-{n}", "it reported no loss") for n in range(6)]
    assert all(set(r["parameters"]) == {"lr", "layers"} for r in results)
    for number in range(6):
        job = cluster.get("trainingjobs", f"lr-{number}")
        assert job["metadata"]["labels"]["phalanx.dev/sweep"] == "lr"
        assert job["status"]["phase"] == "Succeeded"  # the job ran; it only reported nothing
    stored = cluster.backend.get(Sweep, cluster.namespace, "lr")
    assert stored is not None
    reasons = [event.reason for event in cluster.backend.events_of(stored)]
    assert reasons.count("TrialCreated") == 6 and reasons.count("SweepFailed") == 1

    # What a user sees of it with the CLI: every trial, and no best one (none reported the objective).
    described = phalanx_cli(cluster.kube, cluster.namespace, cluster.directory, "describe", "sweep", "lr")
    assert described.returncode == 0, described.stderr
    assert all(f"lr-{n}" in described.stdout for n in range(6)) and "NoObjectiveValue" in described.stdout
    best = phalanx_cli(cluster.kube, cluster.namespace, cluster.directory, "sweep", "best", "lr", "-o", "json")
    assert best.returncode == 1 and "Traceback" not in best.stderr and best.stderr.strip(), best.stderr


def test_an_operator_killed_mid_sweep_ends_it_after_its_restart_with_each_trial_created_once(
    cluster: Cluster,
) -> None:
    # The study is in the operator's state directory (SQLite), which its restart finds again, as a PostgreSQL
    # database would be found by a new Pod: what it asked for before the kill is created, never asked again.
    cluster.backend.create(parse_sweep(sweep_document(cluster.namespace, cluster.model)))
    wait_until(lambda: len(cluster.jobs.names("lr-")) >= 3, 60, "the sweep's third trial")
    cluster.operator.kill()  # SIGKILL: nothing is written on the way out
    cluster.operator.start()
    wait_alive(cluster.operator)
    sweep = cluster.finished("sweeps", "lr", timeout=180)

    assert cluster.jobs.names("lr-") == [f"lr-{n}" for n in range(6)]
    assert cluster.jobs.created_once("lr-"), "no trial job was deleted and made again"
    assert cluster.jobs.most_unfinished <= 2
    assert sweep["status"]["trials"]["created"] == 6 and sweep["status"]["reason"] == "NoObjectiveValue"
    assert len(sweep["status"]["results"]) == 6


ECHO = {
    "name": "echo",
    "inputs": [{"name": "shard", "type": "Integer"}, {"name": "tag", "type": "String", "default": "x"}],
    "implementation": {
        "container": {
            "image": "example.org/echo:1",
            "command": ["echo", {"inputValue": "shard"}, {"inputValue": "tag"}],
        }
    },
}


def pipeline_document(namespace: str) -> dict[str, Any]:
    """A fan-out over a literal list, then one step after it; no step has outputs."""
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": "fan", "namespace": namespace},
        "spec": {
            "parameters": [{"name": "tag", "type": "String", "default": "first"}],
            "steps": [
                {
                    "name": "shards",
                    "component": {"inline": ECHO},
                    "parallelFor": {"items": [1, 2, 3], "as": "shard"},
                    "arguments": {"shard": "{{item}}", "tag": "{{params.tag}}"},
                },
                {
                    "name": "report",
                    "component": {"inline": ECHO},
                    "arguments": {"shard": "0", "tag": "{{params.tag}}"},
                    "after": ["shards"],
                },
            ],
        },
    }


def run_document(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "PipelineRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"pipelineRef": {"name": "fan"}, "arguments": {"tag": "nightly"}},
    }


def test_a_pipeline_fans_out_and_a_second_run_completes_from_cache_creating_no_job(cluster: Cluster) -> None:
    cluster.backend.create(parse_pipeline(pipeline_document(cluster.namespace)))
    cluster.backend.create(parse_pipeline_run(run_document(cluster.namespace, "first")))
    first = cluster.finished("pipelineruns", "first", timeout=120)
    assert first["status"]["phase"] == "Succeeded", first["status"]
    assert first["status"]["fanouts"] == {"shards": [1, 2, 3]}
    ran = {(i["step"], i.get("item")): i for i in first["status"]["instances"]}
    assert set(ran) == {("shards", 0), ("shards", 1), ("shards", 2), ("report", None)}
    assert not any(instance.get("cacheHit") for instance in ran.values())
    shards = [f"first-shards-{item}-1" for item in range(3)]
    assert cluster.jobs.names("first-") == ["first-report-1", *shards]  # one job per item, the step after them
    job = cluster.get("trainingjobs", "first-shards-1-1")
    command = job["spec"]["replicas"]["worker"]["template"]["command"]
    assert command == ["echo", "2", "nightly"], "the item and the run's argument reached the step"

    cluster.backend.create(parse_pipeline_run(run_document(cluster.namespace, "second")))
    second = cluster.finished("pipelineruns", "second", timeout=60)
    assert second["status"]["phase"] == "Succeeded", second["status"]
    cached = {(i["step"], i.get("item")): i for i in second["status"]["instances"]}
    assert set(cached) == set(ran)
    assert all(instance.get("cacheHit") for instance in cached.values()), cached
    assert cluster.jobs.names("second-") == [], "a run completed from cache creates no TrainingJob"
    described = phalanx_cli(cluster.kube, cluster.namespace, cluster.directory, "describe", "pipelinerun", "second")
    assert described.returncode == 0, described.stderr
    assert "shards" in described.stdout and "report" in described.stdout and "Succeeded" in described.stdout


def test_phalanx_run_follows_a_pipeline_run_on_the_cluster_to_its_end(cluster: Cluster) -> None:
    # `phalanx run FILE` with the kubernetes backend follows the file's PipelineRun as on the embedded runtime
    # (the same follower over the operations): a line per step instance, exit 0 when the run succeeded.
    path = cluster.directory / "flow.yaml"
    documents = [pipeline_document(cluster.namespace), run_document(cluster.namespace, "followed")]
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    result = phalanx_cli(cluster.kube, cluster.namespace, cluster.directory, "run", str(path))
    assert result.returncode == 0, (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert "pipelinerun/followed created" in lines, result.stdout
    for name in ("shards[0]", "shards[1]", "shards[2]", "report"):
        assert any(line.split()[1:3] == [name, "Succeeded"] for line in lines if "s  " in line), result.stdout
    assert lines[-1].startswith("pipelinerun followed Succeeded"), result.stdout
