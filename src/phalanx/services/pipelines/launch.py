"""What one attempt of a step instance creates: a one-replica job for a component, the step's TrainingJob, a Sweep.

- A **component** step becomes a one-replica ``generic`` TrainingJob whose command is
  ``core.pipelines.placeholders.resolve_command``'s, with KFP v1's layout under the instance's folder of the
  artifact store (``inputs/<name>/data``, ``outputs/<name>/data``). Before the job is created its value files are
  written and its artifact inputs staged (a local store: the producer's own path; an object store: downloaded).
  An artifact fed to an input the component reads only with ``inputValue`` is passed as its text (at most
  ``dag.MAX_INLINE_ARTIFACT_BYTES``). A fan-in list of artifacts given to an ``inputPath`` becomes a folder with
  one entry per item (``0``, ``1``...). A kfp v2 lightweight component (``kfp_executor.uses_executor_input``)
  also gets its executor input JSON, and its executor output file is ``outputs/executor_output.json``.
- A **trainingJob** step is its spec with ``${inputs.NAME}`` filled in (an artifact input by its local path) and
  ``PHALANX_OUTPUTS`` (the instance's outputs folder) in every replica's environment; output NAME is
  ``$PHALANX_OUTPUTS/NAME``.
- A **sweep** step is a Sweep with ``${inputs.NAME}`` filled in; its outputs come from its best trial.

Where the step's replicas do not share the controller's file system (Kubernetes), the backend's ``step_files``
says how they see the store: ``core.pipelines.step_files.store_access`` decides, once, before anything is
prepared. With the store on a PersistentVolumeClaim every replica of the step's job (a Sweep step: of its trials)
mounts the claim at the store's directory, so the paths above resolve in its Pods; where they cannot see the store,
a step with file inputs or outputs does not start (a ``LaunchError`` naming the fix) and a parameter-only step runs
as anywhere.

Every object is named ``core.pipelines.steps.step_object_name`` and labelled with its run, run uid, step, item and
attempt, and a job carries its output paths in an annotation, so the controller collects them after a restart
without resolving anything again. A problem the step cannot get past (a component that does not resolve with
these arguments, a template that does not validate) is a ``LaunchError`` that no retry mends.
"""

from __future__ import annotations

import importlib
import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from phalanx.adapters.artifacts import ArtifactStore, ArtifactStoreError, InstanceFolder
from phalanx.core.pipelines.dag import MAX_INLINE_ARTIFACT_BYTES
from phalanx.core.pipelines.placeholders import default_paths, resolve_command
from phalanx.core.pipelines.step_files import StepFiles, StoreVolume, store_access
from phalanx.core.pipelines.steps import (
    ATTEMPT_LABEL,
    EXECUTOR_OUTPUT_ANNOTATION,
    ITEM_LABEL,
    OUTPUTS_ANNOTATION,
    OUTPUTS_ENV,
    RUN_LABEL,
    RUN_UID_LABEL,
    STEP_LABEL,
    fill_inputs,
    step_object_name,
)
from phalanx.core.sweeps.substitute import validate_sweep
from phalanx.model.base import validated_copy
from phalanx.model.errors import SpecError
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.kfp_component import ComponentSpec, file_name_of
from phalanx.model.pipelines import PipelineRun, Step, StepKind
from phalanx.model.pods import Volume, VolumeMount
from phalanx.model.sweeps import Sweep
from phalanx.model.validation import validate_job

#: Where a run was submitted from (the embedded door's annotation): a step job's relative paths start there.
SUBMIT_DIR_ANNOTATION = "phalanx.dev/submit-dir"
EXECUTOR_OUTPUT_FILE = "executor_output.json"


class LaunchError(Exception):
    """The instance cannot start with these arguments: the sentence says why; no retry mends it."""


@dataclass(frozen=True, slots=True)
class Instance:
    """One attempt of one step instance, as planned."""

    run: PipelineRun
    step: Step
    item: int | None
    attempt: int
    arguments: Mapping[str, str]
    artifact_inputs: frozenset[str]

    @property
    def object_name(self) -> str:
        """The name of its job or Sweep."""
        return step_object_name(self.run.metadata.name, self.step.name, self.item, self.attempt)

    def labels(self) -> dict[str, str]:
        """The labels that tie its object to the run."""
        return {
            RUN_LABEL: self.run.metadata.name,
            RUN_UID_LABEL: self.run.metadata.uid or "",
            STEP_LABEL: self.step.name,
            ITEM_LABEL: "" if self.item is None else str(self.item),
            ATTEMPT_LABEL: str(self.attempt),
        }


