"""The examples in examples/kubernetes/, applied with the real ``kubectl apply -f`` to a real control plane.

kubectl is the one the test environment builds with the control plane (same release, ``hack/k8s_testenv.py``),
run as cluster-admin on the example files as they are. Roles that never exit on their own on a real cluster
(parameter servers, MPI workers) finish after kwok's default half second here: they are service roles, so their
success neither ends nor fails the job.

Checked for every example: kubectl's client-side apply stored the file's spec; every Pod has the environment its
JobType promises; every Pod of the gang was created before any was bound, and all were bound (from the order of
watch events); the kwok stages played each Pod Running, and the role that decides success terminated with exit
code 0; the job reached Succeeded, and ``kubectl get trainingjobs`` shows its phase and reason.

And a failing replica, applied the same way from a manifest like the PyTorch example whose worker exits with
code 1 (kwok's ``phalanx.dev/sim-exit-code``): the job goes Restarting, retries the worker, and fails once
``backoffLimit`` restarts are spent, with the reason and the culprit in its status and in kubectl's columns.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import k8s_testenv
from components import Components
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

Kubectl = Callable[..., subprocess.CompletedProcess[str]]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "kubernetes"
JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
# The role whose replicas must succeed for the job to (the JobType's first successRole the example has).
DECIDING_ROLE = {"pytorch": "master", "tensorflow": "chief", "mpi": "launcher"}
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

# Like examples/kubernetes/pytorch-ddp.yaml, smaller, with kwok told how each replica ends: the master runs on,
# the worker exits with code 1 after 200 ms. Retries start 0.2 s after a failure (doubling), so the test is quick.
FLAKY_NAME = "flaky-ddp"
FLAKY = f"""\
apiVersion: phalanx.dev/v1alpha1
kind: TrainingJob
metadata:
  name: {FLAKY_NAME}
spec:
  type: pytorch
  replicas:
    master:
      template:
        metadata:
          annotations: {{phalanx.dev/sim-hang: "true"}}
        image: pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
        command: [python, -m, torch.distributed.run, --nproc-per-node=1, train.py]
        resources: {{cpu: 4, memory: 16Gi, gpu: 1}}
    worker:
      count: 1
      template:
        metadata:
          annotations: {{phalanx.dev/sim-exit-code: "1", phalanx.dev/sim-duration-ms: "200"}}
        image: pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
        command: [python, -m, torch.distributed.run, --nproc-per-node=1, train.py]
        resources: {{cpu: 4, memory: 16Gi, gpu: 1}}
  runPolicy:
    restartPolicy: OnFailure
    backoffLimit: 2
    backoffSeconds: 0.2
"""


def listed_version(kube: Any, path: str) -> str:
    """The resourceVersion of a LIST of ``path``, to watch from.

    Right after a CRD is established its watch cache is still syncing, and lists of its resources get
    429 "storage is (re)initializing" until it has (kubectl, through client-go, retries those by itself).
    """
    listed: dict[str, str] = {}

    def ready() -> bool:
        response = kube.http.get(path)
        if response.status_code == 429:
            return False
        response.raise_for_status()
        listed["version"] = response.json()["metadata"]["resourceVersion"]
        return True

    wait_until(ready, 30, f"a list of {path}", interval=0.1)
    return listed["version"]


class Watch:
    """Every watch event on one collection, in order, from now on; tests wait on them instead of polling."""

    def __init__(self, kube: Any, path: str) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._changed = threading.Condition()
        self._error: str | None = None
        self._stopped = threading.Event()
        version = listed_version(kube, path)
        self._thread = threading.Thread(target=self._run, args=(kube, path, version), daemon=True)
        self._thread.start()

    def _run(self, kube: Any, path: str, version: str) -> None:
        params = {"watch": "true", "resourceVersion": version, "timeoutSeconds": "300"}
        try:
            with kube.http.stream("GET", path, params=params, timeout=None) as stream:
                for line in stream.iter_lines():
                    if self._stopped.is_set():
                        return
                    if line:
                        event = json.loads(line)
                        with self._changed:
                            self.events.append((event["type"], event["object"]))
                            self._changed.notify_all()
        except httpx.HTTPError as error:
            with self._changed:
                self._error = f"the watch on {path} broke: {error!r}"
                self._changed.notify_all()

    def wait(self, predicate: Callable[[list[tuple[str, dict[str, Any]]]], bool], timeout: float, what: str) -> None:
        """Block until ``predicate(events)`` holds, re-checked on every new event; fail after ``timeout``."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._error is not None or predicate(self.events), timeout):
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; {len(self.events)} events")
            if not predicate(self.events):
                raise AssertionError(f"{self._error} while waiting for {what}")

    def objects(self, name: str) -> list[dict[str, Any]]:
        """Every state of the object called ``name`` the watch saw, in order."""
        with self._changed:
            return [obj for _, obj in self.events if obj["metadata"]["name"] == name]

    def stop(self) -> None:
        """Stop recording (the stream ends at its next event or its server-side timeout)."""
        self._stopped.set()


