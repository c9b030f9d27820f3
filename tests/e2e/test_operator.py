"""phalanx-operator on a real control plane: TrainingJobs become Pods, a Service and a hostfile, and finish.

The operator and the scheduler run as real processes under their ServiceAccounts (``components``); the nodes are
kwok's, 8 fake GPUs each, with a GPU model of this test's own so its jobs land only on them. Replicas run and
finish through tests/e2e/stages, steered by annotations in each role's ``template.metadata``:
``phalanx.dev/sim-duration-ms``, ``phalanx.dev/sim-exit-code`` and ``phalanx.dev/sim-hang``.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import k8s_testenv
from components import Components
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
IMAGE = "example.org/trainer:1"


def role(
    count: int,
    model: str,
    *,
    duration_ms: int = 300,
    exit_code: int | None = None,
    hang: bool = False,
    gpus: int = 1,
) -> dict[str, Any]:
    """One role of a job: ``count`` replicas on this test's GPUs, simulated as asked."""
    annotations = {"phalanx.dev/sim-duration-ms": str(duration_ms)}
    if exit_code is not None:
        annotations["phalanx.dev/sim-exit-code"] = str(exit_code)
    if hang:
        annotations["phalanx.dev/sim-hang"] = "true"
    return {
        "count": count,
        "template": {
            "image": IMAGE,
            "command": ["python", "train.py"],
            "metadata": {"annotations": annotations},
            "resources": {"cpu": "1", "memory": "1Gi", "gpu": gpus, "gpuModel": model},
        },
    }


def job(name: str, kind: str, replicas: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {"type": kind, "replicas": replicas, **spec},
    }


def job_path(namespace: str, name: str) -> str:
    return f"{JOBS.format(ns=namespace)}/{name}"


