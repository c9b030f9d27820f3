"""`phalanx logs` on a cluster reads each replica's Pod log through the API server, as `kubectl logs` does.

What is real: the API server and its ``pods/log`` subresource, which dials the node's kubelet endpoint; kwok's
kubelet-like server answering it (``hack/testenv_logs``); phalanx-operator and phalanx-scheduler; the CLI as a user
runs it (``logs``, ``logs -r``, ``logs -f`` until the job ends). What the test plays: the containers' output. kwok
runs no container, so the test writes each Pod's log file (CRI format) and names it in a kwok ``Logs`` object, the
way a kubelet would have written the container's stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import k8s_testenv
from components import Components, phalanx_cli, wait_alive
from support.sim_jobs import gpu_job
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
HANG = "phalanx.dev/sim-hang"


@pytest.fixture
def cluster(components: Components) -> Iterator[str]:
    """The GPU model of a fresh kwok node, with the operator and the scheduler running."""
    kube = components.kube
    node, model = kube.unique("logs"), kube.unique("LOGS-GPU")
    k8s_testenv.create_fake_gpu_nodes(kube.env, [node], product=model)
    wait_alive(components.operator())
    wait_alive(components.scheduler("--lease-duration", "3"))
    yield model
    kube.request("DELETE", f"/api/v1/nodes/{node}")


def cli_process(kube: Any, namespace: str, directory: Path, *args: str) -> subprocess.Popen[str]:
    """``phalanx ARGS`` on the cluster, started in the background as a user would run it (``phalanx_cli``'s way)."""
    environment = {k: v for k, v in os.environ.items() if k not in ("PHALANX_BACKEND", "KUBECONFIG", "PHALANX_HOME")}
    environment.update(PHALANX_HOME=str(directory / "embedded-state"), COLUMNS="200")
    cluster = ["-n", namespace, "--backend", "kubernetes", "--kubeconfig", str(kube.kubeconfig)]
    return subprocess.Popen(
        [sys.executable, "-m", "phalanx.entrypoints.cli", *args, *cluster],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
        cwd=directory,
    )


def release(kube: Any, namespace: str, pod: str) -> None:
    """Let kwok end the Pod (its containers exit 0): the hang annotation goes."""
    kube.http.patch(
        f"/api/v1/namespaces/{namespace}/pods/{pod}",
        content=json.dumps({"metadata": {"annotations": {HANG: None}}}),
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()


def running_pods(kube: Any, namespace: str, job: str, count: int) -> list[dict[str, Any]]:
    def running() -> list[dict[str, Any]]:
        pods = kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=phalanx.dev/job={job}")["items"]
        ready = [pod for pod in pods if (pod.get("status") or {}).get("phase") == "Running"]
        return ready if len(ready) == count else []

    return wait_until(running, 60, f"{count} Pod(s) of {job} running", interval=0.2)  # type: ignore[no-any-return]


def test_logs_of_every_replica_one_replica_and_followed_until_the_job_ends(
    components: Components, namespace: str, cluster: str, tmp_path: Path
) -> None:
    kube = components.kube
    kube.create(JOBS.format(ns=namespace), gpu_job("talk", cluster, workers=2, gpus=1))
    files: dict[str, Path] = {}
    for pod in running_pods(kube, namespace, "talk", 2):
        name = pod["metadata"]["name"]
        [container] = pod["spec"]["containers"]
        index = pod["metadata"]["labels"]["phalanx.dev/replica-index"]
        files[name] = k8s_testenv.write_log(tmp_path / "logs" / f"{name}.log", [f"hello from rank {index}", "epoch 1"])
        k8s_testenv.set_pod_logs(kube.env, namespace, name, {container["name"]: files[name]})

    def both_logs() -> str | None:
        result = phalanx_cli(kube, namespace, tmp_path, "logs", "talk")
        said = result.stdout
        return said if result.returncode == 0 and "hello from rank 1" in said and "hello from rank 0" in said else None

    said = wait_until(both_logs, 30, "both replicas' logs through the API server", interval=0.5)
    lines = [line.strip() for line in said.splitlines()]
    assert "worker-0 | hello from rank 0" in lines and "worker-0 | epoch 1" in lines, said
    assert "worker-1 | hello from rank 1" in lines, said

    one = phalanx_cli(kube, namespace, tmp_path, "logs", "talk", "-r", "worker-1")
    assert one.returncode == 0, one.stderr
    assert "hello from rank 1" in one.stdout and "rank 0" not in one.stdout, one.stdout

    follow = cli_process(kube, namespace, tmp_path, "logs", "talk", "-f")
    try:
        k8s_testenv.write_log(files["talk-worker-0"], ["epoch 2: written while followed"])
        for pod in files:
            release(kube, namespace, pod)
        out, err = follow.communicate(timeout=90)
    finally:
        follow.kill()
    assert follow.returncode == 0, err
    assert "epoch 2: written while followed" in out, out
    assert "hello from rank 1" in out, out


def test_run_streams_the_replicas_logs_while_it_follows_the_job(
    components: Components, namespace: str, cluster: str, tmp_path: Path
) -> None:
    kube = components.kube
    spec = tmp_path / "job.yaml"
    spec.write_text(json.dumps(gpu_job("stream", cluster, workers=1, gpus=1)))
    run = cli_process(kube, namespace, tmp_path, "run", str(spec))
    try:
        [pod] = running_pods(kube, namespace, "stream", 1)
        name = pod["metadata"]["name"]
        log = k8s_testenv.write_log(tmp_path / f"{name}.log", ["step 1: loss 0.7", "step 2: loss 0.4"])
        k8s_testenv.set_pod_logs(kube.env, namespace, name, {pod["spec"]["containers"][0]["name"]: log})
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/log"
        wait_until(lambda: "loss 0.4" in kube.http.get(path).text, 30, "the Pod's log served")
        release(kube, namespace, name)
        out, err = run.communicate(timeout=90)
    finally:
        run.kill()
    assert run.returncode == 0, (out, err)
    assert "step 1: loss 0.7" in out and "step 2: loss 0.4" in out, out
    assert "Succeeded" in out, out
