"""The operator's sweeps and pipeline runs (``services.kubernetes.flows``) over an in-memory API: the cached port
the controllers read, its writes seen by the next pass before any watch event, which changes wake which thread,
and where the state lives.

No informer threads: the caches are fed by hand, as a watch would feed them, so a test sees exactly what a pass
reads. The controllers are the ones both backends run; their own behaviour is tested in tests/unit/sweeps and
tests/unit/pipelines.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest

from phalanx.adapters.kubernetes.api import PIPELINERUNS, PIPELINES, TRAININGJOBS
from phalanx.adapters.kubernetes.informer import Informer
from phalanx.adapters.kubernetes.objects import object_body
from phalanx.core.clock import VirtualClock
from phalanx.entrypoints.kubernetes.operator import build_parser
from phalanx.model.jobs import TrainingJob
from phalanx.model.pipelines import Pipeline, PipelineRun, parse_pipeline, parse_pipeline_run
from phalanx.services.kubernetes.flows import DEFAULT_STATE_DIR, FlowSettings
from phalanx.services.kubernetes.operator import KubeOperator
from phalanx.services.kubernetes.reconcile import OperatorSettings
from phalanx.services.operations import OperationError
from support.memory_kube_api import MemoryKubeApi

NS = "team-a"
ECHO = {
    "name": "echo",
    "inputs": [{"name": "n", "type": "Integer"}],
    "implementation": {"container": {"image": "example.org/echo:1", "command": ["echo", {"inputValue": "n"}]}},
}


def operator(api: MemoryKubeApi, tmp_path: Path) -> KubeOperator:
    settings = OperatorSettings(workers=2, resync_s=3600.0, flows=FlowSettings(state_dir=tmp_path))
    made = KubeOperator(api, settings, VirtualClock())
    made.seed_jobtypes()  # as at start: the built-in JobTypes the step jobs name, stored and cached
    made.queue.take(0.0, set)  # the first pass, which looks at every job: later passes take what changed
    return made


def feed(informer: Informer, obj: dict[str, Any]) -> None:
    """What a watch event does: the object into the cache, the informer's consumers told."""
    informer.observe(copy.deepcopy(obj))
    if informer.on_change is not None:
        informer.on_change("MODIFIED", obj)


def store(api: MemoryKubeApi, informer: Informer, obj: Pipeline | PipelineRun) -> dict[str, Any]:
    resource = PIPELINES if isinstance(obj, Pipeline) else PIPELINERUNS
    created = api.create(resource, object_body(obj, namespaced=True), NS)
    feed(informer, created)
    return created


def pipeline() -> Pipeline:
    return parse_pipeline(
        {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "Pipeline",
            "metadata": {"name": "fan", "namespace": NS},
            "spec": {
                "steps": [
                    {
                        "name": "shards",
                        "component": {"inline": ECHO},
                        "parallelFor": {"items": [1, 2]},
                        "arguments": {"n": "{{item}}"},
                    }
                ]
            },
        }
    )


def run(name: str = "first") -> PipelineRun:
    return parse_pipeline_run(
        {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "PipelineRun",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"pipelineRef": {"name": "fan"}},
        }
    )


# -- the wiring ----------------------------------------------------------------------------------------------------


def test_the_operator_runs_both_controllers_over_its_own_caches(tmp_path: Path) -> None:
    op = operator(MemoryKubeApi(), tmp_path)
    flows = op.flows
    assert flows is not None and flows.pipeline_controller is not None
    assert {flows.sweeps, flows.pipelines, flows.runs} <= set(op.informers)  # synced with the others at start
    # One cache of jobs and JobTypes per operator: the controllers read the reconcile loop's.
    assert flows.backend.informers[TrainingJob] is op.jobs
    assert flows.backend.component == "phalanx-operator"


