"""Sweep: a hyperparameter search whose trials are TrainingJobs (``phalanx.dev/v1alpha1``, kind Sweep).

This module owns the Sweep's shape and every check that needs nothing but the document: the search space
(double, int, discrete, categorical; log scale; grid steps; conditional parameters with ``when``), the
algorithm and what each one can sample, the objective, the budgets, the early-stopping rule and the references
``${params.NAME}``, ``${trial.name}``, ``${trial.namespace}``, ``${trial.number}`` and ``${sweep.name}`` in the
trial template. The
template itself is validated as a TrainingJob once substituted (``core.sweeps.substitute.validate_sweep``): the
model layer cannot substitute, which is core's job.

What each algorithm refuses follows what Optuna (the round-2 adapter) actually serves, so that a sweep never
silently degrades to random search:

- grid needs every parameter finite: int, discrete, categorical, or a double with ``step``;
- cmaes refuses discrete and categorical parameters (Optuna's CmaEsSampler samples them at random, apart from the
  CMA-ES model);
- grid, cmaes and gp refuse conditional parameters (``when``): Optuna's GridSampler needs one fixed grid, and its
  CMA-ES and GP samplers hand parameters outside the common search space to a random sampler. random and tpe
  sample define-by-run, so a parameter absent from some trials is served as well as any.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterator, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, JsonValue, StrictBool, StrictFloat, StrictInt, StrictStr, model_validator

from phalanx.model.base import ApiModel
from phalanx.model.errors import FieldError, short
from phalanx.model.meta import ObjectMeta
from phalanx.model.names import MAX_NAME_LENGTH
from phalanx.model.validation import parse_shape

#: Trials of one sweep: a search past this many is a different tool (and numbers stay short in trial names).
MAX_TRIALS = 100_000
#: Trials running at once.
MAX_PARALLEL_TRIALS = 1000
#: Parameters of one search space, and values of one discrete or categorical parameter.
MAX_PARAMETERS = 100
MAX_VALUES = 10_000
#: A grid larger than this is not enumerable in a control loop (and no budget would visit it).
MAX_GRID_POINTS = 10_000_000
#: Steps of an early-stopping rule (resources, steps): far above any training loop's report count.
MAX_STEP = 10**9

#: A parameter's name as ``${params.NAME}`` uses it.
PARAMETER_NAME = re.compile(r"[a-z][a-z0-9_]*")
#: A metric's name as ``phalanx-metric step=3 NAME=0.5`` and ``metrics.json`` write it.
METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-/]*")
#: A reference in the trial template: ``${params.lr}``, ``${trial.name}``, ``${trial.namespace}`` (Katib's
#: ``${trialSpec.Name}`` and ``${trialSpec.Namespace}``), ``${trial.number}``, ``${sweep.name}``.
#: Any other ``${...}`` (a shell variable in ``bash -c``) is left as written.
REFERENCE = re.compile(r"\$\{(params|trial|sweep)\.([^}]*)\}")
TRIAL_FIELDS = ("name", "namespace", "number")
SWEEP_FIELDS = ("name",)

Number = StrictInt | StrictFloat
ParamValue = StrictInt | StrictFloat | StrictStr


def finite(value: float) -> bool:
    """Whether ``value`` is a number a float holds: finite, and for an int, within 2**53 (exact as a float).

    ``math.isfinite`` raises on an int past a float's range (``10**400``); samplers compute in floats.
    """
    if isinstance(value, int):
        return abs(value) <= 2**53
    return math.isfinite(value)


def not_finite(value: float) -> str:
    """The message for a number ``finite`` refuses."""
    if isinstance(value, int):
        return f"must be between -2**53 and 2**53 (what a float holds exactly), got {short(value)}"
    return f"must be a finite number, got {short(value)}"


class ParameterType(StrEnum):
    """The kinds of search dimension (Katib's parameterType values)."""

    DOUBLE = "double"
    INT = "int"
    DISCRETE = "discrete"  # a list of numbers
    CATEGORICAL = "categorical"  # a list of strings


class Parameter(ApiModel):
    """One dimension of the search space."""

    name: str
    type: ParameterType
    min: Number | None = None
    max: Number | None = None
    log: StrictBool = False
    step: Number | None = None
    values: list[ParamValue] | None = Field(default=None, max_length=MAX_VALUES)
    when: dict[str, ParamValue | list[ParamValue]] | None = Field(
        default=None, description="sampled only when each named earlier parameter has (one of) these values"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Parameter:
        problems = list(_parameter_problems(self))
        if problems:
            where, message = problems[0]
            raise ValueError(f"{where}: {message}" if where else message)
        return self

    def grid_size(self) -> int | None:
        """How many values a grid visits, computed without listing them; ``None`` for a continuous double."""
        if self.values is not None:
            return len(self.values)
        assert self.min is not None and self.max is not None
        if self.type == ParameterType.INT:
            return (int(self.max) - int(self.min)) // int(self.step or 1) + 1
        if self.step is None:
            return None
        # The epsilon keeps max itself when (max - min) / step lands a rounding error below a whole number; a
        # ratio past a float's range (a step of 1e-300) is counted as the largest float, still "too many".
        ratio = (self.max - self.min) / self.step
        return math.floor(min(ratio, sys.float_info.max) + 1e-9) + 1

    def finite_values(self) -> list[ParamValue] | None:
        """Every value a grid visits, in order; ``None`` for a continuous double (no step)."""
        if self.values is not None:
            return list(self.values)
        size = self.grid_size()
        if size is None:
            return None
        assert self.min is not None
        if self.type == ParameterType.INT:
            return [int(self.min) + index * int(self.step or 1) for index in range(size)]
        return [self.min + index * (self.step or 0) for index in range(size)]

    def sample_value(self) -> ParamValue:
        """The value the template is checked with at submit time: the first listed, or the minimum."""
        if self.values:
            return self.values[0]
        assert self.min is not None
        return int(self.min) if self.type == ParameterType.INT else float(self.min)

    def conditions(self) -> dict[str, list[ParamValue]]:
        """``when`` with every condition as a list of accepted values."""
        return {name: value if isinstance(value, list) else [value] for name, value in (self.when or {}).items()}


def _parameter_problems(p: Parameter) -> Iterator[tuple[str, str]]:
    if not PARAMETER_NAME.fullmatch(p.name) or len(p.name) > MAX_NAME_LENGTH:
        yield "name", f"{short(p.name)} is not a parameter name: use [a-z][a-z0-9_]* (at most 63), e.g. 'lr'"
    kind = ParameterType(p.type)
    if kind in (ParameterType.DOUBLE, ParameterType.INT):
        if p.values is not None:
            yield "values", f"a {kind.value} parameter takes min and max, not values; use type: discrete for a list"
        if p.min is None or p.max is None:
            yield ("min" if p.min is None else "max"), f"required for a {kind.value} parameter"
            return
        for field, value in (("min", p.min), ("max", p.max), ("step", p.step)):
            if value is not None and not finite(value):
                yield field, not_finite(value)
                return
            if kind is ParameterType.INT and value is not None and value != int(value):
                yield field, f"an int parameter needs whole numbers, got {value}"
                return
        if p.min >= p.max:
            yield "max", f"must be greater than min ({p.min}), got {p.max}"
        if p.log and p.min <= 0:
            yield "min", f"a log-scale parameter needs min > 0, got {p.min}"
        if p.step is not None:
            if p.step <= 0:
                yield "step", f"must be > 0, got {p.step}"
            elif p.log and kind is ParameterType.DOUBLE:
                yield "step", "a log-scale double takes no step (Optuna cannot sample both); remove one"
            elif p.log and p.step != 1:
                yield "step", f"a log-scale int takes step 1 only, got {p.step}"
    else:
        for field in ("min", "max", "step"):
            if getattr(p, field) is not None:
                yield field, f"a {kind.value} parameter takes values, not {field}"
        if p.log:
            yield "log", f"a {kind.value} parameter has no scale; remove log"
        if not p.values:
            yield "values", f"required for a {kind.value} parameter: a non-empty list, e.g. [32, 64]"
            return
        want_numbers = kind is ParameterType.DISCRETE
        for index, item in enumerate(p.values):
            is_number = not isinstance(item, str)
            if is_number != want_numbers:
                hint = "numbers; use type: categorical for strings" if want_numbers else "strings, e.g. [adam, sgd]"
                yield f"values[{index}]", f"a {kind.value} parameter takes {hint}; got {short(item)}"
                return
            if not isinstance(item, str) and not finite(item):
                yield f"values[{index}]", not_finite(item)
                return
        if len(set(p.values)) != len(p.values):
            yield "values", "each value must be listed once"


class AlgorithmName(StrEnum):
    """How the next trial's parameters are chosen (each served by an Optuna sampler in round 2)."""

    GRID = "grid"
    RANDOM = "random"
    TPE = "tpe"
    CMAES = "cmaes"
    GP = "gp"


class Algorithm(ApiModel):
    """The search algorithm; ``seed`` makes it reproducible."""

    name: AlgorithmName
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0
    settings: dict[str, StrictBool | StrictInt | StrictFloat | StrictStr] = Field(
        default_factory=dict, description="sampler options, checked by the algorithm's adapter"
    )


class Direction(StrEnum):
    """Whether a lower or a higher objective value is better."""

    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"


class Objective(ApiModel):
    """The metric the search optimises, and an optional goal that ends the sweep when a trial reaches it."""

    metric: str
    direction: Direction = Direction.MINIMIZE
    goal: Number | None = None

    @model_validator(mode="after")
    def _check(self) -> Objective:
        if not METRIC_NAME.fullmatch(self.metric) or len(self.metric) > 253:
            raise ValueError(
                f"metric: {short(self.metric)} is not a metric name: use letters, digits, '_', '.', '-', '/', "
                "starting with a letter or '_', e.g. 'val_loss'"
            )
        if self.goal is not None and not finite(self.goal):
            raise ValueError(f"goal: {not_finite(self.goal)}")
        return self

    def better(self, a: float, b: float) -> bool:
        """Whether ``a`` is strictly better than ``b``."""
        return a < b if self.direction == Direction.MINIMIZE else a > b

    def reaches_goal(self, value: float) -> bool:
        """Whether ``value`` meets the goal (never, without one)."""
        if self.goal is None:
            return False
        return value <= self.goal if self.direction == Direction.MINIMIZE else value >= self.goal


class StoppingRule(StrEnum):
    """Early-stopping rules on intermediate metrics (core.sweeps.stopping)."""

    MEDIAN = "median"
    SUCCESSIVE_HALVING = "successiveHalving"
    HYPERBAND = "hyperband"


class MedianOf(StrEnum):
    """What the median rule takes the median of, at a trial's latest step ``s`` (core.sweeps.stopping)."""

    #: The other trials' running averages up to ``s`` (Vizier's rule, Katib's medianstop): lenient with curves
    #: that fall from a common start, whose averages lag their latest values.
    RUNNING_AVERAGES = "runningAverages"
    #: The other trials' values at ``s`` (Optuna's MedianPruner): stops more of them, and sooner.
    VALUES = "values"


Step = Annotated[int, Field(ge=1, le=MAX_STEP)]

#: Which fields each rule reads; any other one set is refused by path (it would be silently ignored).
_RULE_FIELDS = {
    StoppingRule.MEDIAN: {"min_trials", "start_step", "median_of"},
    StoppingRule.SUCCESSIVE_HALVING: {"min_resource", "reduction_factor", "max_resource"},
    StoppingRule.HYPERBAND: {"min_resource", "reduction_factor", "max_resource"},
}


class EarlyStopping(ApiModel):
    """Stop unpromising trials on their intermediate values (``phalanx-metric step=...`` lines)."""

    rule: StoppingRule
    min_trials: Annotated[int, Field(ge=1, le=MAX_TRIALS)] | None = None
    start_step: Step | None = None
    median_of: MedianOf | None = None
    min_resource: Step | None = None
    reduction_factor: Annotated[int, Field(ge=2, le=100)] | None = None
    max_resource: Step | None = None

    @model_validator(mode="after")
    def _fields_of_the_rule(self) -> EarlyStopping:
        rule = StoppingRule(self.rule)
        wanted = _RULE_FIELDS[rule]
        # A field given as null is as good as unset: a copy validated again (``validated_copy``) writes every field.
        given = {name for name in self.model_fields_set if getattr(self, name) is not None}
        for name in sorted(given - {"rule"} - wanted):
            field = type(self).model_fields[name].alias or name
            raise ValueError(f"{field}: the {rule.value} rule does not use {field}; remove it")
        if rule is StoppingRule.HYPERBAND and self.max_resource is None:
            raise ValueError("maxResource: required for hyperband (the step at which a trial is complete)")
        if self.max_resource is not None and self.max_resource <= self.resource_floor:
            raise ValueError(f"maxResource: must be greater than minResource ({self.resource_floor})")
        return self

    # Defaults are applied here, not in the fields, so that the fields set (and not null) tell what the user wrote.
    @property
    def minimum_trials(self) -> int:
        """median: trials with a value at a step before anyone is stopped at it (Katib's min_trials_required)."""
        return self.min_trials if self.min_trials is not None else 3

    @property
    def first_step(self) -> int:
        """median: the first step a trial may be stopped at (Katib's start_step)."""
        return self.start_step if self.start_step is not None else 4

    @property
    def median_basis(self) -> MedianOf:
        """median: what the median is taken of (default: running averages, as Katib)."""
        return MedianOf(self.median_of) if self.median_of is not None else MedianOf.RUNNING_AVERAGES

    @property
    def resource_floor(self) -> int:
        """successiveHalving/hyperband: the first rung's step."""
        return self.min_resource if self.min_resource is not None else 1

    @property
    def factor(self) -> int:
        """successiveHalving/hyperband: keep the top 1/factor at each rung."""
        return self.reduction_factor if self.reduction_factor is not None else 3


class TrialMetadata(ApiModel):
    """Labels and annotations put on every trial's TrainingJob (references substituted)."""

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class TrialTemplate(ApiModel):
    """A TrainingJob spec with references; held raw because ``${params.count}`` may stand where a number goes."""

    spec: dict[str, JsonValue]
    metadata: TrialMetadata = Field(default_factory=TrialMetadata)


class SweepSpec(ApiModel):
    """What to search, how, for what, within which budget."""

    parameters: list[Parameter] = Field(min_length=1, max_length=MAX_PARAMETERS)
    algorithm: Algorithm
    objective: Objective
    parallel_trials: Annotated[int, Field(ge=1, le=MAX_PARALLEL_TRIALS)] = 1
    max_trials: Annotated[int, Field(ge=1, le=MAX_TRIALS)]
    max_failed_trials: Annotated[int, Field(ge=0, le=MAX_TRIALS)] | None = Field(
        default=None, description="the sweep fails when more trials than this fail; default maxTrials"
    )
    early_stopping: EarlyStopping | None = None
    trial: TrialTemplate

    @property
    def failures_allowed(self) -> int:
        """``maxFailedTrials``, defaulting to ``maxTrials`` (a sweep then never fails on failed trials alone)."""
        return self.max_failed_trials if self.max_failed_trials is not None else self.max_trials

    def parameter(self, name: str) -> Parameter | None:
        """The parameter called ``name``."""
        return next((p for p in self.parameters if p.name == name), None)


class SweepPhase(StrEnum):
    """Where a sweep is in its life."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class TrialPhase(StrEnum):
    """A trial's phase as the sweep sees it (its TrainingJob's, plus Stopped by early stopping)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPED = "Stopped"


class TrialCounts(ApiModel):
    """How many trials are in each phase."""

    created: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    stopped: int = 0


class BestTrial(ApiModel):
    """The best finished trial so far."""

    nul_bytes_allowed = True

    name: str
    number: int
    parameters: dict[str, ParamValue]
    value: float


#: Trial results a sweep's status keeps (``SweepStatus.results``): enough for ``describe`` of any sweep a person
#: reads, small enough for a status (an API object is at most about 1.5 MB on a cluster).
MAX_RESULTS = 1000


class TrialResult(ApiModel):
    """One trial as the sweep recorded it: what ``describe sweep`` shows without reading any log.

    It is also the sweep's memory of the trial: a trial whose job is gone (deleted by hand, or by
    ``ttlSecondsAfterFinished``) still counts, with its last phase and value.
    """

    nul_bytes_allowed = True  # observed free text: a stop reason may quote a value

    number: int
    name: str
    phase: TrialPhase
    parameters: dict[str, ParamValue] = Field(default_factory=dict)
    value: float | None = Field(default=None, description="the objective: final, else the last intermediate one")
    step: int | None = Field(default=None, description="the last step that reported the objective")
    reason: str = Field(default="", description="why the trial was stopped, or failed")


class SweepStatus(ApiModel):
    """What Phalanx observed and decided about the sweep."""

    nul_bytes_allowed = True  # observed free text

    phase: SweepPhase = SweepPhase.PENDING
    reason: str = ""
    message: str = ""
    trials: TrialCounts = Field(default_factory=TrialCounts)
    best_trial: BestTrial | None = None
    results: list[TrialResult] = Field(
        default_factory=list,
        max_length=MAX_RESULTS,
        description="every trial by number (past MAX_RESULTS: the running ones, the best, then the latest)",
    )
    start_time: datetime | None = None
    completion_time: datetime | None = None

    def result(self, number: int) -> TrialResult | None:
        """The recorded result of trial ``number``."""
        return next((r for r in self.results if r.number == number), None)


class Sweep(ApiModel):
    """A hyperparameter search."""

    api_version: Literal["phalanx.dev/v1alpha1"] = "phalanx.dev/v1alpha1"
    kind: Literal["Sweep"] = "Sweep"
    metadata: ObjectMeta
    spec: SweepSpec
    status: SweepStatus = Field(default_factory=SweepStatus)

    @property
    def key(self) -> str:
        """``namespace/name``, unique among sweeps."""
        return f"{self.metadata.namespace}/{self.metadata.name}"


def trial_name(sweep_name: str, number: int) -> str:
    """``<sweep>-<number>``: the trial's TrainingJob name, deterministic so that a restart finds it again."""
    return f"{sweep_name}-{number}"


def parse_sweep(raw: Any, *, source: str | None = None) -> Sweep:
    """The Sweep document checked on its own: shape, search space, algorithm, budgets, references.

    The trial template is checked as a TrainingJob by ``core.sweeps.substitute.validate_sweep``.

    Raises:
        SpecError: every problem found, each with its field path and a fix.
    """
    return parse_shape(raw, Sweep, "Sweep", source=source, checks=check_sweep)


def check_sweep(sweep: Sweep) -> list[FieldError]:
    """What the shape of each part cannot tell: names, conditions, algorithm support, trial names, references."""
    spec = sweep.spec
    errors: list[FieldError] = []
    seen: dict[str, Parameter] = {}
    for index, parameter in enumerate(spec.parameters):
        path = f"spec.parameters[{index}]"
        if parameter.name in seen:
            errors.append(FieldError(f"{path}.name", f"{parameter.name!r} is listed twice; names must be unique"))
        errors.extend(_check_conditions(parameter, seen, path))
        seen.setdefault(parameter.name, parameter)
    errors.extend(_check_algorithm(spec))
    longest = trial_name(sweep.metadata.name, spec.max_trials - 1)
    if len(longest) > MAX_NAME_LENGTH:
        errors.append(
            FieldError(
                "metadata.name",
                f"trials are named <sweep>-<number>, and {longest!r} would be {len(longest)} characters (at most "
                f"{MAX_NAME_LENGTH}); shorten the name to {MAX_NAME_LENGTH - len(longest) + len(sweep.metadata.name)}",
            )
        )
    errors.extend(check_references(spec))
    return errors


def _check_conditions(parameter: Parameter, earlier: Mapping[str, Parameter], path: str) -> list[FieldError]:
    errors = []
    for name, accepted in parameter.conditions().items():
        where = f"{path}.when.{name}"
        parent = earlier.get(name)
        if parent is None:
            errors.append(
                FieldError(where, f"no earlier parameter is called {name!r}; a condition names one listed above it")
            )
        elif not accepted:
            errors.append(FieldError(where, f"list at least one value of {name!r}, or remove the condition"))
        elif parent.values is None:
            errors.append(
                FieldError(where, f"{name!r} is a {parent.type} parameter; a condition names a categorical or discrete")
            )
        else:
            errors.extend(
                FieldError(where, f"{short(value)} is not a value of {name!r}; its values are {short(parent.values)}")
                for value in accepted
                if value not in parent.values
            )
    return errors


def _check_algorithm(spec: SweepSpec) -> list[FieldError]:
    algorithm = AlgorithmName(spec.algorithm.name)
    path = "spec.algorithm.name"
    errors = []
    if algorithm is AlgorithmName.GRID:
        points = 1
        for parameter in spec.parameters:
            size = parameter.grid_size()
            if size is None:
                errors.append(
                    FieldError(
                        path,
                        f"grid needs every parameter finite; {parameter.name!r} is a continuous double: give it a "
                        "step, or use random or tpe",
                    )
                )
            else:
                points *= size
        if not errors and points > MAX_GRID_POINTS:
            count = f"{points}" if points < 10**15 else "more than 10**15"
            errors.append(FieldError(path, f"the grid has {count} points (at most {MAX_GRID_POINTS}); coarsen steps"))
    if algorithm is AlgorithmName.CMAES:
        errors.extend(
            FieldError(
                path,
                f"cmaes samples numbers only; {p.name!r} is {p.type}: Optuna would pick it at random outside the "
                "CMA-ES model. Use tpe or gp",
            )
            for p in spec.parameters
            if p.type in (ParameterType.DISCRETE, ParameterType.CATEGORICAL)
        )
    if algorithm in (AlgorithmName.GRID, AlgorithmName.CMAES, AlgorithmName.GP):
        errors.extend(
            FieldError(
                path,
                f"{algorithm.value} does not model conditional parameters; {p.name!r} has 'when'. Use random or tpe",
            )
            for p in spec.parameters
            if p.when
        )
    return errors


def references_in(tree: Any, path: str) -> Iterator[tuple[str, str, str]]:
    """``(path, scope, field)`` of every reference in the strings of ``tree`` (mapping keys are names: not read)."""
    if isinstance(tree, str):
        for match in REFERENCE.finditer(tree):
            yield path, match.group(1), match.group(2)
    elif isinstance(tree, Mapping):
        for key, value in tree.items():
            yield from references_in(value, f"{path}.{key}")
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            yield from references_in(value, f"{path}[{index}]")


def check_references(spec: SweepSpec) -> list[FieldError]:
    """Every ``${params.X}``, ``${trial.X}``, ``${sweep.X}`` in the template names something that exists."""
    names = [p.name for p in spec.parameters]
    known = {"params": names, "trial": list(TRIAL_FIELDS), "sweep": list(SWEEP_FIELDS)}
    errors = []
    for where, scope, field in references_in(spec.trial.to_dict(), "spec.trial"):
        if field not in known[scope]:
            listed = ", ".join(f"${{{scope}.{name}}}" for name in known[scope])
            errors.append(FieldError(where, f"${{{scope}.{field}}} names nothing; use one of {listed}"))
    return errors
