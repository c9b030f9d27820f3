"""What a pipeline's steps declare and run, checked at submit: component interfaces and step templates.

``component_interface`` turns a parsed KFP v1 component into the ``StepInterface`` the DAG check and the run
planning need (an input with a default or ``optional`` needs no argument). ``component_interfaces`` parses every
inline component of a pipeline (a component read from a file is stored inline, so a stored pipeline always has
its components with it), each problem at its path.

``check_step_templates`` checks each trainingJob step's spec as a whole TrainingJob against the JobTypes, and
each sweep step's spec as a whole Sweep (its search space, algorithm, trial template), as far as their
``${inputs.NAME}`` placeholders allow: every placeholder takes the sample value ``1`` (as ``core.pipelines.dag``
does for the shape check), so a spec that could never run is refused before anything runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import JsonValue

from phalanx.core.pipelines.dag import InputDecl, OutputDecl, StepInterface, sample_inputs
from phalanx.core.sweeps.substitute import sample_trial, validate_sweep
from phalanx.model.errors import FieldError, SpecError, join_path
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.kfp_component import ComponentSpec, parse_component, type_name
from phalanx.model.pipelines import PipelineSpec, StepKind
from phalanx.model.sweeps import Sweep
from phalanx.model.validation import validate_job

#: On a stored Pipeline (or a PipelineRun with an inline pipelineSpec): step name -> the component file its
#: component was read from, as JSON. The component itself is stored inline; this says where it came from.
COMPONENT_PATHS_ANNOTATION = "phalanx.dev/component-paths"

#: The name a step template is checked under (a job or sweep name is made at run time).
SAMPLE_NAME = "step"


def component_interface(component: ComponentSpec) -> StepInterface:
    """The inputs and outputs a component declares; one with a default or ``optional`` needs no argument."""
    inputs = tuple(
        InputDecl(item.name, type_name(item.type), required=item.default is None and not item.optional)
        for item in component.inputs
    )
    outputs = tuple(OutputDecl(item.name, type_name(item.type)) for item in component.outputs)
    return StepInterface(inputs, outputs)


def component_interfaces(
    spec: PipelineSpec, *, prefix: Sequence[str] = ("spec",)
) -> tuple[dict[str, ComponentSpec], list[FieldError]]:
    """Every inline component of ``spec`` parsed, by step name, and the problems of those that do not parse.

    A step whose component still has a ``path`` is refused: the door reads component files into the document
    before this check (``services.pipeline_files``).
    """
    components: dict[str, ComponentSpec] = {}
    errors: list[FieldError] = []
    for position, step in enumerate(spec.steps):
        if step.kind is not StepKind.COMPONENT or step.component is None:
            continue
        at: list[str | int] = [*prefix, "steps", position, "component"]
        if step.component.inline is None:
            errors.append(FieldError(join_path([*at, "path"]), "the component file was not read; give it inline"))
            continue
        try:
            components[step.name] = parse_component(step.component.inline, prefix=[*at, "inline"])
        except SpecError as err:
            errors.extend(err.errors)
    return components, errors


def sample_step_jobs(
    spec: PipelineSpec,
    jobtypes: Mapping[str, JobType],
    *,
    prefix: Sequence[str] = ("spec",),
    namespace: str = "default",
) -> list[tuple[str, TrainingJob]]:
    """The job each valid trainingJob step (and each valid sweep step's sample trial) would run, inputs sampled.

    Each comes with the path of what stands for its ``metadata``/``spec`` in the pipeline
    (``spec.steps[0].trainingJob``, ``spec.steps[1].sweep.spec.trial``), so a backend's further refusals can be
    named where they were written.
    Steps whose templates ``check_step_templates`` refuses are left out.
    """
    jobs: list[tuple[str, TrainingJob]] = []
    for position, step in enumerate(spec.steps):
        with contextlib.suppress(SpecError):
            if step.training_job is not None:
                at = join_path([*prefix, "steps", position, "trainingJob"])
                jobs.append((at, validate_job(_job_document(step.training_job.spec, namespace), jobtypes)))
            elif step.sweep is not None:
                sweep = validate_sweep(_sweep_document(step.sweep.spec, namespace), jobtypes)
                jobs.append(
                    (join_path([*prefix, "steps", position, "sweep", "spec", "trial"]), sample_trial(sweep, jobtypes))
                )
    return jobs


def step_sweeps(
    spec: PipelineSpec,
    jobtypes: Mapping[str, JobType],
    *,
    prefix: Sequence[str] = ("spec",),
    namespace: str = "default",
) -> list[tuple[str, Sweep]]:
    """The Sweep each valid sweep step would create, inputs sampled, with the path of its ``sweep`` field.

    A Sweep path ``spec.X`` of one is ``PATH.spec.X`` in the pipeline. Steps ``check_step_templates`` refuses are
    left out.
    """
    sweeps: list[tuple[str, Sweep]] = []
    for position, step in enumerate(spec.steps):
        if step.sweep is not None:
            with contextlib.suppress(SpecError):
                sweep = validate_sweep(_sweep_document(step.sweep.spec, namespace), jobtypes)
                sweeps.append((join_path([*prefix, "steps", position, "sweep"]), sweep))
    return sweeps


def _job_document(spec: dict[str, JsonValue], namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": SAMPLE_NAME, "namespace": namespace},
        "spec": sample_inputs(spec),
    }


def _sweep_document(spec: dict[str, JsonValue], namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Sweep",
        "metadata": {"name": SAMPLE_NAME, "namespace": namespace},
        "spec": sample_inputs(spec),
    }


def check_step_templates(
    spec: PipelineSpec,
    jobtypes: Mapping[str, JobType],
    *,
    prefix: Sequence[str] = ("spec",),
    namespace: str = "default",
) -> list[FieldError]:
    """Each trainingJob step's spec validated as a TrainingJob, each sweep step's as a Sweep, inputs sampled."""
    errors: list[FieldError] = []
    for position, step in enumerate(spec.steps):
        if step.training_job is not None:
            at = join_path([*prefix, "steps", position, "trainingJob"])
            try:
                validate_job(_job_document(step.training_job.spec, namespace), jobtypes)
            except SpecError as err:
                errors.extend(_under(at, item) for item in err.errors)
        elif step.sweep is not None:
            at = join_path([*prefix, "steps", position, "sweep"])
            try:
                validate_sweep(_sweep_document(step.sweep.spec, namespace), jobtypes)
            except SpecError as err:
                errors.extend(_under(at, item) for item in err.errors)
    return errors


def _under(at: str, error: FieldError) -> FieldError:
    """A template's error at its path in the pipeline; one about the sample name says so."""
    if error.path.startswith("spec"):
        return FieldError(f"{at}.{error.path}", f"{error.message} (checked with 1 for each ${{inputs.NAME}})")
    return FieldError(at, f"{error.path}: {error.message}" if error.path else error.message)
