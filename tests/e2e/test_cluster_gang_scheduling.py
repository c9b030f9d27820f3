"""Gang scheduling without phalanx-scheduler: jobs whose Pods kube-scheduler places, as one gang, on a real cluster.

A control plane of its own (module-scoped) with kube-scheduler's alpha gang scheduling on, as the pinned
Kubernetes 1.36 has it: feature gates GenericWorkload and GangScheduling on every component, kube-apiserver
serving ``scheduling.k8s.io/v1alpha2``; two kwok nodes of 4 GPUs each. phalanx-operator and phalanx-scheduler run
as processes under their ServiceAccounts (deploy/'s RBAC), as in the rest of the tier. A job naming
``schedulerName: default-scheduler`` is admitted by the operator at once, gets a PodGroup (``minCount``: its
gang) and Pods that name kube-scheduler and the group; phalanx-scheduler leaves it alone.

- A gang that fits runs: every Pod bound by kube-scheduler, the job Running.
- A gang that cannot fit gets no Pod bound at all (no partial gang): kube-scheduler marks its PodGroup
  Unschedulable while one of its two Pods would fit; once room appears, every Pod binds. A watch on the Pods
  records every change, so "never one bound before the room" is checked on every state the API server showed.
- A gang restart (every replica failing, ``gangRestart``) creates the next attempt's Pods in the same PodGroup,
  and kube-scheduler binds them again, until ``backoffLimit`` fails the job.
- The cluster-wide default (``--default-job-scheduler``, given to both components here) places jobs naming no
  scheduler the same way; a job naming ``phalanx-scheduler`` is still admitted, placed and bound by it.
- On the session's control plane, whose API server does not serve PodGroups, such a job fails with the fix in
  its message and not one Pod is created (a Pod without its group would be scheduled alone: a partial gang).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import k8s_testenv
from components import Components, Kube, apply_install, own_control_plane, report_logs_of, wait_alive
from support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

GATES = {"GenericWorkload": True, "GangScheduling": True}
RUNTIME_CONFIG = {"scheduling.k8s.io/v1alpha2": "true"}
NODES = ("gang-node-0", "gang-node-1")
GPUS_PER_NODE = 4
JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
PODGROUPS = "/apis/scheduling.k8s.io/v1alpha2/namespaces/{ns}/podgroups"


def new_namespace(cluster: Kube) -> str:
    """A namespace of its own for one test."""
    name = cluster.unique("gang")
    cluster.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    with own_control_plane(
        tmp_path_factory.mktemp("gang-k8s"),
        "the gang-scheduling control plane",
        scheduler=True,
        feature_gates=GATES,
        runtime_config=RUNTIME_CONFIG,
    ) as gang:
        apply_install(gang)
        k8s_testenv.create_fake_gpu_nodes(gang.env, NODES, gpus=GPUS_PER_NODE)
        yield gang


@pytest.fixture(scope="module")
def running(cluster: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Components]:
    """phalanx-operator and phalanx-scheduler, both with kube-scheduler as the cluster-wide default."""
    started = Components(cluster, tmp_path_factory.mktemp("gang-components"))
    default = ("--default-job-scheduler", "default-scheduler")
    try:
        wait_alive(started.operator(*default))
        wait_alive(started.scheduler(*default))
        yield started
    finally:
        started.stop_all()


@pytest.fixture(autouse=True)
def _logs(request: pytest.FixtureRequest, running: Components) -> None:
    report_logs_of(request.node, running)


def job_body(name: str, workers: int, gpus: int, scheduler: str | None = "default-scheduler") -> dict[str, Any]:
    scheduling = {"schedulerName": scheduler} if scheduler else {}
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "type": "generic",
            "scheduling": scheduling,
            "replicas": {
                "worker": {
                    "count": workers,
                    "template": {
                        "metadata": {"annotations": {"phalanx.dev/sim-hang": "true"}},  # runs until deleted
                        "image": "phalanx.invalid/sim:1",
                        "command": ["train"],
                        "resources": {"gpu": gpus, "cpu": 1, "memory": "1Gi"},
                    },
                }
            },
        },
    }


def pods_of(cluster: Kube, namespace: str, job: str) -> list[dict[str, Any]]:
    return cluster.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=phalanx.dev/job={job}")["items"]


def bound(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(pod["metadata"]["name"] for pod in pods if pod["spec"].get("nodeName"))


class PodWatch:
    """Every change of a job's Pods as the API server sends it (LIST, then WATCH): (name, nodeName) in order."""

    def __init__(self, cluster: Kube, namespace: str, job: str) -> None:
        self.changes: list[tuple[str, str]] = []
        self.broken = False
        self._stop = threading.Event()
        self._cluster, self._namespace, self._job = cluster, namespace, job
        listed = cluster.get(self._path())
        self.changes += [(p["metadata"]["name"], p["spec"].get("nodeName") or "") for p in listed["items"]]
        self._version = listed["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _path(self) -> str:
        return f"/api/v1/namespaces/{self._namespace}/pods?labelSelector=phalanx.dev/job={self._job}"

    def _run(self) -> None:
        path = f"{self._path()}&watch=true&resourceVersion={self._version}&timeoutSeconds=240"
        try:
            with self._cluster.http.stream("GET", path, timeout=httpx.Timeout(30, read=None)) as response:
                for line in response.iter_lines():
                    if self._stop.is_set():
                        return
                    if line:
                        pod = json.loads(line)["object"]
                        self.changes.append((pod["metadata"]["name"], pod["spec"].get("nodeName") or ""))
        except httpx.HTTPError:
            if not self._stop.is_set():
                self.broken = True  # a lost watch must not pass for "nothing was bound"

    def bound_at_any_point(self) -> set[str]:
        return {name for name, node in self.changes if node}

    def stop(self) -> None:
        self._stop.set()


def wait_job_phase(cluster: Kube, namespace: str, name: str, phase: str, timeout: float = 60) -> dict[str, Any]:
    return cluster.wait_for(
        f"{JOBS.format(ns=namespace)}/{name}",
        lambda job: (job.get("status") or {}).get("phase") == phase,
        timeout=timeout,
        message=f"job {name} {phase}",
    )


def test_a_gang_that_fits_runs_with_every_pod_bound_by_kube_scheduler(cluster: Kube) -> None:
    namespace = new_namespace(cluster)
    cluster.create(JOBS.format(ns=namespace), job_body("fits", workers=2, gpus=GPUS_PER_NODE))
    job = wait_job_phase(cluster, namespace, "fits", "Running")
    reasons = [condition["reason"] for condition in job["status"]["conditions"]]
    assert "Delegated" in reasons, reasons
    group = cluster.get(f"{PODGROUPS.format(ns=namespace)}/fits")
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert group["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    pods = pods_of(cluster, namespace, "fits")
    assert bound(pods) == ["fits-worker-0", "fits-worker-1"]
    assert {pod["spec"]["nodeName"] for pod in pods} == set(NODES)  # 4 GPUs each: one Pod per node
    for pod in pods:
        assert pod["spec"]["schedulerName"] == "default-scheduler"
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "fits"}
    cluster.wait_for(
        f"{PODGROUPS.format(ns=namespace)}/fits",
        lambda g: any(c["type"] == "PodGroupScheduled" and c["status"] == "True" for c in g["status"]["conditions"]),
        message="PodGroup fits scheduled",
    )
    cluster.http.delete(f"{JOBS.format(ns=namespace)}/fits")
    wait_until(lambda: not pods_of(cluster, namespace, "fits"), 60, "the job's Pods gone with it")


def test_a_gang_that_cannot_fit_binds_no_pod_until_all_can(cluster: Kube) -> None:
    namespace = new_namespace(cluster)
    # One node's GPUs taken: a gang of two 4-GPU Pods has room for one Pod only.
    cluster.create(JOBS.format(ns=namespace), job_body("holder", workers=1, gpus=GPUS_PER_NODE))
    wait_job_phase(cluster, namespace, "holder", "Running")
    watch = PodWatch(cluster, namespace, "gang")
    try:
        cluster.create(JOBS.format(ns=namespace), job_body("gang", workers=2, gpus=GPUS_PER_NODE))
        # kube-scheduler tried the whole group and refused it: the PodGroup says so (or, were the gang not
        # honoured, one of its Pods gets bound: the watch sees it).
        groups = PODGROUPS.format(ns=namespace)

        def refused_or_partial() -> dict[str, Any] | None:
            if watch.bound_at_any_point():
                return {"partial": True}
            response = cluster.http.get(f"{groups}/gang")
            if response.status_code != 200:
                return None
            conditions = (response.json().get("status") or {}).get("conditions") or []
            unschedulable = any(
                c["type"] == "PodGroupScheduled" and c["status"] == "False" and c["reason"] == "Unschedulable"
                for c in conditions
            )
            return response.json() if unschedulable else None

        group = wait_until(refused_or_partial, 60, "PodGroup gang Unschedulable", interval=0.1)
        assert watch.bound_at_any_point() == set(), f"a partial gang: {watch.changes}"
        assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
        pods = pods_of(cluster, namespace, "gang")
        assert sorted(pod["metadata"]["name"] for pod in pods) == ["gang-worker-0", "gang-worker-1"]
        assert bound(pods) == []
        assert watch.bound_at_any_point() == set(), watch.changes  # still none, not for a moment
        assert not watch.broken
        job = cluster.get(f"{JOBS.format(ns=namespace)}/gang")
        assert job["status"]["phase"] == "Downloading"  # admitted, its Pods created, none started
        # Room appears: every Pod of the gang binds.
        seen_before_room = len(watch.changes)
        cluster.http.delete(f"{JOBS.format(ns=namespace)}/holder")
        wait_job_phase(cluster, namespace, "gang", "Running", timeout=120)
        assert bound(pods_of(cluster, namespace, "gang")) == ["gang-worker-0", "gang-worker-1"]
        assert not {name for name, node in watch.changes[:seen_before_room] if node}
        assert not watch.broken
    finally:
        watch.stop()
    cluster.http.delete(f"{JOBS.format(ns=namespace)}/gang")
    wait_until(lambda: not pods_of(cluster, namespace, "gang"), 60, "the job's Pods gone with it")


def test_the_cluster_wide_default_places_jobs_naming_no_scheduler(cluster: Kube) -> None:
    namespace = new_namespace(cluster)
    cluster.create(JOBS.format(ns=namespace), job_body("plain", workers=2, gpus=1, scheduler=None))
    wait_job_phase(cluster, namespace, "plain", "Running")
    pods = pods_of(cluster, namespace, "plain")
    assert {pod["spec"]["schedulerName"] for pod in pods} == {"default-scheduler"}
    assert {pod["spec"]["schedulingGroup"]["podGroupName"] for pod in pods} == {"plain"}
    assert len(bound(pods)) == 2
    cluster.http.delete(f"{JOBS.format(ns=namespace)}/plain")
    wait_until(lambda: not pods_of(cluster, namespace, "plain"), 60, "the job's Pods gone with it")


def test_a_job_naming_phalanx_scheduler_is_still_placed_by_it(cluster: Kube) -> None:
    namespace = new_namespace(cluster)
    cluster.create(JOBS.format(ns=namespace), job_body("ours", workers=2, gpus=1, scheduler="phalanx-scheduler"))
    job = wait_job_phase(cluster, namespace, "ours", "Running")
    pods = pods_of(cluster, namespace, "ours")
    assert {pod["spec"]["schedulerName"] for pod in pods} == {"phalanx-scheduler"}
    assert all("schedulingGroup" not in pod["spec"] for pod in pods)
    placed = {name: placement["node"] for name, placement in job["status"]["placements"].items()}
    assert {pod["metadata"]["name"]: pod["spec"]["nodeName"] for pod in pods} == placed
    assert cluster.http.get(f"{PODGROUPS.format(ns=namespace)}/ours").status_code == 404
    cluster.http.delete(f"{JOBS.format(ns=namespace)}/ours")
    wait_until(lambda: not pods_of(cluster, namespace, "ours"), 60, "the job's Pods gone with it")


def test_a_gang_restart_binds_the_new_pods_under_the_same_pod_group(cluster: Kube) -> None:
    namespace = new_namespace(cluster)
    body = job_body("flaky", workers=2, gpus=1)
    template = body["spec"]["replicas"]["worker"]["template"]
    template["metadata"]["annotations"] = {"phalanx.dev/sim-duration-ms": "300", "phalanx.dev/sim-exit-code": "1"}
    body["spec"]["runPolicy"] = {
        "restartPolicy": "OnFailure",
        "backoffLimit": 1,
        "backoffSeconds": 0.2,
        "gangRestart": True,
    }
    watch = PodWatch(cluster, namespace, "flaky")
    try:
        cluster.create(JOBS.format(ns=namespace), body)
        failed = wait_job_phase(cluster, namespace, "flaky", "Failed", timeout=120)
    finally:
        watch.stop()
    assert failed["status"]["restarts"] == 1, failed["status"]
    assert "backoffLimit 1" in failed["status"]["message"], failed["status"]["message"]
    # Both attempts' Pods ran (a Pod fails only once kwok runs it, and only a bound Pod runs): kube-scheduler bound
    # the second attempt's Pods too, in the PodGroup the job kept.
    # A Pod of the second attempt still running when the other one's failure ends the job is deleted with it
    # (cleanPodPolicy Running): which of the two are left depends on the order they fail in, so the watch, not the
    # Pods left, proves both were bound.
    pods = pods_of(cluster, namespace, "flaky")
    assert pods and {pod["metadata"]["labels"]["phalanx.dev/attempt"] for pod in pods} == {"1"}
    assert len(bound(pods)) == len(pods)
    assert {pod["spec"]["schedulingGroup"]["podGroupName"] for pod in pods} == {"flaky"}
    assert watch.bound_at_any_point() == {"flaky-worker-0", "flaky-worker-1"}