def phase_of(obj: dict[str, Any]) -> str:
    return str(obj.get("status", {}).get("phase", ""))


def finished(watch: Watch, name: str) -> Callable[[list[tuple[str, dict[str, Any]]]], bool]:
    return lambda _events: any(phase_of(job) in ("Succeeded", "Failed") for job in watch.objects(name))


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    [container] = pod["spec"]["containers"]
    return {item["name"]: item.get("value", "") for item in container.get("env", [])}


def terminated(pod: dict[str, Any]) -> list[dict[str, Any]]:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return [status["state"]["terminated"] for status in statuses if "terminated" in status["state"]]


def table(text: str) -> list[dict[str, str]]:
    """kubectl's table output as rows of {column: cell}; cells are cut at the header's column starts."""
    header, *lines = text.splitlines()
    names = header.split()
    starts, position = [], 0
    for name in names:
        position = header.index(name, position)
        starts.append(position)
        position += len(name)
    bounds: list[int | None] = [*starts[1:], None]
    return [
        {name: line[start:end].strip() for name, start, end in zip(names, starts, bounds, strict=True)}
        for line in lines
    ]


def printed_job(kubectl: Kubectl, namespace: str, name: str, *wide: str) -> dict[str, str]:
    rows = table(kubectl("get", "trainingjobs", "-n", namespace, *wide).stdout)
    [row] = [row for row in rows if row["NAME"] == name]
    return row