def kfp_executor() -> ModuleType | None:
    """``core.pipelines.kfp_executor`` (kfp v2 lightweight components), once it exists."""
    try:
        return importlib.import_module("phalanx.core.pipelines.kfp_executor")
    except ImportError:
        return None


def build_object(
    instance: Instance,
    component: ComponentSpec | None,
    folder: InstanceFolder,
    store: ArtifactStore,
    jobtypes: Mapping[str, JobType],
    files: StepFiles,
) -> TrainingJob | Sweep:
    """The job or Sweep of ``instance``, with its folder prepared (inputs staged, value files written).

    ``files`` is the backend's ``step_files``: how the step's replicas see the store.

    Raises:
        LaunchError: it cannot start (the sentence says why).
    """
    access = store_access(
        files, str(store.root) if store.is_local else None, reads_or_writes_files=_uses_files(instance, component)
    )
    if access.refusal is not None:
        raise LaunchError(access.refusal)
    store.prepare(folder)
    kind = instance.step.kind
    if kind is StepKind.COMPONENT:
        assert component is not None
        return _with_volume(_component_job(instance, component, folder, store, jobtypes, files), access.volume)
    inputs = _template_inputs(instance, folder, store)
    if kind is StepKind.TRAINING_JOB:
        return _with_volume(_training_job(instance, folder, store, inputs, jobtypes, files), access.volume)
    return _sweep(instance, inputs, jobtypes, access.volume)


def _uses_files(instance: Instance, component: ComponentSpec | None) -> bool:
    """Whether the step reads or writes a file of its instance folder (else it passes parameters only)."""
    if instance.artifact_inputs:
        return True
    kind = instance.step.kind
    if kind is StepKind.COMPONENT:
        assert component is not None
        # An output is a file, a parameter one too (KFP v1); an input read by path is a file even when given a value.
        return bool(component.outputs) or any("inputPath" in uses for uses in component.input_uses().values())
    if kind is StepKind.TRAINING_JOB:
        return bool(instance.step.outputs)  # written under $PHALANX_OUTPUTS
    return False  # a Sweep step's outputs come from its best trial, not from files


def _store_volume(volume: StoreVolume) -> tuple[dict[str, Any], dict[str, Any]]:
    """The volume and its mount, as a replica template writes them."""
    return (
        {"name": volume.name, "persistentVolumeClaim": {"claimName": volume.claim}},
        {"name": volume.name, "mountPath": volume.mount_path},
    )


def _with_volume(job: TrainingJob, volume: StoreVolume | None) -> TrainingJob:
    """``job`` with the store's claim mounted at the store's directory in every replica (None: as it is).

    Raises:
        LaunchError: a replica has a volume of that name or a mount at that path already.
    """
    if volume is None:
        return job
    source, target = _store_volume(volume)
    for role, replica in job.spec.replicas.items():
        path = f"spec.replicas.{role}.template"
        if any(own.name == volume.name for own in replica.template.volumes):
            raise LaunchError(
                f"{path}.volumes: {volume.name!r} is the name of the artifact store's volume; name yours otherwise"
            )
        mounts = [posixpath.normpath(own.mount_path) for own in replica.template.volume_mounts]
        if posixpath.normpath(volume.mount_path) in mounts:
            raise LaunchError(
                f"{path}.volumeMounts: {volume.mount_path} is where the artifact store is mounted; mount yours "
                "elsewhere"
            )
    replicas = {
        role: validated_copy(
            replica,
            template=validated_copy(
                replica.template,
                volumes=[*replica.template.volumes, Volume.model_validate(source)],
                volume_mounts=[*replica.template.volume_mounts, VolumeMount.model_validate(target)],
            ),
        )
        for role, replica in job.spec.replicas.items()
    }
    return validated_copy(job, spec=validated_copy(job.spec, replicas=replicas))