def pods_of(kube: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    return kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=phalanx.dev/job={name}")["items"]


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    [container] = pod["spec"]["containers"]
    return {item["name"]: item.get("value", "") for item in container.get("env", [])}


def wait_phase(kube: Any, namespace: str, name: str, phase: str, timeout: float = 60) -> dict[str, Any]:
    def reached(obj: dict[str, Any]) -> bool:
        current = obj.get("status", {}).get("phase")
        if current in ("Succeeded", "Failed") and current != phase:
            raise AssertionError(f"job {name} ended {current} instead of {phase}: {obj.get('status')}")
        return current == phase

    return kube.wait_for(job_path(namespace, name), reached, timeout, f"job {name} {phase}")


def merge_patch(kube: Any, path: str, patch: dict[str, Any]) -> dict[str, Any]:
    response = kube.http.patch(
        path, content=json.dumps(patch), headers={"Content-Type": "application/merge-patch+json"}
    )
    assert response.status_code == 200, response.text
    return response.json()


def events_of(kube: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    items = kube.get(f"/api/v1/namespaces/{namespace}/events")["items"]
    return [e for e in items if (e["involvedObject"].get("kind"), e["involvedObject"]["name"]) == ("TrainingJob", name)]


class PodWatch:
    """Every Pod ADDED in a namespace, by (name, attempt), from a watch started now: duplicates show up here."""

    def __init__(self, kube: Any, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.added: Counter[tuple[str, str]] = Counter()
        self.uids: dict[str, list[str]] = defaultdict(list)
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._version = kube.get(f"/api/v1/namespaces/{namespace}/pods")["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        params = {"watch": "true", "resourceVersion": self._version, "timeoutSeconds": "300"}
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        try:
            with self.kube.http.stream("GET", path, params=params, timeout=None) as stream:
                for line in stream.iter_lines():
                    if self._stop.is_set():
                        return
                    if line:
                        self._record(json.loads(line))
        except httpx.HTTPError:
            if not self._stop.is_set():
                raise

    def _record(self, event: dict[str, Any]) -> None:
        if event["type"] != "ADDED":
            return
        meta = event["object"]["metadata"]
        with self.lock:
            self.added[(meta["name"], meta.get("labels", {}).get("phalanx.dev/attempt", "?"))] += 1
            self.uids[meta["name"]].append(meta["uid"])

    def attempts(self, pod: str) -> list[str]:
        with self.lock:
            return sorted(attempt for name, attempt in self.added if name == pod)

    def duplicates(self) -> dict[tuple[str, str], int]:
        with self.lock:
            return {key: count for key, count in self.added.items() if count > 1}

    def stop(self) -> None:
        self._stop.set()


@pytest.fixture
def gpu_model(components: Components) -> Iterator[str]:
    """Two fresh 8-GPU nodes with a GPU model of their own; the model's name, for this test's jobs to ask for."""
    kube = components.kube
    names = [kube.unique("op-gpu"), kube.unique("op-gpu")]
    model = kube.unique("OP-GPU")
    k8s_testenv.create_fake_gpu_nodes(kube.env, names, product=model)
    yield model
    for name in names:
        kube.request("DELETE", f"/api/v1/nodes/{name}")


@pytest.fixture
def running(components: Components, gpu_model: str) -> tuple[Components, str]:
    """The operator and the scheduler, started; this test's GPU model."""
    components.operator()
    components.scheduler("--lease-duration", "3")
    return components, gpu_model


def test_a_pytorch_job_gets_owned_pods_with_the_rendezvous_env_and_succeeds(
    running: tuple[Components, str], namespace: str
) -> None:
    components, model = running
    kube = components.kube
    body = job(
        "ddp",
        "pytorch",
        {"master": role(1, model, duration_ms=1500), "worker": role(2, model, duration_ms=1500)},
        runPolicy={"restartPolicy": "OnFailure", "backoffLimit": 2},
    )
    created = kube.create(JOBS.format(ns=namespace), body)
    uid = created["metadata"]["uid"]

    def bound() -> list[dict[str, Any]] | None:
        found = pods_of(kube, namespace, "ddp")
        return found if len(found) == 3 and all(pod["spec"].get("nodeName") for pod in found) else None

    pods = wait_until(bound, 60, "three pods, bound")
    by_name = {pod["metadata"]["name"]: pod for pod in pods}
    assert set(by_name) == {"ddp-master-0", "ddp-worker-0", "ddp-worker-1"}
    master_addr = f"ddp-master-0.ddp.{namespace}.svc"
    for rank, name in enumerate(["ddp-master-0", "ddp-worker-0", "ddp-worker-1"]):
        pod = by_name[name]
        meta, spec = pod["metadata"], pod["spec"]
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "phalanx.dev/v1alpha1",
                "kind": "TrainingJob",
                "name": "ddp",
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert meta["labels"]["phalanx.dev/job"] == "ddp"
        assert meta["labels"]["phalanx.dev/attempt"] == "0"
        assert meta["annotations"]["phalanx.dev/job-uid"] == uid
        # The operator annotates the placement; the scheduler, not the operator, bound the pod to that node.
        assert spec["schedulerName"] == "phalanx-scheduler"
        assert spec["nodeName"] == meta["annotations"]["phalanx.dev/node"]
        assert meta["annotations"]["phalanx.dev/gpus"].isdigit()
        assert (spec["hostname"], spec["subdomain"]) == (name, "ddp")
        env = env_of(pod)
        assert env["MASTER_ADDR"] == master_addr
        assert env["MASTER_PORT"] == "29500"
        assert env["WORLD_SIZE"] == "3"
        assert env["RANK"] == str(rank)
        assert env["PHALANX_ATTEMPT"] == "0"
    service = kube.get(f"/api/v1/namespaces/{namespace}/services/ddp")
    assert service["spec"]["clusterIP"] == "None"
    assert service["metadata"]["ownerReferences"][0]["uid"] == uid

    done = wait_phase(kube, namespace, "ddp", "Succeeded")
    assert done["status"]["replicaStatuses"]["master"]["succeeded"] == 1
    assert done["status"]["observedGeneration"] == done["metadata"]["generation"]
    # Pods still running when the job finished are deleted; those that exited stay, with their logs, until
    # the job is deleted.
    kept = wait_until(
        lambda: (
            (p := pods_of(kube, namespace, "ddp"))
            and all(x["status"].get("phase") in ("Succeeded", "Failed") for x in p)
            and p
        ),
        30,
        "only the finished job's exited pods left",
    )
    assert {pod["metadata"]["name"] for pod in kept} <= {"ddp-master-0", "ddp-worker-0", "ddp-worker-1"}
    master = [pod for pod in kept if pod["metadata"]["name"] == "ddp-master-0"]
    assert [pod["status"]["phase"] for pod in master] == ["Succeeded"], [pod["status"] for pod in kept]
    # Events go out on the status writer's thread after the status they describe is written: await them.
    wanted = {"Accepted", "Scheduled", "Started", "SuccessPolicyMet", "Succeeded"}
    events = wait_until(
        lambda: (e := events_of(kube, namespace, "ddp")) and wanted <= {x["reason"] for x in e} and e,
        30,
        f"the events {sorted(wanted)}",
    )
    assert all(e["involvedObject"]["uid"] == uid for e in events)


def test_an_mpi_job_gets_a_headless_service_and_a_hostfile(running: tuple[Components, str], namespace: str) -> None:
    components, model = running
    kube = components.kube
    body = job(
        "allreduce",
        "mpi",
        # The workers serve the launcher until it succeeds; then the job stops them.
        {"launcher": role(1, model, duration_ms=1500, gpus=0), "worker": role(2, model, hang=True)},
    )
    kube.create(JOBS.format(ns=namespace), body)
    configmap = kube.wait_for(
        f"/api/v1/namespaces/{namespace}/configmaps/allreduce-hostfile", lambda obj: True, 30, "hostfile ConfigMap"
    )
    assert configmap["data"]["hostfile"].splitlines() == [
        f"allreduce-worker-0.allreduce.{namespace}.svc slots=1",
        f"allreduce-worker-1.allreduce.{namespace}.svc slots=1",
    ]
    # The operator creates the Service and the ConfigMap at the same time (a pool of writes): either may be first.
    service = kube.wait_for(f"/api/v1/namespaces/{namespace}/services/allreduce", lambda obj: True, 30, "Service")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    pods = wait_until(lambda: (p := pods_of(kube, namespace, "allreduce")) and len(p) == 3 and p, 30, "three pods")
    launcher = next(p for p in pods if p["metadata"]["name"] == "allreduce-launcher-0")
    assert env_of(launcher)["OMPI_MCA_orte_default_hostfile"] == "/etc/phalanx/hostfile"
    assert {"name": "hostfile", "configMap": {"name": "allreduce-hostfile", "defaultMode": 420}} in launcher["spec"][
        "volumes"
    ]
    # The job names no sshKeys: the mpi JobType's give every Pod the job's key pair, for mpirun's ssh logins.
    uid = pods[0]["metadata"]["annotations"]["phalanx.dev/job-uid"]
    secret = kube.get(f"/api/v1/namespaces/{namespace}/secrets/allreduce-ssh-{uid[:8]}")
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert [o["uid"] for o in secret["metadata"]["ownerReferences"]] == [uid]
    for pod in pods:
        [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "ssh-auth"]
        assert volume["secret"]["secretName"] == f"allreduce-ssh-{uid[:8]}"
        mounts = pod["spec"]["containers"][0]["volumeMounts"]
        assert {"name": "ssh-auth", "mountPath": "/root/.ssh", "readOnly": True} in mounts
    wait_phase(kube, namespace, "allreduce", "Succeeded")
    left = wait_until(
        lambda: (
            (p := pods_of(kube, namespace, "allreduce"))
            and all(x["status"].get("phase") == "Succeeded" for x in p)
            and p
        ),
        30,
        "the hung workers stopped",
    )
    assert [pod["metadata"]["name"] for pod in left] == ["allreduce-launcher-0"]  # exited: kept for its log


def test_a_one_replica_job_runs_without_a_service_and_records_every_phase(
    running: tuple[Components, str], namespace: str
) -> None:
    components, model = running
    kube = components.kube
    kube.create(JOBS.format(ns=namespace), job("solo", "generic", {"worker": role(1, model, duration_ms=1500)}))

    def bound() -> dict[str, Any] | None:
        found = pods_of(kube, namespace, "solo")
        return found[0] if len(found) == 1 and found[0]["spec"].get("nodeName") else None

    pod = wait_until(bound, 60, "the pod, bound")
    # No Service, so the Pod names none; the replica's own address is its Pod's name (its hostname).
    assert "subdomain" not in pod["spec"] and "hostname" not in pod["spec"]
    assert env_of(pod)["COORDINATOR_HOST"] == "solo-worker-0"
    done = wait_phase(kube, namespace, "solo", "Succeeded")["status"]
    assert not kube.exists(f"/api/v1/namespaces/{namespace}/services/solo")
    # Downloading was written together with Running, and still has its own condition.
    conditions = {condition["type"]: condition for condition in done["conditions"]}
    assert {"Queued", "Admitted", "Downloading", "Running", "Storing", "Succeeded"} <= set(conditions)
    assert conditions["Downloading"]["reason"] == "Staging"
    assert conditions["Admitted"]["lastTransitionTime"] <= conditions["Downloading"]["lastTransitionTime"]
    assert conditions["Downloading"]["lastTransitionTime"] <= conditions["Running"]["lastTransitionTime"]
    reasons = [event["reason"] for event in events_of(kube, namespace, "solo")]
    assert reasons.count("Staging") == 1 and reasons.count("Started") == 1, reasons


def test_a_failing_replica_restarts_with_backoff_then_fails_at_the_backoff_limit(
    running: tuple[Components, str], namespace: str
) -> None:
    components, model = running
    kube = components.kube
    pods = PodWatch(kube, namespace)
    body = job(
        "flaky",
        "pytorch",
        {"master": role(1, model, hang=True), "worker": role(1, model, duration_ms=200, exit_code=1)},
        runPolicy={"restartPolicy": "OnFailure", "backoffLimit": 2, "backoffSeconds": 0.2},
    )
    kube.create(JOBS.format(ns=namespace), body)
    failed = wait_phase(kube, namespace, "flaky", "Failed")["status"]
    pods.stop()
    assert failed["reason"] == "BackoffLimitExceeded"
    assert "flaky-worker-0 failed with exit code 1" in failed["message"], failed["message"]
    assert "2 restarts reached backoffLimit 2" in failed["message"], failed["message"]
    # The Pod's termination message (kwok writes one as a kubelet does from the log's end under the container's
    # FallbackToLogsOnError) ends the job's failure message, as a replica's last output does on the embedded runtime.
    assert failed["message"].endswith("; its last output: simulated exit code 1"), failed["message"]
    assert failed["restarts"] == 2
    assert "Restarting" in {condition["type"] for condition in failed["conditions"]}
    # Only the failed replica restarts (no gangRestart): the worker ran three attempts, the master one.
    assert pods.attempts("flaky-worker-0") == ["0", "1", "2"]
    assert pods.attempts("flaky-master-0") == ["0"]
    assert not pods.duplicates()

    # The hung master is stopped; what exited (the worker's last attempt, unless its failure was handled by
    # deleting it before the job failed) stays for its log.
    def exited_only() -> tuple[str, ...] | None:
        pods = pods_of(kube, namespace, "flaky")
        if all(pod["status"].get("phase") == "Failed" for pod in pods):
            return tuple(pod["metadata"]["name"] for pod in pods)
        return None

    left = wait_until(lambda: (found := exited_only()) is not None and (found,), 30, "the failed job's pods stopped")
    assert left[0] in ((), ("flaky-worker-0",)), left
    kube.request("DELETE", f"{JOBS.format(ns=namespace)}/flaky")
    wait_until(lambda: not pods_of(kube, namespace, "flaky"), 60, "the job's pods removed with the job")


def test_gang_restart_replaces_every_pod_with_a_new_attempt(running: tuple[Components, str], namespace: str) -> None:
    components, model = running
    kube = components.kube
    pods = PodWatch(kube, namespace)
    body = job(
        "gang",
        "pytorch",
        {"master": role(1, model, hang=True), "worker": role(2, model, duration_ms=300, exit_code=1)},
        runPolicy={"restartPolicy": "OnFailure", "backoffLimit": 1, "backoffSeconds": 0.2, "gangRestart": True},
    )
    kube.create(JOBS.format(ns=namespace), body)
    failed = wait_phase(kube, namespace, "gang", "Failed")["status"]
    pods.stop()
    assert failed["reason"] == "BackoffLimitExceeded", failed
    # The master never failed, yet it was stopped and started again with the rest of the gang.
    for name in ("gang-master-0", "gang-worker-0", "gang-worker-1"):
        assert pods.attempts(name) == ["0", "1"], (name, pods.added)
        assert len(set(pods.uids[name])) == 2
    assert not pods.duplicates()
    messages = [e["message"] for e in events_of(kube, namespace, "gang") if e["reason"] == "ReplicaFailed"]
    assert any("restarting all 3 replica(s) together" in message for message in messages), messages


def test_halt_stops_every_pod_and_resume_runs_the_job_to_success(
    running: tuple[Components, str], namespace: str
) -> None:
    components, model = running
    kube = components.kube
    kube.create(JOBS.format(ns=namespace), job("pausable", "pytorch", {"worker": role(2, model, hang=True)}))
    wait_phase(kube, namespace, "pausable", "Running")
    # What `phalanx halt` does: set spec.runPolicy.suspend.
    merge_patch(kube, job_path(namespace, "pausable"), {"spec": {"runPolicy": {"suspend": True}}})
    halted = wait_phase(kube, namespace, "pausable", "Halted")["status"]
    assert pods_of(kube, namespace, "pausable") == []
    assert halted["attempt"] == 1
    # Resume, and let the replicas finish this time (the template's simulation annotations change with it).
    annotations = {"phalanx.dev/sim-hang": None, "phalanx.dev/sim-duration-ms": "300"}
    patch = {
        "spec": {
            "runPolicy": {"suspend": False},
            "replicas": {"worker": {"template": {"metadata": {"annotations": annotations}}}},
        }
    }
    merge_patch(kube, job_path(namespace, "pausable"), patch)
    pods = wait_until(lambda: (p := pods_of(kube, namespace, "pausable")) and len(p) == 2 and p, 30, "pods again")
    assert {pod["metadata"]["labels"]["phalanx.dev/attempt"] for pod in pods} == {"1"}
    done = wait_phase(kube, namespace, "pausable", "Succeeded")["status"]
    assert {"Halting", "Halted", "Queued", "Running"} <= {c["type"] for c in done["conditions"]}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"type": "pytorchh", "replicas": {"worker": role(1, "none")}},
            "spec.type: unknown job type 'pytorchh'; did you mean 'pytorch'?",
        ),
        (
            {"type": "pytorch", "replicas": {"trainer": role(1, "none")}},
            "spec.replicas.trainer: job type 'pytorch' has no role 'trainer'",
        ),
        (
            # an image alone is a command (its entrypoint runs); neither is nothing to run
            {"type": "pytorch", "replicas": {"worker": {"count": 1, "template": {}}}},
            "spec.replicas.worker.template.command: required",
        ),
    ],
    ids=["unknown-type", "unknown-role", "no-command"],
)
def test_an_invalid_spec_fails_the_job_with_the_field_path(
    running: tuple[Components, str], namespace: str, spec: dict[str, Any], message: str
) -> None:
    components, _ = running
    kube = components.kube
    kube.create(
        JOBS.format(ns=namespace),
        {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "bad"}, "spec": spec},
    )
    status = wait_phase(kube, namespace, "bad", "Failed")["status"]
    assert status["reason"] == "InvalidSpec"
    assert message in status["message"], status["message"]
    assert pods_of(kube, namespace, "bad") == []
    # Events are posted from the operator's own pool after the status write: wait for it, do not race it.
    warnings = wait_until(
        lambda: [e for e in events_of(kube, namespace, "bad") if e["reason"] == "InvalidSpec"],
        30,
        "the InvalidSpec event",
    )
    assert warnings[0]["type"] == "Warning"
    assert components.started[0].alive, "an invalid job must not stop the operator"


