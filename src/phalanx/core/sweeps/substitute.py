"""Trial jobs from a Sweep's template: references substituted, named, labelled, checked at submit time.

``${params.NAME}`` becomes the trial's value written canonically (an int as an int, a double with
``format(v, '.12g')``, a string as is; a conditional parameter that is inactive in this trial as the empty
string), ``${trial.name}``, ``${trial.namespace}``, ``${trial.number}`` and ``${sweep.name}`` what they say.
Only strings are rewritten, mapping keys never (they are names: a key made by substitution could collide with
another), and any other ``${...}`` is kept as written (a shell variable in ``bash -c``).

``validate_sweep`` is the submit-time door: the Sweep's own checks (model.sweeps), then the template substituted
with a sample assignment (each parameter's first value or minimum) and validated as a TrainingJob, so a bad
template is refused before any trial exists, its errors named under ``spec.trial``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from phalanx.model.errors import FieldError, SpecError
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.sweeps import REFERENCE, ParamValue, Sweep, SweepSpec, finite, parse_sweep, trial_name
from phalanx.model.validation import validate_job

#: Labels every trial carries, so a sweep finds its trials again after a restart (by label, not by memory).
SWEEP_LABEL = "phalanx.dev/sweep"
TRIAL_NUMBER_LABEL = "phalanx.dev/trial-number"
#: The trial's assignment as JSON, on its job: a restarted controller reads a trial's parameters from the job
#: itself, whatever the algorithm's storage remembers.
PARAMETERS_ANNOTATION = "phalanx.dev/trial-parameters"


def render(value: ParamValue) -> str:
    """The canonical text of a parameter value: ``3``, ``0.001``, ``1e-05``, ``adam``."""
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    return format(value, ".12g")


def active_parameters(spec: SweepSpec, assignment: Mapping[str, ParamValue]) -> list[str]:
    """The parameters a trial samples given the values chosen so far, in search-space order.

    A parameter with ``when`` is active when every named (earlier, itself active) parameter has one of the listed
    values; ``assignment`` is read for the parents only.
    """
    active: list[str] = []
    for parameter in spec.parameters:
        if all(
            name in active and assignment.get(name) in accepted for name, accepted in parameter.conditions().items()
        ):
            active.append(parameter.name)
    return active


def sample_assignment(spec: SweepSpec) -> dict[str, ParamValue]:
    """Each active parameter's first value or minimum: what the template is checked with at submit time."""
    assignment: dict[str, ParamValue] = {}
    for parameter in spec.parameters:
        if parameter.name in active_parameters(spec, assignment):
            assignment[parameter.name] = parameter.sample_value()
    return assignment


def check_assignment(spec: SweepSpec, assignment: Mapping[str, ParamValue]) -> list[str]:
    """Why ``assignment`` is not a point of the search space (empty when it is): a guard on suggestions.

    Every active parameter has a value of its kind within its bounds (or among its values), and no inactive or
    unknown parameter has one. An algorithm's adapter, or a converted Katib trial, is checked here before a trial
    job is made from it.
    """
    problems = []
    active = active_parameters(spec, assignment)
    for name in assignment:
        if name not in active:
            known = spec.parameter(name) is not None
            problems.append(f"{name}: {'inactive under its condition' if known else 'no such parameter'}")
    for name in active:
        parameter = spec.parameter(name)
        assert parameter is not None
        if name not in assignment:
            problems.append(f"{name}: missing")
            continue
        value = assignment[name]
        if parameter.values is not None:
            if value not in parameter.values or isinstance(value, bool):
                problems.append(f"{name}: {value!r} is not one of {parameter.values!r}")
            continue
        low, high = parameter.min, parameter.max
        assert low is not None and high is not None  # a double or int parameter has both (model.sweeps)
        if isinstance(value, str | bool):
            problems.append(f"{name}: must be a number, got {value!r}")
        elif parameter.type == "int" and not isinstance(value, int):
            problems.append(f"{name}: must be a whole number, got {value!r}")
        elif not finite(value) or not low <= value <= high:
            problems.append(f"{name}: {value!r} is outside [{low}, {high}]")
    return problems