def test_an_install_without_the_new_kinds_runs_jobs_and_says_why_sweeps_wait(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        op = operator(MemoryKubeApi(unserved={"pipelineruns.phalanx.dev"}), tmp_path)
    assert op.flows is None
    assert "phalanx install --print | kubectl apply -f -" in caplog.text
    assert op.jobs in op.informers  # the jobs themselves still run


def test_an_operator_without_flow_settings_runs_no_controller() -> None:
    op = KubeOperator(MemoryKubeApi(), OperatorSettings(workers=2), VirtualClock())
    assert op.flows is None and len(op.informers) == 6  # the reconcile loop's own caches, no more


@pytest.mark.parametrize(
    ("labels", "sweeps", "pipelines"),
    [
        pytest.param({"phalanx.dev/sweep": "lr"}, True, False, id="trial"),
        pytest.param({"phalanx.dev/pipelinerun": "first"}, False, True, id="step"),
        pytest.param({"team": "a"}, False, False, id="a user's job"),
    ],
)
def test_a_job_change_wakes_the_controller_whose_job_it_is(
    tmp_path: Path, labels: dict[str, str], sweeps: bool, pipelines: bool
) -> None:
    op = operator(MemoryKubeApi(), tmp_path)
    assert op.flows is not None
    meta = {"name": "j", "namespace": NS, "labels": labels, "resourceVersion": "1"}
    feed(op.jobs, {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": meta, "spec": {}})
    assert op.flows.sweep_signal.wait(0) is sweeps
    assert op.flows.pipeline_signal.wait(0) is pipelines
    assert op.queue.take(0.0, set) == {(NS, "j")}  # and the operator reconciles it, as any job


# -- the cached port -----------------------------------------------------------------------------------------------


def test_reads_come_from_the_caches_without_a_request(tmp_path: Path) -> None:
    api = MemoryKubeApi()
    op = operator(api, tmp_path)
    assert op.flows is not None
    store(api, op.flows.pipelines, pipeline())
    store(api, op.flows.runs, run())
    before = len(api.calls)
    backend = op.flows.backend
    assert [p.metadata.name for p in backend.list(Pipeline)] == ["fan"]
    assert [r.metadata.name for r in backend.list(PipelineRun, NS)] == ["first"]
    assert backend.list(PipelineRun, "elsewhere") == []
    assert backend.get(Pipeline, NS, "fan") is not None and backend.get(Pipeline, NS, "other") is None
    assert len(api.calls) == before


def test_an_unreadable_object_is_left_out_of_a_list_and_named_by_a_get(tmp_path: Path) -> None:
    op = operator(MemoryKubeApi(), tmp_path)
    assert op.flows is not None
    broken = object_body(run("broken"), namespaced=True)
    broken["spec"] = {"arguments": {}}  # neither pipelineRef nor pipelineSpec: written with kubectl past the door
    broken["metadata"].update(uid="u1", resourceVersion="7")
    feed(op.flows.runs, broken)
    assert op.flows.backend.list(PipelineRun) == []
    with pytest.raises(OperationError, match=r"(?s)^pipelinerun team-a/broken cannot be read: .*give exactly one of"):
        op.flows.backend.get(PipelineRun, NS, "broken")


def test_a_step_job_created_in_one_pass_is_seen_by_the_next_before_its_watch_event(tmp_path: Path) -> None:
    # No watch runs here: only the port's own writes reach the caches. Were the job not seen, the next pass would
    # take the Running step for one whose job is gone and fail it.
    api = MemoryKubeApi()
    op = operator(api, tmp_path)
    assert op.flows is not None and op.flows.pipeline_controller is not None
    store(api, op.flows.pipelines, pipeline())
    store(api, op.flows.runs, run())
    controller = op.flows.pipeline_controller

    assert controller.sync()  # fans out
    for _ in range(3):
        controller.sync()
    created = sorted(obj["metadata"]["name"] for obj in api.of(TRAININGJOBS))
    assert created == ["first-shards-0-1", "first-shards-1-1"]
    assert sorted(obj["metadata"]["name"] for obj in op.jobs.items()) == created
    status = op.flows.backend.get(PipelineRun, NS, "first")
    assert status is not None
    assert [(i.step, i.item, str(i.phase)) for i in status.status.instances] == [
        ("shards", 0, "Running"),
        ("shards", 1, "Running"),
    ]
    # The operator's queue has the new jobs: they are reconciled now, not at the next resync.
    assert {(NS, name) for name in created} <= op.queue.take(0.0, set)


def test_a_deleted_object_leaves_the_cache_at_once(tmp_path: Path) -> None:
    api = MemoryKubeApi()
    op = operator(api, tmp_path)
    assert op.flows is not None
    created = store(api, op.flows.runs, run())
    op.flows.backend.delete(PipelineRun, NS, "first", uid=created["metadata"]["uid"])
    assert op.flows.runs.get(NS, "first") is None and op.flows.backend.list(PipelineRun) == []


# -- where the state lives -------------------------------------------------------------------------------------------


def test_the_studies_and_artifacts_default_to_the_state_directory(tmp_path: Path) -> None:
    settings = FlowSettings(state_dir=tmp_path)
    assert settings.study_url == f"sqlite:///{tmp_path}/sweeps.db"
    assert settings.artifacts_url == str(tmp_path / "artifacts")
    given = FlowSettings(sweep_storage="postgresql+psycopg://u@db/sweeps", artifact_store="s3://bucket/runs")
    assert (given.study_url, given.artifacts_url) == ("postgresql+psycopg://u@db/sweeps", "s3://bucket/runs")


def test_the_operator_takes_its_storage_from_flags_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PHALANX_STATE_DIR", "PHALANX_SWEEP_STORAGE", "PHALANX_ARTIFACT_STORE"):
        monkeypatch.delenv(name, raising=False)
    defaults = build_parser().parse_args([])
    assert (defaults.state_dir, defaults.sweep_storage, defaults.artifact_store) == (DEFAULT_STATE_DIR, None, None)
    monkeypatch.setenv("PHALANX_STATE_DIR", "/data/op")
    monkeypatch.setenv("PHALANX_SWEEP_STORAGE", "postgresql+psycopg://u@db/sweeps")
    from_env = build_parser().parse_args([])
    assert (from_env.state_dir, from_env.sweep_storage) == (Path("/data/op"), "postgresql+psycopg://u@db/sweeps")
    flags = build_parser().parse_args(["--artifact-store", "s3://b/p", "--sweep-storage", "sqlite:////x.db"])
    assert (flags.artifact_store, flags.sweep_storage) == ("s3://b/p", "sqlite:////x.db")


def test_an_unusable_artifact_store_leaves_pipeline_runs_waiting_and_sweeps_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api = MemoryKubeApi()
    with caplog.at_level(logging.ERROR):
        op = KubeOperator(
            api,
            OperatorSettings(workers=2, flows=FlowSettings(state_dir=tmp_path, artifact_store="nosuchscheme://x")),
            VirtualClock(),
        )
    assert op.flows is not None and op.flows.pipeline_controller is None
    assert op.flows.sweep_controller is not None
    assert "pipeline runs wait: the artifact store nosuchscheme://x cannot be used" in caplog.text


def test_the_artifact_volume_claim_comes_from_the_flag_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHALANX_ARTIFACT_VOLUME_CLAIM", raising=False)
    assert build_parser().parse_args([]).artifact_volume_claim is None
    monkeypatch.setenv("PHALANX_ARTIFACT_VOLUME_CLAIM", "from-env")
    assert build_parser().parse_args([]).artifact_volume_claim == "from-env"
    flags = build_parser().parse_args(["--artifact-volume-claim", "artifacts"])
    assert flags.artifact_volume_claim == "artifacts"


def test_with_a_claim_the_step_jobs_mount_it_at_the_store_and_the_operator_warns_of_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api = MemoryKubeApi()
    settings = FlowSettings(state_dir=tmp_path, artifact_volume_claim="artifacts")
    with caplog.at_level(logging.WARNING):
        op = KubeOperator(api, OperatorSettings(workers=2, resync_s=3600.0, flows=settings), VirtualClock())
    assert "pipeline steps with file inputs or outputs will fail" not in caplog.text
    op.seed_jobtypes()
    assert op.flows is not None and op.flows.pipeline_controller is not None
    store(api, op.flows.pipelines, pipeline())
    store(api, op.flows.runs, run())
    for _ in range(3):
        op.flows.pipeline_controller.sync()
    job = next(obj for obj in api.of(TRAININGJOBS) if obj["metadata"]["name"] == "first-shards-0-1")
    template = job["spec"]["replicas"]["worker"]["template"]
    assert template["volumes"] == [{"name": "pipeline-artifacts", "persistentVolumeClaim": {"claimName": "artifacts"}}]
    assert template["volumeMounts"] == [{"name": "pipeline-artifacts", "mountPath": str(tmp_path / "artifacts")}]


@pytest.mark.parametrize(
    ("store_url", "why"),
    [(None, "is its own directory, which Pods cannot see"), ("memory://ops", "is an object store")],
)
def test_without_a_usable_store_for_pods_the_operator_says_so_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, store_url: str | None, why: str
) -> None:
    settings = FlowSettings(state_dir=tmp_path, artifact_store=store_url)
    with caplog.at_level(logging.WARNING):
        op = KubeOperator(MemoryKubeApi(), OperatorSettings(workers=2, flows=settings), VirtualClock())
    assert op.flows is not None and op.flows.pipeline_controller is not None  # parameter-only steps still run
    assert "pipeline steps with file inputs or outputs will fail: the operator's artifact store" in caplog.text
    assert why in caplog.text and "--artifact-volume-claim" in caplog.text