def _metadata(instance: Instance, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    labels: dict[str, Any] = {}
    annotations: dict[str, Any] = {}
    if extra:
        labels.update(extra.get("labels") or {})
        annotations.update(extra.get("annotations") or {})
    labels.update(instance.labels())
    submit_dir = instance.run.metadata.annotations.get(SUBMIT_DIR_ANNOTATION)
    if submit_dir is not None:
        annotations[SUBMIT_DIR_ANNOTATION] = submit_dir
    return {
        "name": instance.object_name,
        "namespace": instance.run.metadata.namespace,
        "labels": labels,
        "annotations": annotations,
    }


def _stage(instance: Instance, name: str, folder: InstanceFolder, store: ArtifactStore) -> str:
    """A local path holding artifact input ``name`` (a fan-in list: a folder with one entry per item)."""
    location = instance.arguments[name]
    target = folder.inputs / file_name_of(name)
    try:
        listed = json.loads(location) if location.startswith("[") else None
        if isinstance(listed, list):
            target.mkdir(parents=True, exist_ok=True)
            for index, entry in enumerate(listed):
                staged = store.stage_input(str(entry), target / str(index))
                if staged != target / str(index):
                    store.copy(str(staged), str(target / str(index)))
            return str(target)
        return str(store.stage_input(location, target / "data"))
    except ArtifactStoreError as err:
        raise LaunchError(f"input {name!r}: {err}") from None


def _read_small(path: str, name: str) -> str:
    file = Path(path)
    if not file.is_file():
        raise LaunchError(
            f"input {name!r} is read by value (inputValue) but its artifact is a folder; read it with inputPath"
        )
    if file.stat().st_size > MAX_INLINE_ARTIFACT_BYTES:
        raise LaunchError(
            f"input {name!r} is read by value (inputValue) but its artifact has {file.stat().st_size} bytes "
            f"(at most {MAX_INLINE_ARTIFACT_BYTES}); read it with inputPath"
        )
    return file.read_text(errors="replace")


def _component_job(
    instance: Instance,
    component: ComponentSpec,
    folder: InstanceFolder,
    store: ArtifactStore,
    jobtypes: Mapping[str, JobType],
    files: StepFiles,
) -> TrainingJob:
    input_paths, output_paths = default_paths(component, inputs_dir=str(folder.inputs), outputs_dir=str(folder.outputs))
    uses = component.input_uses()
    values = {name: value for name, value in instance.arguments.items() if name not in instance.artifact_inputs}
    artifacts: dict[str, str] = {}
    for name in sorted(instance.artifact_inputs):
        path = _stage(instance, name, folder, store)
        if "inputValue" in uses.get(name, frozenset()) and "inputPath" not in uses.get(name, frozenset()):
            values[name] = _read_small(path, name)
        else:
            artifacts[name] = path
    extra: dict[str, Any] = {}
    annotations: dict[str, str] = {}
    executor = kfp_executor()
    collected: dict[str, str] = {}
    try:
        if executor is not None and executor.uses_executor_input(component):
            output_file = str(folder.outputs / EXECUTOR_OUTPUT_FILE)
            extra["executor_input"] = executor.executor_input(
                component, values=values, artifacts=artifacts, output_paths=output_paths, output_file=output_file
            )
            annotations[EXECUTOR_OUTPUT_ANNOTATION] = output_file
            # The executor input hands the program every output's path, not the command line.
            collected.update(output_paths)
        resolved = resolve_command(
            component,
            values=values,
            artifacts=artifacts,
            input_paths=input_paths,
            output_paths=output_paths,
            **extra,
        )
    except SpecError as err:
        raise LaunchError(f"its component does not resolve: {_sentence(err)}") from None
    for path, text in resolved.value_files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    collected.update(resolved.outputs_by_path)
    for path in collected.values():
        Path(path).parent.mkdir(parents=True, exist_ok=True)  # KFP creates the output's folder for the program
    annotations[OUTPUTS_ANNOTATION] = json.dumps(collected, sort_keys=True)
    metadata = _metadata(instance)
    metadata["annotations"].update(annotations)
    container = component.implementation.container
    document = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": metadata,
        "spec": {
            "type": "generic",
            # The step's own retries decide reruns; the job fails at its first failure.
            "runPolicy": {"backoffLimit": 0},
            **_stored_outputs(folder, store, files),
            "replicas": {
                "worker": {
                    "count": 1,
                    "template": {
                        "image": container.image,
                        "command": list(resolved.command),
                        "args": list(resolved.args),
                        "env": dict(resolved.env),
                    },
                }
            },
        },
    }
    return _validated_job(document, jobtypes)


