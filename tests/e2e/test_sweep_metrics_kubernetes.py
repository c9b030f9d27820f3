"""A sweep on a cluster reads its trials' metrics from their Pods' logs and finds the best trial.

What is real: the API server with ``pods/log`` served by kwok's kubelet-like server (``hack/testenv_logs``),
phalanx-operator's sweep controller reading each trial's log through it (``sinceTime``/``timestamps``, as on any
cluster), phalanx-scheduler, the TrainingJobs and Pods of the trials, the CLI. What the test plays: each trial's
program. kwok runs no container, so for each trial Pod the test computes the loss the program would report for the
``--lr`` on the Pod's command line and writes its ``phalanx-metric`` lines as the container's log; once the API
server serves that log, the test lets kwok end the Pod.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import k8s_testenv
from components import Components, phalanx_cli, wait_alive
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

GROUP = "/apis/phalanx.dev/v1alpha1"
HANG = "phalanx.dev/sim-hang"
TRIALS = 4


def loss_of(lr: float) -> float:
    """The program's final loss: least at lr = 0.01."""
    return round((math.log10(lr) + 2.0) ** 2 + 0.1, 6)


@pytest.fixture
def model(components: Components) -> Iterator[str]:
    kube = components.kube
    nodes = [kube.unique("metrics"), kube.unique("metrics")]
    product = kube.unique("METRICS-GPU")
    k8s_testenv.create_fake_gpu_nodes(kube.env, nodes, product=product)
    wait_alive(components.operator("--state-dir", str(components.directory / "operator-state")))
    wait_alive(components.scheduler("--lease-duration", "3"))
    yield product
    for name in nodes:
        kube.request("DELETE", f"/api/v1/nodes/{name}")


def sweep_document(model: str) -> dict[str, Any]:
    template = {
        "image": "example.org/trainer:1",
        "command": ["python", "train.py", "--lr", "${params.lr}"],
        "metadata": {"annotations": {HANG: "true"}},
        "resources": {"cpu": "1", "memory": "1Gi", "gpu": 1, "gpuModel": model},
    }
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Sweep",
        "metadata": {"name": "lr"},
        "spec": {
            "parameters": [{"name": "lr", "type": "double", "min": 1.0e-4, "max": 1.0, "log": True}],
            "algorithm": {"name": "random", "seed": 5},
            "objective": {"metric": "loss", "direction": "minimize"},
            "parallelTrials": 2,
            "maxTrials": TRIALS,
            "trial": {"spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}}},
        },
    }


def test_a_sweeps_trials_report_their_loss_through_their_pod_logs_and_the_best_is_found(
    components: Components, namespace: str, model: str, tmp_path: Path
) -> None:
    kube = components.kube
    kube.create(f"{GROUP}/namespaces/{namespace}/sweeps", sweep_document(model))
    played: dict[str, float] = {}  # trial job -> the loss its program reported

    def play_running_trials() -> dict[str, Any] | None:
        pods = kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=phalanx.dev/job")["items"]
        for pod in pods:
            job = pod["metadata"]["labels"]["phalanx.dev/job"]  # a trial's job: lr-0, lr-1...
            if job in played or (pod.get("status") or {}).get("phase") != "Running":
                continue
            container = pod["spec"]["containers"][0]
            argv = [*container.get("command", []), *container.get("args", [])]
            loss = loss_of(float(argv[argv.index("--lr") + 1]))
            name = pod["metadata"]["name"]
            log = k8s_testenv.write_log(
                tmp_path / f"{name}.log",
                [f"phalanx-metric step=1 loss={loss * 2}", f"phalanx-metric step=2 loss={loss}"],
            )
            k8s_testenv.set_pod_logs(kube.env, namespace, name, {container["name"]: log})
            path = f"/api/v1/namespaces/{namespace}/pods/{name}/log"
            wait_until(lambda path=path: "step=2" in kube.http.get(path).text, 30, f"{name}'s log served")
            kube.http.patch(
                f"/api/v1/namespaces/{namespace}/pods/{name}",
                content=json.dumps({"metadata": {"annotations": {HANG: None}}}),
                headers={"Content-Type": "application/merge-patch+json"},
            ).raise_for_status()
            played[job] = loss
        sweep = kube.get(f"{GROUP}/namespaces/{namespace}/sweeps/lr")
        return sweep if (sweep.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    sweep = wait_until(play_running_trials, 180, "the sweep finished", interval=0.3)
    status = sweep["status"]
    assert (status["phase"], status["reason"]) == ("Succeeded", "MaxTrialsReached"), status
    assert len(played) == TRIALS
    values = {result["name"]: result["value"] for result in status["results"]}
    assert values == pytest.approx(played), (values, played)
    assert {result["step"] for result in status["results"]} == {2}
    best = min(played, key=played.__getitem__)
    answer = phalanx_cli(kube, namespace, tmp_path, "sweep", "best", "lr", "-o", "json")
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout)["name"] == best
    assert json.loads(answer.stdout)["value"] == pytest.approx(played[best])
