"""Datasets on Kubernetes without a cluster: the operator's manager and staging gate, and the node agent's cache.

The operator runs on the in-memory API (``support.memory_kube_api``); node agents' cache reports
are fed to it as a Node watch would; the agent's keeper stages into a real cache directory from a real store.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_operator_loop import NS, Harness, pod_names, template

from phalanx.adapters.datasources import SourceRequest
from phalanx.adapters.kubernetes.api import (
    DATASETS,
    EVENTS,
    NODES,
    PODS,
    TRAININGJOBS,
)
from phalanx.adapters.kubernetes.cache_report import (
    CACHE_ANNOTATION,
    EVICT_ANNOTATION,
    CacheReport,
    HeldEntry,
    JobCacheState,
    eviction_request,
)
from phalanx.adapters.kubernetes.objects import job_from_object
from phalanx.adapters.kubernetes.rendering import DatasetVolumes, render_pod
from phalanx.core.data import DatasetCounters, entry_key
from phalanx.entrypoints.kubernetes import node_agent as agent_entrypoint
from phalanx.entrypoints.kubernetes import operator as operator_entrypoint
from phalanx.model.datasets import version_label
from phalanx.model.jobs import TrainingJob, TrainingJobStatus
from phalanx.model.loading import builtin_jobtypes, parse_dataset
from phalanx.services.dataset_store import DATASET_VERSIONS_ANNOTATION, materialize_version
from phalanx.services.kubernetes.apply import may_hold
from phalanx.services.kubernetes.datasets import KubeDatasetManager, SourcePolicy, nodes_holding
from phalanx.services.kubernetes.node_cache import CacheSettings, NodeCacheKeeper, node_patch
from phalanx.services.kubernetes.operations import cache_view
from support.memory_kube_api import MemoryKubeApi
from support.merge_patch import merge

FILES = {"a.bin": 4000, "b.bin": 1500, "c.bin": 1200, "sub/d.bin": 900}


def until(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def write_source(root: Path) -> Path:
    for name, size in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x" * size)
    return root


def materialise(store: Path, source: Path, name: str = "train") -> str:
    """Put a version of ``source`` into the store as the operator would; its version."""
    target = store / NS / name
    target.mkdir(parents=True, exist_ok=True)
    request = SourceRequest("path", path=str(source), field="spec.source.path")
    return materialize_version(request, target / ".incoming-test", source.parent, None).version


def dataset_object(name: str, source: dict[str, Any], distribution: str = "shard", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Dataset",
        "metadata": {"name": name, "namespace": NS, "generation": 1, "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {"source": source, "distribution": distribution},
        "status": status,
    }


def node_object(name: str, report: CacheReport | None) -> dict[str, Any]:
    annotations = {CACHE_ANNOTATION: report.to_annotation()} if report is not None else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations}}


def reader(workers: int = 2) -> dict[str, Any]:
    return {
        "type": "generic",
        "datasets": [{"name": "train"}],
        "replicas": {"worker": {"count": workers, "template": template()}},
    }


def place(harness: Harness, name: str, nodes: list[str]) -> None:
    """What the phalanx-scheduler does: one replica per node, Admitted."""
    obj = harness.job(name)
    status = obj.setdefault("status", {})
    status["placements"] = {f"{name}-worker-{i}": {"node": node, "gpus": [0]} for i, node in enumerate(nodes)}
    status["phase"] = "Admitted"
    harness.feed(harness.operator.jobs, harness.api.replace_status(TRAININGJOBS, obj))


# -- the cache report and the pure pieces ------------------------------------------------------------------------


def test_a_cache_report_reads_back_what_it_wrote_and_garbage_is_no_report() -> None:
    report = CacheReport(
        "/var/cache/phalanx/datasets",
        {"sha256-ab": "ready", "sha256-cd.shard-0-of-2": "staging"},
        {"ns/job": JobCacheState("u1", "waiting", "waiting for room")},
        capacity=100,
        used=40,
        held={
            "sha256-ab": HeldEntry("ns/imagenet", 30, ("ns/job",)),
            "sha256-cd.shard-0-of-2": HeldEntry("ns/text", 10),
        },
        counters={"ns/imagenet": DatasetCounters(hits=2, misses=1, bytes_from_cache=60, bytes_fetched=30, evictions=1)},
    )
    assert CacheReport.from_annotation(report.to_annotation()) == report
    assert report.to_annotation() == CacheReport.from_annotation(report.to_annotation()).to_annotation()  # type: ignore[union-attr]
    for garbage in (None, "", "{", "[]", '{"jobs": {"a": 1}}'):
        assert CacheReport.from_annotation(garbage) is None
    assert report.ready_keys() == {"sha256-ab"}
    view = cache_view(report, "n1")
    assert (view.node, view.capacity, view.used) == ("n1", 100, 40)
    assert [(e.key, e.dataset, e.bytes, e.state, e.pinned_by) for e in view.entries] == [
        ("sha256-ab", "ns/imagenet", 30, "ready", ("ns/job",)),
        ("sha256-cd.shard-0-of-2", "ns/text", 10, "staging", ()),
    ]
    assert view.counters["ns/imagenet"].hit_ratio == 2 / 3


def test_nodes_holding_a_version_count_whole_entries_and_shards() -> None:
    version = "sha256:" + "ab" * 32
    label = version_label(version)
    reports = {
        "a": CacheReport("/c", {label: "ready"}),
        "b": CacheReport("/c", {f"{label}.shard-1-of-2": "ready"}),
        "c": CacheReport("/c", {f"{label}.shard-0-of-2": "staging"}),
        "d": None,
        "e": CacheReport("/c", {label + "ff": "ready"}),
    }
    assert nodes_holding(version, reports) == ["a", "b"]


def test_the_node_patch_sets_dataset_labels_removes_stale_ones_and_leaves_the_rest() -> None:
    observed = {
        "metadata": {
            "labels": {"type": "kwok", "dataset.phalanx.dev/old": "sha256-1", "dataset.phalanx.dev/keep": "sha256-2"},
            "annotations": {"other": "x"},
        }
    }
    patch = node_patch(observed, {"dataset.phalanx.dev/keep": "sha256-2", "dataset.phalanx.dev/new": "sha256-3"}, "{}")
    assert patch == {
        "metadata": {
            "labels": {"dataset.phalanx.dev/old": None, "dataset.phalanx.dev/new": "sha256-3"},
            "annotations": {CACHE_ANNOTATION: "{}"},
        }
    }
    done = merge(observed, patch)
    assert node_patch(done, {"dataset.phalanx.dev/keep": "sha256-2", "dataset.phalanx.dev/new": "sha256-3"}, "{}") == {}


@pytest.mark.parametrize(
    ("source", "allowed"),
    [
        ({"path": "/data/mnist"}, True),
        ({"path": "/data/../etc"}, None),  # refused by the model already
        ({"path": "/var/run/secrets/kubernetes.io/serviceaccount"}, False),
        ({"path": "mnist"}, False),  # relative to the operator's directory, not under /data
        ({"url": "file:///var/run/secrets/token"}, False),
        ({"url": "file:///data/mnist/part-0.csv"}, True),
        ({"url": "https://example.org/data.csv"}, True),
        ({"sql": {"url": "sqlite:////etc/app.db", "query": "SELECT 1"}}, False),
        ({"sql": {"url": "sqlite:////data/app.db", "query": "SELECT 1"}}, True),
        ({"sql": {"url": "postgresql://db/x", "query": "SELECT 1"}}, True),
        ({"script": {"command": ["python", "make.py"]}}, False),
    ],
)
def test_the_operator_reads_local_files_only_under_its_directories_and_runs_no_scripts(
    source: dict[str, Any], allowed: bool | None
) -> None:
    document = dataset_object("d", source)
    try:
        dataset = parse_dataset({k: v for k, v in document.items() if k != "status"}, source="test")
    except Exception:
        assert allowed is None
        return
    refusal = SourcePolicy((Path("/data"),)).refusal(dataset, Path("/work"))
    assert (refusal is None) == allowed, refusal
    if refusal is not None:
        field = next(iter(source))
        assert refusal.startswith(f"spec.source.{field}")
        assert "--allow-" in refusal or "SQLite" in refusal


def test_scripts_run_only_when_allowed() -> None:
    dataset = parse_dataset(
        {k: v for k, v in dataset_object("d", {"script": {"command": ["make"]}}).items() if k != "status"}, source="t"
    )
    assert SourcePolicy(scripts=True).refusal(dataset, Path("/")) is None


def test_a_job_whose_data_is_staged_is_not_held_in_admitted() -> None:
    admitted, downloading = TrainingJobStatus(phase="Admitted"), TrainingJobStatus(phase="Downloading")
    assert may_hold(admitted, downloading)
    assert not may_hold(admitted, downloading, staging=True)
    assert may_hold(TrainingJobStatus(phase="Pending"), TrainingJobStatus(phase="Queued"), staging=True)


# -- the operator's gate ---------------------------------------------------------------------------------------


@pytest.fixture
def staged_cluster(tmp_path: Path) -> tuple[Harness, str]:
    """An operator with a dataset store holding one materialised version of ``train`` (sharded); its version."""
    store = tmp_path / "store"
    version = materialise(store, write_source(tmp_path / "source"))
    harness = Harness(MemoryKubeApi(), dataset_store=store)
    assert harness.operator.data is not None
    ready = dataset_object("train", {"path": "/data"}, phase="Ready", version=version, observedGeneration=1)
    harness.operator.data.datasets.observe(ready)
    return harness, version


def report_node(harness: Harness, node: str, report: CacheReport | None) -> None:
    assert harness.operator.data is not None
    obj = node_object(node, report)
    harness.operator.data.nodes.observe(obj)
    harness.operator.data._node_changed("MODIFIED", obj)


def ready_report(
    node_dir: str, job_uid: str, *keys: str, state: str = "ready", message: str | None = None
) -> CacheReport:
    return CacheReport(
        node_dir, {key: "ready" for key in keys}, {f"{NS}/reader": JobCacheState(job_uid, state, message)}
    )


def test_pods_are_created_only_once_every_node_reports_its_shard_ready(staged_cluster: tuple[Harness, str]) -> None:
    harness, version = staged_cluster
    harness.submit("reader", reader())
    harness.sync()
    place(harness, "reader", ["gpu-0", "gpu-1"])
    harness.sync()
    harness.sync()  # the first pass recorded the versions the job reads; this one plans from them
    job = harness.job("reader")
    assert json.loads(job["metadata"]["annotations"][DATASET_VERSIONS_ANNOTATION]) == {"train": version}
    assert job["status"]["phase"] == "Downloading", "written at once: it waits for its data"
    assert pod_names(harness) == []
    uid = job["metadata"]["uid"]
    shard = [entry_key(version, i, 2) for i in range(2)]

    report_node(harness, "gpu-0", ready_report("/host/a", uid, shard[0]))
    report_node(harness, "gpu-1", ready_report("/host/b", "an-older-job", shard[1]))  # another incarnation's
    harness.sync()
    assert pod_names(harness) == [], "gpu-1 has not staged this job"
    waits = [message for reason, message in harness.events() if reason == "StagingWaits"]
    assert waits and "gpu-1" in waits[-1] and "gpu-0" not in waits[-1]

    report_node(harness, "gpu-1", ready_report("/host/b", uid))  # its job ready, but the shard not held
    harness.sync()
    assert pod_names(harness) == []

    report_node(harness, "gpu-1", ready_report("/host/b", uid, shard[1]))
    harness.sync()
    assert pod_names(harness) == ["reader-worker-0", "reader-worker-1"]
    for index, host in enumerate(("/host/a", "/host/b")):
        pod = harness.api.get(PODS, f"reader-worker-{index}", NS)
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        inside = f"/var/cache/phalanx/datasets/{shard[index]}"
        assert env["PHALANX_DATASET_TRAIN_PATH"] == inside
        assert (env["PHALANX_DATASET_TRAIN_SHARD_INDEX"], env["PHALANX_DATASET_TRAIN_SHARD_COUNT"]) == (str(index), "2")
        assert env["PHALANX_DATASET_TRAIN_CACHE_POLICY"] == "noReplacement"
        assert {"name": "dataset-0", "hostPath": {"path": f"{host}/{shard[index]}", "type": "Directory"}} in pod[
            "spec"
        ]["volumes"]
        mounts = pod["spec"]["containers"][0]["volumeMounts"]
        assert {"name": "dataset-0", "mountPath": inside, "readOnly": True} in mounts


def test_a_node_that_cannot_stage_fails_the_job_with_its_sentence(staged_cluster: tuple[Harness, str]) -> None:
    harness, _ = staged_cluster
    harness.submit("reader", reader())
    harness.sync()
    place(harness, "reader", ["gpu-0", "gpu-1"])
    harness.sync()
    harness.sync()
    uid = harness.job("reader")["metadata"]["uid"]
    why = "default/train needs 5.0 MiB on node gpu-1 but its dataset cache holds 1.0 MiB in all: raise the cache size"
    report_node(harness, "gpu-1", ready_report("/c", uid, state="error", message=why))
    harness.sync()
    status = harness.job("reader")["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "StagingFailed")
    assert status["message"] == f"staging the job's data failed: node gpu-1: {why}"
    assert pod_names(harness) == []


def test_a_job_reading_a_missing_dataset_fails_naming_the_field(staged_cluster: tuple[Harness, str]) -> None:
    harness, _ = staged_cluster
    spec = reader(1)
    spec["datasets"] = [{"name": "nope"}]
    harness.submit("reader", spec)
    harness.sync()
    place(harness, "reader", ["gpu-0"])
    harness.sync()
    harness.sync()
    status = harness.job("reader")["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "StagingFailed")
    assert "spec.datasets[0]: dataset nope does not exist in namespace team-a" in status["message"]


def test_without_a_dataset_store_datasets_are_not_staged_and_the_job_is_told() -> None:
    harness = Harness()
    harness.submit("reader", reader(1))
    harness.sync()
    place(harness, "reader", ["gpu-0"])
    harness.sync()
    assert pod_names(harness) == ["reader-worker-0"]
    env = harness.api.get(PODS, "reader-worker-0", NS)["spec"]["containers"][0]["env"]
    assert not [e for e in env if e["name"].startswith("PHALANX_DATASET_")]
    assert [reason for reason in harness.reasons() if reason == "DatasetsNotStaged"] == ["DatasetsNotStaged"]


# -- the operator's materialisation -----------------------------------------------------------------------------


def manager_for(tmp_path: Path, api: MemoryKubeApi, **options: Any) -> KubeDatasetManager:
    return KubeDatasetManager(api, tmp_path / "store", base_dir=tmp_path, **options)


def create_dataset(api: MemoryKubeApi, manager: KubeDatasetManager, name: str, source: dict[str, Any]) -> None:
    body = dataset_object(name, source)
    del body["status"]
    manager.datasets.observe(api.create(DATASETS, body))


def stored(api: MemoryKubeApi, name: str) -> dict[str, Any]:
    return api.get(DATASETS, name, NS)


def test_a_dataset_is_materialised_once_into_the_store_with_its_status(tmp_path: Path) -> None:
    api = MemoryKubeApi()
    source = write_source(tmp_path / "source")
    manager = manager_for(tmp_path, api, policy=SourcePolicy((source,)))
    create_dataset(api, manager, "train", {"path": str(source)})
    manager.sync()
    assert stored(api, "train")["status"]["phase"] == "Materializing"

    def ready() -> bool:
        manager.sync()
        return stored(api, "train")["status"]["phase"] == "Ready"

    until(ready)
    status = stored(api, "train")["status"]
    assert (status["files"], status["bytes"], status["observedGeneration"]) == (len(FILES), sum(FILES.values()), 1)
    label = version_label(status["version"])
    assert {p.name for p in (tmp_path / "store" / NS / "train").iterdir()} == {label, f"{label}.json"}
    writes = len(api.writes_to("datasets"))
    manager.sync()
    assert len(api.writes_to("datasets")) == writes, "a Ready generation is not materialised again"
    assert [e["reason"] for e in api.of(EVENTS)] == ["Materializing", "Materialized"]

    # Its nodes: those whose cache report holds the version, whole or a shard.
    manager.nodes.observe(node_object("n1", CacheReport("/c", {f"{label}.shard-0-of-2": "ready"})))
    manager.sync()
    assert stored(api, "train")["status"]["nodes"] == ["n1"]

    # Deleted: its copies leave the store.
    api.delete(DATASETS, "train", NS)
    manager.datasets.forget(NS, "train")
    manager.datasets._synced.set()
    manager.sync()
    assert not (tmp_path / "store" / NS / "train").exists()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"path": "/etc"}, "spec.source.path: /etc is not under a directory phalanx-operator may read"),
        ({"url": "http://127.0.0.1:9/none.csv"}, "spec.source.url: cannot connect"),
    ],
)
def test_a_dataset_that_cannot_be_read_fails_with_the_field_and_the_fix(
    tmp_path: Path, source: dict[str, Any], expected: str
) -> None:
    api = MemoryKubeApi()
    manager = manager_for(tmp_path, api)
    create_dataset(api, manager, "d", source)

    def failed() -> bool:
        manager.sync()
        return stored(api, "d").get("status", {}).get("phase") == "Failed"

    until(failed)
    status = stored(api, "d")["status"]
    assert status["message"].startswith(expected) and status["observedGeneration"] == 1
    assert [e["reason"] for e in api.of(EVENTS)][-1] == "MaterializeFailed"


def _job_with(phase: str, artifacts: str | None, message: str = "") -> TrainingJob:
    job = TrainingJob.model_validate(
        {"metadata": {"name": "train", "namespace": NS}, "spec": {"replicas": {"worker": {"template": template()}}}}
    )
    status = TrainingJobStatus(phase=phase, artifacts=artifacts, message=message)
    return job.model_copy(update={"status": status})


def test_a_dataset_from_a_job_waits_for_it_then_reads_where_its_outputs_were_stored(tmp_path: Path) -> None:
    api = MemoryKubeApi()
    jobs: dict[str, TrainingJob] = {}
    manager = manager_for(tmp_path, api, jobs=lambda namespace, name: jobs.get(name) if namespace == NS else None)
    create_dataset(api, manager, "model", {"fromJob": {"job": "train", "output": "weights"}})
    manager.sync()
    assert stored(api, "model").get("status", {}).get("phase") != "Failed"
    assert "waiting for job train" in stored(api, "model")["status"]["message"]

    outputs = write_source(tmp_path / "store-of-outputs" / NS / "train" / "weights").parent
    jobs["train"] = _job_with("Succeeded", str(outputs), "outputs stored")

    def ready() -> bool:
        manager.sync()
        return stored(api, "model").get("status", {}).get("phase") == "Ready"

    until(ready)
    status = stored(api, "model")["status"]
    assert status["files"] == len(FILES) and status["bytes"] == sum(FILES.values())


def test_a_dataset_from_a_job_whose_outputs_were_not_stored_fails_saying_so(tmp_path: Path) -> None:
    api = MemoryKubeApi()
    job = _job_with("Succeeded", None, "outputs not stored: the operator has no artifact store")
    manager = manager_for(tmp_path, api, jobs=lambda namespace, name: job)
    create_dataset(api, manager, "model", {"fromJob": {"job": "train"}})

    def failed() -> bool:
        manager.sync()
        return stored(api, "model").get("status", {}).get("phase") == "Failed"

    until(failed)
    message = stored(api, "model")["status"]["message"]
    assert message.startswith("spec.source.fromJob.job: job train succeeded but its outputs were not stored"), message
    assert "no artifact store" in message


# -- the node agent's cache -------------------------------------------------------------------------------------


def keeper_for(tmp_path: Path, api: MemoryKubeApi, capacity: int | None = 1 << 20) -> NodeCacheKeeper:
    keeper = NodeCacheKeeper(
        api,
        CacheSettings(
            "gpu-0",
            tmp_path / "cache",
            tmp_path / "store",
            capacity=capacity,
            host_dir="/host/cache",
            sample_dir=tmp_path / "samples",
            sample_host_dir="/host/samples",
        ),
    )
    for jobtype in builtin_jobtypes().values():
        body = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "JobType", **jobtype.to_dict()}
        body["metadata"] = {**body["metadata"], "resourceVersion": "1"}
        keeper.jobtypes.observe(body)
    return keeper


def agent_cluster(tmp_path: Path) -> tuple[MemoryKubeApi, str, dict[str, Any]]:
    api = MemoryKubeApi()
    api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-0", "labels": {"type": "kwok"}}})
    version = materialise(tmp_path / "store", write_source(tmp_path / "source"))
    job = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "reader", "namespace": NS, "uid": "job-uid", "resourceVersion": "5", "generation": 1},
        "spec": reader(),
        "status": {
            "phase": "Downloading",
            "placements": {"reader-worker-0": {"node": "gpu-0"}, "reader-worker-1": {"node": "gpu-1"}},
        },
    }
    return api, version, job


def run_until(keeper: NodeCacheKeeper, predicate: Callable[[CacheReport], bool]) -> CacheReport:
    found: list[CacheReport] = []

    def check() -> bool:
        found.append(keeper.cycle())
        return predicate(found[-1])

    until(check)
    return found[-1]


def test_the_agent_stages_its_shard_pins_it_and_reports_it_on_its_node(tmp_path: Path) -> None:
    api, version, job = agent_cluster(tmp_path)
    keeper = keeper_for(tmp_path, api)
    keeper.datasets.observe(dataset_object("train", {"path": "/data"}, phase="Ready", version=version))
    keeper.jobs.observe(job)
    report = run_until(keeper, lambda r: r.jobs[f"{NS}/reader"].state == "ready")
    key = entry_key(version, 0, 2)
    assert report.entries == {key: "ready"} and report.directory == "/host/cache"
    assert report.jobs[f"{NS}/reader"] == JobCacheState("job-uid", "ready")
    # The namespace's sample directory, for SampleCache.for_dataset, writable by the replicas' users.
    assert report.samples == "/host/samples"
    assert (tmp_path / "samples" / NS).stat().st_mode & 0o7777 == 0o1777
    held = {str(p.relative_to(tmp_path / "cache" / key)) for p in (tmp_path / "cache" / key).rglob("*") if p.is_file()}
    assert held and held < set(FILES), "one shard of two: some files, not all"
    (entry,) = keeper.cache.entries()
    assert entry.pinned_by == (f"{NS}/reader",)
    node = api.get(NODES, "gpu-0")
    assert node["metadata"]["labels"] == {"type": "kwok", "dataset.phalanx.dev/train": version_label(version)}
    assert CacheReport.from_annotation(node["metadata"]["annotations"][CACHE_ANNOTATION]) == report
    # The entry is ready in the copy's thread; the event comes from the pass that collects the copy, which under
    # load may be the next one (the fresh-clone gate saw [] here): wait for it, do not race it.
    run_until(keeper, lambda _: bool(api.of(EVENTS)))
    assert [e["reason"] for e in api.of(EVENTS)] == ["Staged"]

    # The job finishes: unpinned, still cached and labelled (evictable).
    keeper.jobs.observe(
        {**job, "metadata": {**job["metadata"], "resourceVersion": "6"}, "status": {"phase": "Succeeded"}}
    )
    report = keeper.cycle()
    assert report.jobs == {} and report.entries == {key: "ready"}
    assert keeper.cache.entries()[0].pinned_by == ()

    # A restarted agent drops what an interrupted copy left and reports the same.
    (tmp_path / "cache" / f".incoming-{key}-dead").mkdir()
    again = keeper_for(tmp_path, api)
    again.datasets.observe(dataset_object("train", {"path": "/data"}, phase="Ready", version=version))
    assert again.cycle().entries == {key: "ready"}
    assert not (tmp_path / "cache" / f".incoming-{key}-dead").exists()


def staged_keeper(tmp_path: Path) -> tuple[MemoryKubeApi, str, dict[str, Any], NodeCacheKeeper]:
    """An agent whose node runs the job ``reader``, its shard staged and pinned."""
    api, version, job = agent_cluster(tmp_path)
    keeper = keeper_for(tmp_path, api)
    keeper.datasets.observe(dataset_object("train", {"path": "/data"}, phase="Ready", version=version))
    keeper.jobs.observe(job)
    run_until(keeper, lambda r: r.jobs[f"{NS}/reader"].state == "ready")
    return api, version, job, keeper


def test_a_second_job_reading_a_held_entry_is_a_cache_hit_counted_once(tmp_path: Path) -> None:
    api, version, job, keeper = staged_keeper(tmp_path)
    key = entry_key(version, 0, 2)
    second = copy.deepcopy(job)
    second["metadata"].update(name="again", uid="uid-again")
    second["status"]["placements"] = {"again-worker-0": {"node": "gpu-0"}, "again-worker-1": {"node": "gpu-1"}}
    keeper.jobs.observe(second)
    report = run_until(keeper, lambda r: f"{NS}/again" in r.jobs and f"{NS}/again" in r.held[key].pinned_by)
    until(lambda: keeper.cycle().counters[f"{NS}/train"].hits == 1)

    def staged() -> list[str]:
        return [e["message"] for e in api.of(EVENTS) if e["reason"] == "Staged"]

    # The cache counts the hit inside the copy's thread; the event is recorded by the pass that collects the
    # finished copy, which under load may come a few passes later: wait for it rather than count passes.
    until(lambda: keeper.cycle() and len(staged()) >= 2)
    for _ in range(3):  # later passes (and the first job, staged already) count nothing more
        report = keeper.cycle()
    counters = report.counters[f"{NS}/train"]
    assert (counters.misses, counters.hits) == (1, 1)
    assert report.held[key].pinned_by == (f"{NS}/again", f"{NS}/reader")
    assert len(staged()) == 2 and staged()[-1].endswith("cache hit")


def test_an_eviction_request_evicts_what_no_job_pins_keeps_the_rest_and_is_removed(tmp_path: Path) -> None:
    api, version, job, keeper = staged_keeper(tmp_path)
    key = entry_key(version, 0, 2)

    def request(keys: list[str]) -> None:
        node = api.patch(NODES, "gpu-0", {"metadata": {"annotations": {EVICT_ANNOTATION: json.dumps(keys)}}})
        keeper.node.observe(node)
        assert eviction_request(node) == keys

    # The running job pins its entry: the agent keeps it, says why, and removes the request.
    request([key, "sha256-gone"])
    report = keeper.cycle()
    assert set(report.held) == {key} and "in use by" in report.refused[key] and f"{NS}/reader" in report.refused[key]
    node = api.get(NODES, "gpu-0")
    assert eviction_request(node) is None
    assert CacheReport.from_annotation(node["metadata"]["annotations"][CACHE_ANNOTATION]) == report

    # The job finished: the next request evicts the entry, its files and its label.
    keeper.jobs.observe(
        {**job, "metadata": {**job["metadata"], "resourceVersion": "6"}, "status": {"phase": "Succeeded"}}
    )
    keeper.node.observe(node)
    request([key])
    report = keeper.cycle()
    assert report.held == {} and report.refused == {} and report.counters[f"{NS}/train"].evictions == 1
    assert not (tmp_path / "cache" / key).exists()
    node = api.get(NODES, "gpu-0")
    assert eviction_request(node) is None and "dataset.phalanx.dev/train" not in node["metadata"]["labels"]


def test_a_request_made_while_the_agent_answers_another_is_not_lost(tmp_path: Path) -> None:
    api, _, _, keeper = staged_keeper(tmp_path)
    keeper.node.observe(api.patch(NODES, "gpu-0", {"metadata": {"annotations": {EVICT_ANNOTATION: '["a"]'}}}))
    # Another request lands after the agent read the first: its removal (on the old resourceVersion) conflicts.
    api.patch(NODES, "gpu-0", {"metadata": {"annotations": {EVICT_ANNOTATION: '["a", "b"]'}}})
    keeper.cycle()
    assert eviction_request(api.get(NODES, "gpu-0")) == ["a", "b"], "the newer request stays for the next pass"
    keeper.node.observe(api.get(NODES, "gpu-0"))
    keeper.cycle()
    assert eviction_request(api.get(NODES, "gpu-0")) is None


def test_a_sample_directory_that_cannot_be_made_fails_the_job_on_this_node(tmp_path: Path) -> None:
    api, version, job = agent_cluster(tmp_path)
    (tmp_path / "samples").write_text("a file where the directory should be")
    keeper = keeper_for(tmp_path, api)
    keeper.datasets.observe(dataset_object("train", {"path": "/data"}, phase="Ready", version=version))
    keeper.jobs.observe(job)
    state = keeper.cycle().jobs[f"{NS}/reader"]
    assert state.state == "error" and state.message is not None
    assert "cannot make the sample cache directory" in state.message and "--sample-dir" in state.message


def test_an_entry_larger_than_the_cache_fails_the_job_on_this_node_with_the_cache_sentence(tmp_path: Path) -> None:
    api, version, job = agent_cluster(tmp_path)
    keeper = keeper_for(tmp_path, api, capacity=1000)
    keeper.datasets.observe(dataset_object("train", {"path": "/data"}, phase="Ready", version=version))
    keeper.jobs.observe(job)
    report = run_until(keeper, lambda r: r.jobs[f"{NS}/reader"].state == "error")
    message = report.jobs[f"{NS}/reader"].message or ""
    assert "needs" in message and "on node gpu-0 but its dataset cache holds" in message
    assert "raise the cache size" in message
    assert "dataset.phalanx.dev/train" not in api.get(NODES, "gpu-0")["metadata"]["labels"]


def test_a_job_whose_dataset_is_not_materialised_yet_waits(tmp_path: Path) -> None:
    api, _, job = agent_cluster(tmp_path)
    keeper = keeper_for(tmp_path, api)
    keeper.datasets.observe(dataset_object("train", {"path": "/data"}, phase="Materializing", message="10 MiB"))
    keeper.jobs.observe(job)
    state = keeper.cycle().jobs[f"{NS}/reader"]
    assert state.state == "waiting" and state.message == "waiting for dataset train to materialise (10 MiB)"


# -- rendering and the command lines -----------------------------------------------------------------------------


def test_the_agent_and_operator_command_lines_take_the_dataset_flags(tmp_path: Path) -> None:
    args = agent_entrypoint.build_parser().parse_args(
        ["--node-name", "n", "--dataset-store", str(tmp_path), "--cache-size", "50Gi"]
    )
    assert (args.dataset_store, args.cache_size, str(args.cache_dir)) == (
        tmp_path,
        50 << 30,
        "/var/cache/phalanx/datasets",
    )
    with pytest.raises(SystemExit):
        agent_entrypoint.build_parser().parse_args(["--cache-size", "lots"])
    args = operator_entrypoint.build_parser().parse_args(
        ["--dataset-store", str(tmp_path), "--allow-path-under", "/a", "--allow-path-under", "/b"]
    )
    assert args.allow_path_under == [Path("/a"), Path("/b")] and not args.allow_script_sources


def test_dataset_volumes_are_read_only_host_paths_with_their_environment() -> None:
    jobtypes = {name: jt for name, jt in builtin_jobtypes().items()}
    obj = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "r", "namespace": NS, "uid": "u"},
        "spec": reader(1),
    }
    job = job_from_object(obj, jobtypes)
    volumes = DatasetVolumes(
        {"PHALANX_DATASET_TRAIN_PATH": "/d/k"}, (("/host/k", "/d/k"), ("/host/j", "/d/j")), samples="/host/s/ns"
    )
    pod = render_pod(job, jobtypes["generic"], "worker", 0, 0, datasets=volumes)
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["PHALANX_DATASET_TRAIN_PATH"] == "/d/k"
    assert env["PHALANX_SAMPLE_CACHE_DIR"] == "/var/cache/phalanx/samples"
    assert pod["spec"]["volumes"][-3:] == [
        {"name": "dataset-0", "hostPath": {"path": "/host/k", "type": "Directory"}},
        {"name": "dataset-1", "hostPath": {"path": "/host/j", "type": "Directory"}},
        {"name": "samples", "hostPath": {"path": "/host/s/ns", "type": "Directory"}},
    ]
    assert pod["spec"]["containers"][0]["volumeMounts"][-3:] == [
        {"name": "dataset-0", "mountPath": "/d/k", "readOnly": True},
        {"name": "dataset-1", "mountPath": "/d/j", "readOnly": True},
        {"name": "samples", "mountPath": "/var/cache/phalanx/samples"},
    ]
    # Without a sample directory from the agent, no sample cache.
    plain = render_pod(job, jobtypes["generic"], "worker", 0, 0, datasets=DatasetVolumes({}, ()))
    assert "PHALANX_SAMPLE_CACHE_DIR" not in {e["name"] for e in plain["spec"]["containers"][0]["env"]}


def test_an_install_with_a_dataset_store_mounts_it_and_the_node_cache_and_one_without_changes_nothing() -> None:
    from phalanx.adapters.kubernetes.manifests import InstallParameters, install_manifests

    plain = install_manifests(InstallParameters(image="p:1", namespace="ml"))
    # The only volumes of a plain install are the operator's state directory (an emptyDir: sweeps' studies,
    # pipelines' artifacts) and the scheduler's configuration file (a ConfigMap), no data.
    volumes = [
        volume
        for d in plain
        if d["kind"] in ("Deployment", "DaemonSet")
        for volume in d["spec"]["template"]["spec"].get("volumes", [])
    ]
    assert volumes == [
        {"name": "state", "emptyDir": {}},
        {"name": "config", "configMap": {"name": "phalanx-scheduler-config"}},
    ]
    documents = install_manifests(InstallParameters(image="p:1", namespace="ml", dataset_store_claim="datasets"))
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in documents}
    labels = by_name[("Namespace", "ml")]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged", "hostPath needs it"
    operator = by_name[("Deployment", "phalanx-operator")]["spec"]["template"]["spec"]
    assert operator["volumes"] == [
        {"name": "dataset-store", "persistentVolumeClaim": {"claimName": "datasets"}},
        {"name": "state", "emptyDir": {}},
    ]
    env = {e["name"]: e.get("value") for e in operator["containers"][0]["env"]}
    assert env["PHALANX_DATASET_STORE"] == "/var/lib/phalanx/datasets/store"
    args = operator_entrypoint.build_parser().parse_args(operator["containers"][0]["args"])
    assert args.allow_path_under == [Path("/var/lib/phalanx/datasets/sources")]
    agent = by_name[("DaemonSet", "phalanx-node-agent")]["spec"]["template"]["spec"]
    container = agent["containers"][0]
    parsed = agent_entrypoint.build_parser().parse_args(["--node-name", "n", *container["args"]])
    assert parsed.dataset_store == Path("/var/lib/phalanx/datasets/store")
    assert str(parsed.cache_dir) == "/var/cache/phalanx/datasets" and not parsed.gpu_resource
    assert str(parsed.sample_dir) == "/var/cache/phalanx/samples"
    assert {
        "name": "sample-cache",
        "hostPath": {"path": "/var/cache/phalanx/samples", "type": "DirectoryOrCreate"},
    } in agent["volumes"]
    assert {
        "name": "dataset-cache",
        "hostPath": {"path": "/var/cache/phalanx/datasets", "type": "DirectoryOrCreate"},
    } in (agent["volumes"])
    assert {"name": "dataset-store", "mountPath": "/var/lib/phalanx/datasets", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_a_copy_that_only_evicting_a_pinned_entry_could_fit_waits_until_its_holder_leaves(tmp_path: Path) -> None:
    api, version_a, job_a = agent_cluster(tmp_path)
    other = write_source(tmp_path / "other")
    (other / "extra.bin").write_bytes(b"y" * 10)
    version_b = materialise(tmp_path / "store", other, "other")
    keeper = keeper_for(tmp_path, api, capacity=sum(FILES.values()) + 100)  # room for one of the two
    keeper.datasets.observe(dataset_object("train", {"path": "/a"}, "replicate", phase="Ready", version=version_a))
    keeper.datasets.observe(dataset_object("other", {"path": "/b"}, "replicate", phase="Ready", version=version_b))
    job_a["status"]["placements"] = {"reader-worker-0": {"node": "gpu-0"}}
    job_a["spec"] = reader(1)
    keeper.jobs.observe(job_a)
    run_until(keeper, lambda r: r.jobs[f"{NS}/reader"].state == "ready")
    job_b = copy.deepcopy(job_a)
    job_b["metadata"].update(name="second", uid="uid-b")
    job_b["spec"]["datasets"] = [{"name": "other"}]
    job_b["status"]["placements"] = {"second-worker-0": {"node": "gpu-0"}}
    keeper.jobs.observe(job_b)
    report = run_until(keeper, lambda r: r.jobs[f"{NS}/second"].state == "waiting")
    assert "waiting for room in node gpu-0's dataset cache" in (report.jobs[f"{NS}/second"].message or "")
    assert f"{NS}/reader" in (report.jobs[f"{NS}/second"].message or "")
    assert report.entries[version_label(version_b)] == "waiting"

    done = copy.deepcopy(job_a)
    done["metadata"]["resourceVersion"] = "9"
    done["status"] = {"phase": "Succeeded"}
    keeper.jobs.observe(done)
    report = run_until(keeper, lambda r: r.jobs[f"{NS}/second"].state == "ready")
    assert report.entries == {version_label(version_b): "ready"}, "the unpinned entry made room"