def _stored_outputs(
    folder: InstanceFolder, store: ArtifactStore, files: StepFiles, given: Any = None
) -> dict[str, Any]:
    """``outputs.storeTo``: the instance's outputs folder, with a local store on the controller's file system.

    A job's stored outputs then are the step's outputs, so a Dataset ``fromJob`` the step's job reads them. An
    object store's folder is not a local path the runtime could store to: the job keeps its own there. Where
    replicas are Pods (``files``), a runtime storing outputs is not there either (Kubernetes does not collect a
    job's outputs): the step's outputs reach the store through its claim instead.
    """
    if not store.is_local or not files.same_filesystem:
        return {}
    outputs = dict(given) if isinstance(given, dict) else {}
    outputs["storeTo"] = str(folder.outputs)
    return {"outputs": outputs}


def _template_inputs(instance: Instance, folder: InstanceFolder, store: ArtifactStore) -> dict[str, str]:
    """``${inputs.NAME}`` values: arguments as they are, artifact inputs by their local path."""
    values = dict(instance.arguments)
    for name in instance.artifact_inputs:
        values[name] = _stage(instance, name, folder, store)
    return values


def _training_job(
    instance: Instance,
    folder: InstanceFolder,
    store: ArtifactStore,
    inputs: Mapping[str, str],
    jobtypes: Mapping[str, JobType],
    files: StepFiles,
) -> TrainingJob:
    template = instance.step.training_job
    assert template is not None
    spec = fill_inputs(template.spec, inputs)
    assert isinstance(spec, dict)
    given = spec.get("outputs")
    if not isinstance(given, dict) or not given.get("storeTo"):  # a storeTo the step sets stays its own
        spec = {**spec, **_stored_outputs(folder, store, files, given)}
    outputs = {decl.name: str(folder.outputs / decl.name) for decl in instance.step.outputs}
    metadata = _metadata(instance, template.metadata)
    metadata["annotations"][OUTPUTS_ANNOTATION] = json.dumps(outputs, sort_keys=True)
    document = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": metadata, "spec": spec}
    job = _validated_job(document, jobtypes)
    # PHALANX_* names are Phalanx's own (the door refuses them in what users write): set after validation.
    replicas = {
        role: validated_copy(
            replica,
            template=validated_copy(replica.template, env={**replica.template.env, OUTPUTS_ENV: str(folder.outputs)}),
        )
        for role, replica in job.spec.replicas.items()
    }
    return validated_copy(job, spec=validated_copy(job.spec, replicas=replicas))


def _sweep(
    instance: Instance, inputs: Mapping[str, str], jobtypes: Mapping[str, JobType], volume: StoreVolume | None
) -> Sweep:
    template = instance.step.sweep
    assert template is not None
    spec = fill_inputs(template.spec, inputs)
    if volume is not None:
        spec = _trials_with_volume(spec, volume)
    document = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Sweep",
        "metadata": _metadata(instance, template.metadata),
        "spec": spec,
    }
    try:
        return validate_sweep(document, jobtypes)
    except SpecError as err:
        raise LaunchError(f"its Sweep does not validate: {_sentence(err)}") from None


def _trials_with_volume(spec: Any, volume: StoreVolume) -> Any:
    """A Sweep spec whose trials mount the store's claim: added to each role of its trial template, as written.

    The template is held as written (references may stand where numbers go), so the volume goes in as written
    too; the Sweep's validation then checks it with the rest (a clash with the template's own volumes included).
    """
    trial = spec.get("trial") if isinstance(spec, dict) else None
    trial_spec = trial.get("spec") if isinstance(trial, dict) else None
    replicas = trial_spec.get("replicas") if isinstance(trial_spec, dict) else None
    if not isinstance(trial, dict) or not isinstance(trial_spec, dict) or not isinstance(replicas, dict):
        return spec
    source, target = _store_volume(volume)
    roles: dict[str, Any] = {}
    for role, replica in replicas.items():
        template = replica.get("template") if isinstance(replica, dict) else None
        if not isinstance(template, dict):
            roles[role] = replica
            continue
        volumes = [*(template.get("volumes") or []), source]
        mounts = [*(template.get("volumeMounts") or []), target]
        roles[role] = {**replica, "template": {**template, "volumes": volumes, "volumeMounts": mounts}}
    return {**spec, "trial": {**trial, "spec": {**trial_spec, "replicas": roles}}}


def _validated_job(document: dict[str, Any], jobtypes: Mapping[str, JobType]) -> TrainingJob:
    try:
        return validate_job(document, jobtypes)
    except SpecError as err:
        raise LaunchError(f"its job does not validate: {_sentence(err)}") from None


def _sentence(err: SpecError) -> str:
    return "; ".join(f"{item.path}: {item.message}" if item.path else item.message for item in err.errors)