def test_an_orphaned_pod_is_deleted_and_a_foreign_one_is_left_alone(
    running: tuple[Components, str], namespace: str
) -> None:
    components, _ = running
    kube = components.kube

    def pod(name: str, annotations: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"phalanx.dev/job": "gone"}, "annotations": annotations},
            # No scheduler of that name exists: the pod stays Pending, untouched by anything but the operator.
            "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": IMAGE}]},
        }

    pods = f"/api/v1/namespaces/{namespace}/pods"
    kube.create(pods, pod("foreign", {}))
    kube.create(pods, pod("orphan", {"phalanx.dev/job-uid": str(uuid.uuid4())}))
    wait_until(lambda: not kube.exists(f"{pods}/orphan"), 30, "the orphan deleted")
    assert kube.exists(f"{pods}/foreign"), "a pod without phalanx.dev/job-uid is not the operator's"


def test_ttl_after_finished_deletes_the_job(running: tuple[Components, str], namespace: str) -> None:
    components, model = running
    kube = components.kube
    body = job("shortlived", "pytorch", {"worker": role(1, model)}, runPolicy={"ttlSecondsAfterFinished": 1})
    kube.create(JOBS.format(ns=namespace), body)
    wait_phase(kube, namespace, "shortlived", "Succeeded")
    wait_until(lambda: not kube.exists(job_path(namespace, "shortlived")), 30, "the job deleted after its TTL")