def substitute(tree: Any, values: Mapping[tuple[str, str], str]) -> Any:
    """``tree`` with every ``${scope.field}`` found in ``values`` replaced; other text kept as written."""
    if isinstance(tree, str):
        return REFERENCE.sub(lambda match: values.get((match.group(1), match.group(2)), match.group(0)), tree)
    if isinstance(tree, Mapping):
        return {key: substitute(value, values) for key, value in tree.items()}
    if isinstance(tree, list):
        return [substitute(value, values) for value in tree]
    return tree


def reference_values(sweep: Sweep, number: int, assignment: Mapping[str, ParamValue]) -> dict[tuple[str, str], str]:
    """What each reference of a trial stands for; inactive conditional parameters are empty strings."""
    values = {("params", p.name): "" for p in sweep.spec.parameters}
    values.update({("params", name): render(value) for name, value in assignment.items()})
    values[("trial", "name")] = trial_name(sweep.metadata.name, number)
    values[("trial", "namespace")] = sweep.metadata.namespace
    values[("trial", "number")] = str(number)
    values[("sweep", "name")] = sweep.metadata.name
    return values


def trial_document(sweep: Sweep, number: int, assignment: Mapping[str, ParamValue]) -> dict[str, Any]:
    """The raw TrainingJob document of trial ``number`` (to validate with ``validate_job`` before creating it)."""
    values = reference_values(sweep, number, assignment)
    template = sweep.spec.trial
    labels = substitute(template.metadata.labels, values)
    labels.update({SWEEP_LABEL: sweep.metadata.name, TRIAL_NUMBER_LABEL: str(number)})
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {
            "name": trial_name(sweep.metadata.name, number),
            "namespace": sweep.metadata.namespace,
            "labels": labels,
            "annotations": {
                **substitute(template.metadata.annotations, values),
                PARAMETERS_ANNOTATION: json.dumps(dict(assignment), separators=(",", ":")),
            },
        },
        "spec": substitute(template.spec, values),
    }


def check_trial_template(sweep: Sweep, jobtypes: Mapping[str, JobType]) -> list[FieldError]:
    """The template with a sample assignment, validated as a TrainingJob; errors named under ``spec.trial``."""
    try:
        sample_trial(sweep, jobtypes)
    except SpecError as error:
        return [_under_trial(item) for item in error.errors]
    return []


def sample_trial(sweep: Sweep, jobtypes: Mapping[str, JobType]) -> TrainingJob:
    """Trial 0 with each parameter at its first value or minimum, validated (what a backend's door checks further).

    Raises:
        SpecError: the template does not make a valid TrainingJob (paths of the job, not of the sweep).
    """
    return validate_job(trial_document(sweep, 0, sample_assignment(sweep.spec)), jobtypes)


def _under_trial(error: FieldError) -> FieldError:
    # The job's metadata comes from the template's metadata (labels, annotations) or from the sweep's name.
    if error.path.startswith("metadata.labels") or error.path.startswith("metadata.annotations"):
        return FieldError(f"spec.trial.{error.path}", error.message)
    if error.path.startswith("metadata"):
        return FieldError("metadata.name", f"the trial job's {error.path}: {error.message}")
    where = f"spec.trial.{error.path}" if error.path else "spec.trial"
    return FieldError(where, f"{error.message} (checked with each parameter at its first value or minimum)")


def validate_sweep(raw: Any, jobtypes: Mapping[str, JobType], *, source: str | None = None) -> Sweep:
    """The submit-time check of a Sweep document: its own rules, then its trial template as a TrainingJob.

    Raises:
        SpecError: every problem found, each with its field path and a fix.
    """
    sweep = parse_sweep(raw, source=source)
    errors = check_trial_template(sweep, jobtypes)
    if errors:
        raise SpecError(errors, source=source)
    return sweep
