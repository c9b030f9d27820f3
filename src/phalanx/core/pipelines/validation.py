"""The submit-time check of a Pipeline and a PipelineRun: shape, components, DAG, step templates, arguments.

``validate_pipeline`` is the door's one call for a Pipeline document (its component files already read into it:
``services.pipeline_files``): the shape (``model.pipelines``), every inline component (``components``), the whole
graph (``dag.check_pipeline``) and each trainingJob/sweep step's spec as far as its inputs allow
(``components.check_step_templates``) — every problem at once, each at its path.

``validate_run`` checks a PipelineRun: an inline ``pipelineSpec`` exactly as a Pipeline's spec (paths under
``spec.pipelineSpec``), and the run's ``arguments`` bound to the pipeline's parameters (``bind_parameters``: an
unknown argument or a value not of its type refused at ``spec.arguments.NAME``). A ``pipelineRef`` is resolved
by the caller, who knows what is stored: ``pipelines`` holds the ones it found (None: not known yet, so the
arguments wait for ``bind_run``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.core.pipelines.components import check_step_templates, component_interface, component_interfaces
from phalanx.core.pipelines.dag import PipelineGraph, StepInterface, check_pipeline
from phalanx.core.pipelines.parameters import bind_parameters
from phalanx.model.errors import FieldError, SpecError
from phalanx.model.jobtypes import JobType
from phalanx.model.pipelines import Pipeline, PipelineRun, PipelineSpec, parse_pipeline, parse_pipeline_run


def check_spec(
    spec: PipelineSpec, jobtypes: Mapping[str, JobType], *, prefix: str = "spec", namespace: str = "default"
) -> tuple[PipelineGraph | None, list[FieldError]]:
    """The graph of a shape-valid pipeline spec, or None, and every problem, each at its path under ``prefix``."""
    components, errors = component_interfaces(spec, prefix=prefix.split("."))
    interfaces = {name: component_interface(component) for name, component in components.items()}
    # A component that does not parse was named already: the graph is checked without it, and its "not loaded"
    # is left out.
    unloaded = {
        f"{prefix}.steps[{position}].component"
        for position, step in enumerate(spec.steps)
        if step.component is not None and step.name not in components
    }
    graph: PipelineGraph | None = None
    try:
        graph = check_pipeline(spec, interfaces)
    except SpecError as err:
        errors.extend(moved for item in err.errors if (moved := _moved(item, prefix)).path not in unloaded)
    seen = {item.path for item in errors}
    # The DAG check validates a trainingJob step's shape too: keep one error per path.
    errors.extend(
        item
        for item in check_step_templates(spec, jobtypes, prefix=prefix.split("."), namespace=namespace)
        if item.path not in seen
    )
    return (graph if not errors else None), errors


def interfaces_of(spec: PipelineSpec) -> dict[str, StepInterface]:
    """The interface of each inline component of a stored (so already checked) pipeline, by step name."""
    components, _ = component_interfaces(spec)
    return {name: component_interface(component) for name, component in components.items()}


def validate_pipeline(raw: Any, jobtypes: Mapping[str, JobType], *, source: str | None = None) -> Pipeline:
    """A Pipeline document checked whole.

    Raises:
        SpecError: every problem, each with its field path.
    """
    pipeline = parse_pipeline(raw, source=source)
    _, errors = check_spec(pipeline.spec, jobtypes, namespace=pipeline.metadata.namespace)
    if errors:
        raise SpecError(errors, source=source)
    return pipeline


def validate_run(
    raw: Any,
    jobtypes: Mapping[str, JobType],
    pipelines: Mapping[str, Pipeline] | None = None,
    *,
    source: str | None = None,
) -> PipelineRun:
    """A PipelineRun document checked as far as what is known allows.

    Args:
        raw: the document.
        jobtypes: the JobTypes step templates may name.
        pipelines: Pipelines of the run's namespace by name; the run's ``pipelineRef`` is looked up here when
            given (None: the caller binds the arguments later, with ``bind_run``).
        source: the file, for messages.

    Raises:
        SpecError: every problem, each with its field path.
    """
    run = parse_pipeline_run(raw, source=source)
    errors: list[FieldError] = []
    if run.spec.pipeline_spec is not None:
        _, errors = check_spec(
            run.spec.pipeline_spec, jobtypes, prefix="spec.pipelineSpec", namespace=run.metadata.namespace
        )
        if not errors:
            errors = bind_run(run, run.spec.pipeline_spec)
    elif pipelines is not None:
        errors = bind_run(run, pipelines)
    if errors:
        raise SpecError(errors, source=source)
    return run


def bind_run(run: PipelineRun, pipeline: PipelineSpec | Mapping[str, Pipeline]) -> list[FieldError]:
    """Why the run's arguments do not bind to its pipeline (its spec, or found by ``pipelineRef``), if they don't."""
    if not isinstance(pipeline, PipelineSpec):
        assert run.spec.pipeline_ref is not None
        name = run.spec.pipeline_ref.name
        found = pipeline.get(name)
        if found is None:
            known = ", ".join(sorted(pipeline)[:20]) or "none"
            return [
                FieldError(
                    "spec.pipelineRef.name",
                    f"pipeline {run.metadata.namespace}/{name} does not exist (pipelines there: {known}); "
                    "submit it first, put it in the same file, or fix the name",
                )
            ]
        pipeline = found.spec
    try:
        bind_parameters(pipeline, run.spec.arguments)
    except SpecError as err:
        return list(err.errors)
    return []


def _moved(error: FieldError, prefix: str) -> FieldError:
    """An error of the DAG check (paths under ``spec``) at its path under ``prefix``."""
    if prefix == "spec" or not (error.path == "spec" or error.path.startswith(("spec.", "spec["))):
        return error
    return FieldError(prefix + error.path[len("spec") :], error.message)