@pytest.fixture
def gpu_nodes(components: Components) -> Iterator[list[str]]:
    kube = components.kube
    names = [kube.unique("example-gpu") for _ in range(3)]
    k8s_testenv.create_fake_gpu_nodes(kube.env, names)
    yield names
    for name in names:
        kube.request("DELETE", f"/api/v1/nodes/{name}")


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_example_applied_with_kubectl_runs_with_its_environment_and_its_gang_bound_together(
    example: str, components: Components, namespace: str, gpu_nodes: list[str], kubectl: Kubectl
) -> None:
    kube = components.kube
    components.operator()
    components.scheduler("--lease-duration", "6")
    path = EXAMPLES / example
    [document] = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    name, kind = document["metadata"]["name"], document["spec"]["type"]
    expected = sum(role.get("count", 1) for role in document["spec"]["replicas"].values())
    pods = Watch(kube, f"/api/v1/namespaces/{namespace}/pods")
    jobs = Watch(kube, JOBS.format(ns=namespace))

    applied = kubectl("apply", "-n", namespace, "-f", str(path))
    assert applied.stdout.strip() == f"trainingjob.phalanx.dev/{name} created"
    jobs.wait(finished(jobs, name), 90, f"{example} finished")
    job = jobs.objects(name)[-1]
    jobs.stop()
    assert phase_of(job) == "Succeeded", job.get("status")
    # kubectl's client-side apply: the file's spec as sent, kept for the next three-way merge.
    assert json.loads(job["metadata"]["annotations"][LAST_APPLIED])["spec"] == document["spec"]

    # The deciding replicas' success is what the operator saw, so their events are in the watch (perhaps late).
    deciding = DECIDING_ROLE[kind]

    def deciding_succeeded(events: list[tuple[str, dict[str, Any]]]) -> bool:
        done = {p["metadata"]["name"] for _, p in events if p["metadata"]["labels"].get("phalanx.dev/role") == deciding}
        return bool(done) and all(any(phase_of(p) == "Succeeded" for p in pods.objects(pod_name)) for pod_name in done)

    # The watch records until then: a Pod's Succeeded may reach it after the job's, and stopping it first dropped
    # that event (a flake under load: the job Succeeded, the launcher's Succeeded never recorded).
    pods.wait(deciding_succeeded, 30, f"the {deciding} pods of {example} Succeeded")
    pods.stop()
    created = {pod["metadata"]["name"]: pod for kind_, pod in pods.events if kind_ == "ADDED"}
    assert len(created) == expected, sorted(created)
    # Gang scheduling: no Pod was bound before the last Pod of the job existed, and every Pod was bound.
    last_added = max(i for i, (kind_, _) in enumerate(pods.events) if kind_ == "ADDED")
    first_bound = min(i for i, (_, pod) in enumerate(pods.events) if pod["spec"].get("nodeName"))
    assert first_bound > last_added, "a Pod was bound before its whole gang existed"
    for pod_name in created:
        states = pods.objects(pod_name)
        assert any(pod["spec"].get("nodeName") in gpu_nodes for pod in states), f"{pod_name} never bound"
        # kwok's stages, as a kubelet would: Running, and for the deciding role terminated with exit code 0.
        assert "Running" in {phase_of(pod) for pod in states}, f"{pod_name} never Running"
        if created[pod_name]["metadata"]["labels"]["phalanx.dev/role"] == deciding:
            [state] = terminated(next(pod for pod in states if phase_of(pod) == "Succeeded"))
            assert (state["exitCode"], state["reason"]) == (0, "Completed"), state

    envs = {pod_name: env_of(pod) for pod_name, pod in created.items()}
    service = f"{name}.{namespace}.svc"
    if kind == "pytorch":
        assert {env["MASTER_ADDR"] for env in envs.values()} == {f"{name}-master-0.{service}"}
        assert {env["WORLD_SIZE"] for env in envs.values()} == {str(expected)}
        assert sorted(int(env["RANK"]) for env in envs.values()) == list(range(expected))
    elif kind == "tensorflow":
        configs = {pod_name: json.loads(env["TF_CONFIG"]) for pod_name, env in envs.items()}
        cluster = next(iter(configs.values()))["cluster"]
        assert cluster["ps"] == [f"{name}-ps-{i}.{service}:2222" for i in range(2)]
        assert len(cluster["worker"]) == 4 and len(cluster["chief"]) == 1
        for pod_name, config in configs.items():
            role, index = pod_name.removeprefix(f"{name}-").rsplit("-", 1)
            assert config["task"] == {"type": role, "index": int(index)}
    elif kind == "mpi":
        hostfile = kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}-hostfile")["data"]["hostfile"]
        assert [line.split()[0] for line in hostfile.splitlines() if line.strip()] == [
            f"{name}-worker-{i}.{service}" for i in range(4)
        ]
        launcher = created[f"{name}-launcher-0"]
        assert any(v["name"] == "hostfile" for v in launcher["spec"]["volumes"])
    else:
        pytest.fail(f"no environment check for job type {kind}")

    row = printed_job(kubectl, namespace, name)
    assert list(row) == ["NAME", "TYPE", "PHASE", "REASON", "AGE"]
    assert (row["TYPE"], row["PHASE"], row["REASON"]) == (kind, "Succeeded", job["status"]["reason"])
    assert row["REASON"], "a finished job says why"


