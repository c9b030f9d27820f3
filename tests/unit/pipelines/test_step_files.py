"""How step jobs see the artifact store (``core.pipelines.step_files``), decided once and applied by ``launch``.

The decision is tested pure; then through the pipeline controller over the memory backend, told it is a cluster's
(``step_files``: Pods that do not share the controller's file system), with a tmp-dir store or an fsspec memory
store. As in test_pipeline_controller.py, a test plays a step's process by writing its outputs and ending its job.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from tests.unit.pipelines.test_pipeline_controller import (
    MAKE,
    SWEEP_SPEC,
    FixedClock,
    World,
    fan_pipeline,
    run_document,
    training_pipeline,
)

from phalanx.adapters.artifacts import ArtifactStore
from phalanx.core.pipelines.step_files import (
    SAME_FILESYSTEM,
    STORE_VOLUME_NAME,
    StepFiles,
    StoreAccess,
    StoreVolume,
    store_access,
    store_warning,
)
from phalanx.model.jobs import TrainingJob
from phalanx.model.pipelines import RunPhase, StepPhase
from phalanx.model.sweeps import Sweep
from phalanx.services.pipelines.controller import PipelineController

POD_FILES = StepFiles(same_filesystem=False, claim="artifacts")
NO_CLAIM = StepFiles(same_filesystem=False)
ECHO = {
    "name": "echo",
    "inputs": [{"name": "n", "type": "Integer"}],
    "implementation": {"container": {"image": "example.org/echo:1", "command": ["echo", {"inputValue": "n"}]}},
}
VALUE_BY_PATH = {
    "name": "cat",
    "inputs": [{"name": "text", "type": "String"}],
    "implementation": {"container": {"image": "example.org/cat:1", "command": ["cat", {"inputPath": "text"}]}},
}


# -- the decision ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("directory", ["/srv/artifacts", None])
@pytest.mark.parametrize("files", [True, False])
def test_on_the_controllers_own_file_system_nothing_is_mounted_or_refused(directory: str | None, files: bool) -> None:
    assert store_access(SAME_FILESYSTEM, directory, reads_or_writes_files=files) == StoreAccess()
    assert store_warning(SAME_FILESYSTEM, directory) is None


@pytest.mark.parametrize("files", [True, False])
def test_a_directory_on_a_claim_is_mounted_at_its_own_path_in_every_step(files: bool) -> None:
    access = store_access(POD_FILES, "/var/lib/phalanx/state/artifacts", reads_or_writes_files=files)
    assert access == StoreAccess(volume=StoreVolume("artifacts", "/var/lib/phalanx/state/artifacts"))
    assert access.volume is not None and access.volume.name == STORE_VOLUME_NAME
    assert store_warning(POD_FILES, "/var/lib/phalanx/state/artifacts") is None


def test_a_directory_without_a_claim_refuses_steps_with_files_naming_the_option() -> None:
    access = store_access(NO_CLAIM, "/var/lib/phalanx/state/artifacts", reads_or_writes_files=True)
    assert access.volume is None
    assert access.refusal == (
        "its file inputs and outputs cannot reach its Pods: the operator's artifact store "
        "/var/lib/phalanx/state/artifacts is its own directory, which Pods cannot see; put it on a "
        "PersistentVolumeClaim (--artifact-volume-claim; chart value artifacts.persistentVolumeClaim)"
    )
    assert store_access(NO_CLAIM, "/srv/a", reads_or_writes_files=False) == StoreAccess()
    warning = store_warning(NO_CLAIM, "/srv/a")
    assert warning is not None and warning.startswith("pipeline steps with file inputs or outputs will fail: ")
    assert "--artifact-volume-claim" in warning


@pytest.mark.parametrize("files", [POD_FILES, NO_CLAIM])
def test_an_object_store_refuses_steps_with_files_even_with_a_claim(files: StepFiles) -> None:
    access = store_access(files, None, reads_or_writes_files=True)
    assert access.volume is None and access.refusal is not None
    assert "is an object store, which Pods cannot stage files from yet" in access.refusal
    assert "use a directory store on a PersistentVolumeClaim (--artifact-volume-claim" in access.refusal
    assert store_access(files, None, reads_or_writes_files=False) == StoreAccess()  # parameters only: runs
    assert store_warning(files, None) is not None


# -- through the controller ------------------------------------------------------------------------------------------


def cluster_world(root: Path, files: StepFiles, store: ArtifactStore | None = None) -> World:
    world = World(root)
    world.backend.step_files = files
    if store is not None:
        world.store = store
        world.controller = PipelineController(world.backend, world.store, FixedClock())
    return world


def claim_mounts(job: TrainingJob) -> dict[str, list[tuple[str, str | None, str]]]:
    """Per role, the volumes its template mounts: (mount path, claim, volume name)."""
    found: dict[str, list[tuple[str, str | None, str]]] = {}
    for role, replica in job.spec.replicas.items():
        volumes = {volume.name: volume for volume in replica.template.volumes}
        found[role] = []
        for mount in replica.template.volume_mounts:
            claim = volumes[mount.name].persistent_volume_claim
            found[role].append((mount.mount_path, claim.claim_name if claim else None, mount.name))
    return found


def test_with_a_claim_every_step_job_mounts_it_at_the_store_and_the_run_succeeds(tmp_path: Path) -> None:
    world = cluster_world(tmp_path, POD_FILES)
    root = str(world.store.root)
    world.submit(fan_pipeline(), run_document("r1"))
    world.settle()
    make = world.jobs()["r1-make-1"]
    assert claim_mounts(make) == {"worker": [(root, "artifacts", STORE_VOLUME_NAME)]}
    assert make.spec.outputs.store_to is None  # Kubernetes stores no job outputs: the claim carries them
    # Every path the process is given is under the mount, so it resolves in the Pod.
    assert all(arg.startswith(root) for arg in make.spec.replicas["worker"].template.command[3:])
    world.finish("r1-make-1", {"shards": "[0]", "data": {"rows.csv": "a\n"}})
    world.settle()
    work = world.jobs()["r1-work-0-1"]
    assert claim_mounts(work) == {"worker": [(root, "artifacts", STORE_VOLUME_NAME)]}
    data = work.spec.replicas["worker"].template.command[2]
    assert data == world.instance("r1", "make").outputs["data"] and data.startswith(root + "/_runs/")
    world.finish("r1-work-0-1", {"score": "0.5"})
    world.settle()
    world.finish("r1-join-1", {"best": "0.5"})
    world.settle()
    assert world.run("r1").status.phase == RunPhase.SUCCEEDED
    assert claim_mounts(world.jobs()["r1-join-1"]) == {"worker": [(root, "artifacts", STORE_VOLUME_NAME)]}


def test_a_training_job_step_mounts_the_claim_in_every_replica_and_a_sweep_steps_trials_too(tmp_path: Path) -> None:
    world = cluster_world(tmp_path, POD_FILES)
    root = str(world.store.root)
    pipeline = training_pipeline()
    pipeline["spec"]["steps"][1]["trainingJob"]["spec"]["replicas"]["chief"] = {
        "count": 1,
        "template": {"command": ["python3", "chief.py"]},
    }
    pipeline["spec"]["steps"].append(
        {
            "name": "tune",
            "sweep": {"spec": SWEEP_SPEC},
            "arguments": {"data": "{{steps.make.outputs.data}}"},
            "inputs": [{"name": "data", "type": "Dataset"}],
        }
    )
    world.submit(pipeline, run_document("r1", pipeline="train"))
    world.settle()
    world.finish("r1-make-1", {"shards": "[]", "data": {"x": "1"}})
    world.settle()
    train = world.jobs()["r1-train-1"]
    assert claim_mounts(train) == {role: [(root, "artifacts", STORE_VOLUME_NAME)] for role in ("worker", "chief")}
    sweep = world.backend.get(Sweep, "default", "r1-tune-1")
    assert sweep is not None
    template = sweep.spec.trial.spec["replicas"]["worker"]["template"]  # type: ignore[index,call-overload]
    assert template["volumes"] == [{"name": STORE_VOLUME_NAME, "persistentVolumeClaim": {"claimName": "artifacts"}}]
    assert template["volumeMounts"] == [{"name": STORE_VOLUME_NAME, "mountPath": root}]


def test_without_a_claim_a_step_with_files_fails_at_once_and_a_parameter_only_step_runs(tmp_path: Path) -> None:
    world = cluster_world(tmp_path, NO_CLAIM)
    pipeline = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": "mixed"},
        "spec": {
            "steps": [
                {"name": "echo", "component": {"inline": ECHO}, "arguments": {"n": "3"}},
                {"name": "make", "component": {"inline": MAKE}, "arguments": {"count": "1"}},
                {"name": "cat", "component": {"inline": VALUE_BY_PATH}, "arguments": {"text": "hi"}},
            ]
        },
    }
    world.submit(pipeline, run_document("r1", pipeline="mixed"))
    world.settle()
    assert sorted(world.jobs()) == ["r1-echo-1"]  # only the parameter-only step has a job
    assert claim_mounts(world.jobs()["r1-echo-1"]) == {"worker": []}
    for step in ("make", "cat"):  # outputs; an input read by path (a value file)
        entry = world.instance("r1", step)
        assert entry.phase == StepPhase.FAILED and not entry.retryable
        assert entry.message is not None and entry.message.startswith(
            f"{step} cannot start: its file inputs and outputs cannot reach its Pods: the operator's artifact store "
        )
        assert "put it on a PersistentVolumeClaim (--artifact-volume-claim" in entry.message
    assert list(world.store.root.glob("_runs/default/r1/*/make")) == []  # nothing prepared for it
    world.finish("r1-echo-1", {})
    world.settle()
    assert world.instance("r1", "echo").phase == StepPhase.SUCCEEDED
    assert world.run("r1").status.phase == RunPhase.FAILED


def test_with_an_object_store_a_step_with_files_fails_naming_the_directory_store(tmp_path: Path) -> None:
    store = ArtifactStore(f"memory://steps-{uuid.uuid4().hex[:8]}", staging=tmp_path / "staging")
    world = cluster_world(tmp_path, POD_FILES, store)
    world.submit(fan_pipeline(), run_document("r1"))
    world.settle()
    assert world.jobs() == {}
    entry = world.instance("r1", "make")
    assert entry.phase == StepPhase.FAILED and entry.message is not None
    assert entry.message.startswith("make cannot start: its file inputs and outputs cannot reach its Pods: ")
    assert "use a directory store on a PersistentVolumeClaim (--artifact-volume-claim" in entry.message
    assert list((tmp_path / "staging").glob("**/make")) == []  # nothing prepared for it


def test_a_steps_own_volume_in_the_way_of_the_stores_fails_it_naming_the_field(tmp_path: Path) -> None:
    world = cluster_world(tmp_path, POD_FILES)
    pipeline = training_pipeline()
    template = pipeline["spec"]["steps"][1]["trainingJob"]["spec"]["replicas"]["worker"]["template"]
    template["volumes"] = [{"name": STORE_VOLUME_NAME, "emptyDir": {}}]
    template["volumeMounts"] = [{"name": STORE_VOLUME_NAME, "mountPath": "/scratch"}]
    world.submit(pipeline, run_document("r1", pipeline="train"))
    world.settle()
    world.finish("r1-make-1", {"shards": "[]", "data": {"x": "1"}})
    world.settle()
    entry = world.instance("r1", "train")
    assert entry.phase == StepPhase.FAILED and "r1-train-1" not in world.jobs()
    assert entry.message == (
        f"train cannot start: spec.replicas.worker.template.volumes: {STORE_VOLUME_NAME!r} is the name of the "
        "artifact store's volume; name yours otherwise"
    )


def test_on_the_embedded_runtime_step_jobs_get_no_volume(tmp_path: Path) -> None:
    world = World(tmp_path)
    assert world.backend.step_files == SAME_FILESYSTEM
    world.submit(fan_pipeline(), run_document("r1"))
    world.settle()
    assert claim_mounts(world.jobs()["r1-make-1"]) == {"worker": []}
    store_to = world.jobs()["r1-make-1"].spec.outputs.store_to  # as before: the runtime stores the job's outputs
    assert store_to is not None and store_to.startswith(str(world.store.root)) and store_to.endswith("/a1/outputs")