def test_kill_9_of_the_operator_mid_run_leaves_no_duplicate_pods_and_every_job_finishes(
    running: tuple[Components, str], namespace: str
) -> None:
    components, model = running
    kube = components.kube
    operator = components.started[0]
    pods = PodWatch(kube, namespace)
    names = [f"run-{i}" for i in range(4)]
    for name in names:
        kube.create(JOBS.format(ns=namespace), job(name, "pytorch", {"worker": role(2, model, duration_ms=1500)}))
    # A job that restarts twice and then fails, so kills also land while a restart is under way.
    flaky = job(
        "flaky",
        "pytorch",
        {"master": role(1, model, hang=True), "worker": role(1, model, duration_ms=400, exit_code=1)},
        runPolicy={"restartPolicy": "OnFailure", "backoffLimit": 2, "backoffSeconds": 0.3},
    )
    kube.create(JOBS.format(ns=namespace), flaky)
    for round_ in range(4):
        wait_until(lambda enough=round_ * 2: sum(pods.added.values()) > enough, 60, "progress between kills")
        operator.kill()
        operator.start()
    for name in names:
        wait_phase(kube, namespace, name, "Succeeded", timeout=120)
    assert wait_phase(kube, namespace, "flaky", "Failed", timeout=120)["status"]["reason"] == "BackoffLimitExceeded"
    pods.stop()
    assert not pods.duplicates(), f"pods created twice: {pods.duplicates()}"
    assert pods.attempts("flaky-worker-0") == ["0", "1", "2"]
    for name in names:
        assert pods.attempts(f"{name}-worker-0") == ["0"]


def test_the_operator_creates_missing_builtin_jobtypes_at_start(components: Components) -> None:
    kube = components.kube
    path = "/apis/phalanx.dev/v1alpha1/jobtypes/xgboost"
    if kube.exists(path):
        kube.request("DELETE", path)
        wait_until(lambda: not kube.exists(path), 30, "xgboost deleted")
    components.operator()
    created = kube.wait_for(path, lambda obj: True, 30, "the operator re-creates the built-in xgboost")
    assert created["metadata"]["labels"]["phalanx.dev/builtin"] == "true"
    assert created["spec"]["port"] == 9999