def test_failing_replica_applied_with_kubectl_restarts_then_fails_at_the_backoff_limit(
    components: Components, namespace: str, gpu_nodes: list[str], kubectl: Kubectl, tmp_path: Path
) -> None:
    kube = components.kube
    components.operator()
    components.scheduler("--lease-duration", "6")
    manifest = tmp_path / f"{FLAKY_NAME}.yaml"
    manifest.write_text(FLAKY)
    pods = Watch(kube, f"/api/v1/namespaces/{namespace}/pods")
    jobs = Watch(kube, JOBS.format(ns=namespace))

    applied = kubectl("apply", "-n", namespace, "-f", str(manifest))
    assert applied.stdout.strip() == f"trainingjob.phalanx.dev/{FLAKY_NAME} created"
    jobs.wait(finished(jobs, FLAKY_NAME), 90, f"{FLAKY_NAME} finished")
    states = jobs.objects(FLAKY_NAME)
    jobs.stop()
    status = states[-1]["status"]
    assert status["phase"] == "Failed", status

    phases = [phase for i, phase in enumerate(map(phase_of, states)) if i == 0 or phase != phase_of(states[i - 1])]
    assert "Restarting" in phases, phases
    assert phases.index("Restarting") < phases.index("Failed") == len(phases) - 1, phases
    assert status["reason"] == "BackoffLimitExceeded"
    assert f"{FLAKY_NAME}-worker-0 failed with exit code 1" in status["message"], status["message"]
    assert "2 restarts reached backoffLimit 2" in status["message"], status["message"]
    assert status["restarts"] == 2

    # Three attempts of the worker (backoffLimit 2), each played Failed with exit code 1 by kwok.
    worker = f"{FLAKY_NAME}-worker-0"

    def attempts_failed(events: list[tuple[str, dict[str, Any]]]) -> set[str]:
        return {
            pod["metadata"]["labels"]["phalanx.dev/attempt"]
            for _, pod in events
            if pod["metadata"]["name"] == worker and phase_of(pod) == "Failed"
        }

    pods.wait(lambda events: attempts_failed(events) == {"0", "1", "2"}, 30, f"three failed attempts of {worker}")
    pods.stop()
    for state in (s for pod in pods.objects(worker) if phase_of(pod) == "Failed" for s in terminated(pod)):
        assert (state["exitCode"], state["reason"]) == (1, "Error"), state

    row = printed_job(kubectl, namespace, FLAKY_NAME)
    assert (row["TYPE"], row["PHASE"], row["REASON"]) == ("pytorch", "Failed", "BackoffLimitExceeded")
    wide = printed_job(kubectl, namespace, FLAKY_NAME, "-o", "wide")
    assert (wide["RESTARTS"], wide["MESSAGE"]) == ("2", status["message"])


def test_a_job_applied_with_kubectl_without_scheduling_or_run_policy_gets_their_defaults(
    phalanx_installed: Any, namespace: str, kubectl: Kubectl, tmp_path: Path
) -> None:
    # Once, the API server filled no default below an absent spec.scheduling or spec.runPolicy: the QUEUE column
    # was blank and the stored job had none of the defaults the docs promise.
    bare = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "bare"},
        "spec": {"replicas": {"worker": {"count": 1, "template": {"image": "example.org/trainer:1"}}}},
    }
    path = tmp_path / "bare.yaml"
    path.write_text(yaml.safe_dump(bare))
    kubectl("apply", "-n", namespace, "-f", str(path))
    stored = phalanx_installed.get(f"{JOBS.format(ns=namespace)}/bare")["spec"]
    assert stored["scheduling"]["queue"] == "default"
    assert stored["runPolicy"]["restartPolicy"] == "Never" and stored["runPolicy"]["backoffLimit"] == 3
    assert stored["type"] == "generic"
    assert printed_job(kubectl, namespace, "bare", "-o", "wide")["QUEUE"] == "default"
