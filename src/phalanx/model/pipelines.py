"""Pipeline and PipelineRun: a DAG of steps users write, and one execution of it, checked for shape only.

A step is exactly one of: a KFP v1 container component (``component``: a file path or an inline document), a
TrainingJob (``trainingJob``: distributed training as one step) or a Sweep (``sweep``: a tuning step). Steps pass
values and artifacts through ``arguments`` holding ``{{...}}`` references (``core.pipelines.references``).

This module owns the *shape*: field names, types, bounds, one-of rules, names. What needs the whole document
(references that exist, cycles, types between outputs and inputs, component inputs with no argument) is decided
in ``core.pipelines.dag``, which reports every problem by the same field paths. The component document stays
opaque here (a raw mapping in ``ComponentRef``): ``model.kfp_component`` models ``component.yaml`` and the DAG
check receives each component step's declared interface from it.

The TrainingJob and Sweep specs of a step are kept as raw mappings too: their strings hold ``${inputs.NAME}``
placeholders that only take their final form at run time, and a sweep spec is checked by its own model.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    JsonValue,
    StrictBool,
    field_validator,
    model_validator,
)

from phalanx.model.base import ApiModel, every_problem
from phalanx.model.errors import short
from phalanx.model.meta import ObjectMeta
from phalanx.model.names import check_dns_label
from phalanx.model.validation import parse_shape

#: Steps of one pipeline: KFP pipelines of real use have tens; past this the DAG checks stop being instant.
MAX_STEPS = 500
#: Retries of one step: each is a whole new process (or job); a step failing this often will not pass.
MAX_RETRIES = 100
#: Items of a literal ``parallelFor`` list (the same bound applies to a list read from an output at run time).
MAX_PARALLEL_ITEMS = 10_000
#: Parameters, declared inputs and outputs of one pipeline or step.
MAX_DECLARATIONS = 200
#: Characters of one argument, parameter default or ``when`` condition: parameters are small values.
MAX_VALUE_CHARS = 256 * 1024

#: A step name: it becomes part of a job name (``<run>-<step>[-<item>]``), so a DNS label without dots.
STEP_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
MAX_STEP_NAME_LENGTH = 40
#: A pipeline parameter or a step's declared input/output of a trainingJob/sweep step: used in ``${inputs.NAME}``
#: and in ``$PHALANX_OUTPUTS/<name>``, so an identifier. Component inputs keep KFP's free names ("raw data").
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
#: The label of every object a PipelineRun creates (its step jobs, its sweep steps' Sweeps): the run's name.
PIPELINERUN_LABEL = "phalanx.dev/pipelinerun"
#: The loop variable every ``parallelFor`` step references (``{{item}}``), whatever its ``as`` label says.
LOOP_VARIABLE = "item"


class ParameterType(StrEnum):
    """KFP v1's parameter types (the values are strings on the wire; the type says how to read them)."""

    STRING = "String"
    INTEGER = "Integer"
    FLOAT = "Float"
    BOOLEAN = "Boolean"
    JSON_OBJECT = "JsonObject"
    JSON_ARRAY = "JsonArray"


def _step_name(value: str) -> str:
    if len(value) > MAX_STEP_NAME_LENGTH:
        raise ValueError(
            f"step name is {len(value)} characters; at most {MAX_STEP_NAME_LENGTH} are allowed (it becomes part "
            "of a job name)"
        )
    if not STEP_NAME.fullmatch(value):
        suggestion = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-") or "step"
        if not suggestion[0].isalpha():
            suggestion = f"step-{suggestion}"
        raise ValueError(
            f"step name {short(value)} must be lowercase letters, digits and '-', starting with a letter, "
            f"e.g. {suggestion!r}"
        )
    return value


def _identifier(value: str) -> str:
    if not IDENTIFIER.fullmatch(value) or len(value) > 63:
        raise ValueError(
            f"name {short(value)} must be a letter or '_' then letters, digits, '_' or '-' (at most 63), "
            "e.g. 'learning_rate'"
        )
    return value


StepName = Annotated[str, AfterValidator(_step_name)]
Identifier = Annotated[str, AfterValidator(_identifier)]
Value = Annotated[str, Field(max_length=MAX_VALUE_CHARS)]


def _distinct(names: list[str], what: str) -> None:
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"{what} {', '.join(map(repr, repeated))} is declared twice; give each a name of its own")


class PipelineParameter(ApiModel):
    """A value the run supplies (``PipelineRun.spec.arguments``) or takes from ``default``."""

    name: Identifier
    type: ParameterType = ParameterType.STRING
    default: Value | None = None
    description: str | None = None


class IOSpec(ApiModel):
    """A declared input or output of a trainingJob or sweep step.

    ``type`` is a KFP-style free type name (``Dataset``, ``Model``, ``Float``...), compared with the other end
    of each connection by ``core.pipelines.dag``.
    """

    name: Identifier
    type: str | None = None
    description: str | None = None


class ComponentRef(ApiModel):
    """A KFP v1 ``component.yaml``: a path relative to the pipeline file, or the document inline (kept opaque)."""

    path: str | None = Field(default=None, min_length=1, max_length=4096)
    inline: dict[str, JsonValue] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ComponentRef:
        if (self.path is None) == (self.inline is None):
            raise ValueError(
                "give exactly one of path (a component.yaml relative to the pipeline file) or inline (the "
                "component document itself)"
            )
        if self.path is not None and (self.path.startswith("/") or "\\" in self.path):
            raise ValueError(
                f"path: {short(self.path)} must be relative to the pipeline file with '/' separators, "
                "e.g. components/train.yaml"
            )
        return self


class TrainingJobTemplate(ApiModel):
    """A TrainingJob spec run as one step; ``${inputs.NAME}`` in its strings takes the step's argument values."""

    spec: dict[str, JsonValue]
    metadata: dict[str, JsonValue] | None = None


class SweepTemplate(ApiModel):
    """A Sweep spec run as one step (checked by the Sweep model); its best trial's results are the outputs."""

    spec: dict[str, JsonValue]
    metadata: dict[str, JsonValue] | None = None


class ParallelFor(ApiModel):
    """Run the step once per item: a literal list, or a reference to a JSON array parameter or output.

    ``as`` is a label for people (``describe`` shows ``evaluate[shard=2]``); arguments read the current item as
    ``{{item}}`` whatever the label, so one spelling works in every step (the design's reference set is closed).
    """

    items: Annotated[str, Field(max_length=MAX_VALUE_CHARS)] | list[JsonValue]
    as_: Identifier = Field(default=LOOP_VARIABLE, alias="as")

    @field_validator("items")
    @classmethod
    def _bounded(cls, value: str | list[JsonValue]) -> str | list[JsonValue]:
        if isinstance(value, list) and len(value) > MAX_PARALLEL_ITEMS:
            raise ValueError(f"at most {MAX_PARALLEL_ITEMS} items, got {len(value)}; split the list over steps")
        return value


class StepKind(StrEnum):
    """What a step runs."""

    COMPONENT = "component"
    TRAINING_JOB = "trainingJob"
    SWEEP = "sweep"


class Step(ApiModel):
    """One node of the DAG."""

    name: StepName
    component: ComponentRef | None = None
    training_job: TrainingJobTemplate | None = None
    sweep: SweepTemplate | None = None
    arguments: dict[str, Value] = Field(default_factory=dict)
    inputs: list[IOSpec] = Field(default_factory=list, max_length=MAX_DECLARATIONS)
    outputs: list[IOSpec] = Field(default_factory=list, max_length=MAX_DECLARATIONS)
    after: list[StepName] = Field(default_factory=list, max_length=MAX_STEPS)
    parallel_for: ParallelFor | None = None
    when: Annotated[str, Field(min_length=1, max_length=MAX_VALUE_CHARS)] | None = None
    retries: int = Field(default=0, ge=0, le=MAX_RETRIES)
    cache: StrictBool = True

    @field_validator("arguments")
    @classmethod
    def _few_arguments(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_DECLARATIONS:
            raise ValueError(f"at most {MAX_DECLARATIONS} arguments, got {len(value)}")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> Step:
        given = [kind for kind in StepKind if getattr(self, _KIND_FIELDS[kind]) is not None]
        if len(given) != 1:
            found = f"got {', '.join(given)}" if given else "got none"
            raise ValueError(
                f"a step runs exactly one of component (a KFP v1 component.yaml), trainingJob or sweep; {found}"
            )
        problems: list[tuple[tuple[str | int, ...], str]] = []
        if self.kind is StepKind.COMPONENT:
            # A component declares its own inputs and outputs: two declarations would disagree sooner or later.
            for field in ("inputs", "outputs"):
                if getattr(self, field):
                    problems.append(
                        ((field,), "a component step takes its inputs and outputs from the component; remove this")
                    )
        for field in ("inputs", "outputs"):
            try:
                _distinct([spec.name for spec in getattr(self, field)], field[:-1])
            except ValueError as err:
                problems.append(((field,), str(err)))
        if problems:
            raise every_problem("Step", problems)
        return self

    @property
    def kind(self) -> StepKind:
        """Which of component, trainingJob or sweep this step runs."""
        return next(kind for kind in StepKind if getattr(self, _KIND_FIELDS[kind]) is not None)


_KIND_FIELDS = {StepKind.COMPONENT: "component", StepKind.TRAINING_JOB: "training_job", StepKind.SWEEP: "sweep"}


class PipelineSpec(ApiModel):
    """The parameters and the steps, in file order (the order ties are broken in)."""

    parameters: list[PipelineParameter] = Field(default_factory=list, max_length=MAX_DECLARATIONS)
    steps: list[Step] = Field(min_length=1, max_length=MAX_STEPS)

    @field_validator("parameters")
    @classmethod
    def _distinct_parameters(cls, value: list[PipelineParameter]) -> list[PipelineParameter]:
        _distinct([parameter.name for parameter in value], "parameter")
        return value

    @model_validator(mode="after")
    def _distinct_steps(self) -> PipelineSpec:
        seen: dict[str, int] = {}
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for position, step in enumerate(self.steps):
            if step.name in seen:
                problems.append(
                    (
                        ("steps", position, "name"),
                        f"step {step.name!r} is already the name of steps[{seen[step.name]}]; give each step a "
                        "name of its own",
                    )
                )
            else:
                seen[step.name] = position
        if problems:
            raise every_problem("PipelineSpec", problems)
        return self

    def step(self, name: str) -> Step | None:
        """The step called ``name``, if any."""
        return next((step for step in self.steps if step.name == name), None)


class Pipeline(ApiModel):
    """A reusable DAG of steps."""

    api_version: Literal["phalanx.dev/v1alpha1"] = "phalanx.dev/v1alpha1"
    kind: Literal["Pipeline"] = "Pipeline"
    metadata: ObjectMeta
    spec: PipelineSpec


class PipelineRef(ApiModel):
    """A Pipeline stored under this name, in the run's namespace."""

    name: str

    @field_validator("name")
    @classmethod
    def _dns(cls, value: str) -> str:
        return check_dns_label(value, "pipeline name")


class PipelineRunSpec(ApiModel):
    """Which pipeline to run (by reference or inline) and the values of its parameters."""

    pipeline_ref: PipelineRef | None = None
    pipeline_spec: PipelineSpec | None = None
    arguments: dict[str, Value] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_pipeline(self) -> PipelineRunSpec:
        if (self.pipeline_ref is None) == (self.pipeline_spec is None):
            raise ValueError(
                "give exactly one of pipelineRef: {name: NAME} (a stored Pipeline) or pipelineSpec (the steps inline)"
            )
        return self


class StepPhase(StrEnum):
    """Where one step instance is (a fanned-out step has one instance per item)."""

    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SKIPPED = "Skipped"


class RunPhase(StrEnum):
    """Where a run is."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class StepStatus(ApiModel):
    """What was observed of one step instance (``core.pipelines.plan.observation`` reads these back)."""

    nul_bytes_allowed = True  # observed: messages may quote a program's output

    step: str
    item: int | None = Field(default=None, ge=0)
    phase: StepPhase
    attempts: int = Field(default=0, ge=0)
    retryable: bool = Field(default=True, description="false when it failed before starting (no retry mends it)")
    cache_hit: bool = False
    cache_key: str | None = None
    job: str | None = Field(default=None, description="the job (or Sweep) of the latest attempt")
    outputs: dict[str, str] = Field(default_factory=dict, description="output name -> value or artifact location")
    output_digests: dict[str, str] = Field(default_factory=dict, description="artifact output -> content digest")
    start_time: datetime | None = None
    completion_time: datetime | None = None
    message: str | None = None


def sweep_steps(spec: PipelineSpec | None) -> frozenset[str]:
    """The names of the steps whose object is a Sweep (``sweep`` steps); none without a spec."""
    return (
        frozenset(step.name for step in spec.steps if step.kind == StepKind.SWEEP) if spec is not None else frozenset()
    )


class PipelineRunStatus(ApiModel):
    """What was observed of a run: its phase, each step instance, the recorded fan-outs and fan-ins."""

    nul_bytes_allowed = True

    phase: RunPhase = RunPhase.PENDING
    instances: list[StepStatus] = Field(default_factory=list)
    fanouts: dict[str, list[JsonValue]] = Field(default_factory=dict, description="step -> its recorded items")
    joined: list[str] = Field(default_factory=list, description="fanned-out steps whose fan-in was recorded")
    component_digests: dict[str, str] = Field(default_factory=dict, description="step -> digest of what it runs")
    message: str | None = None


class PipelineRun(ApiModel):
    """One execution of a pipeline."""

    api_version: Literal["phalanx.dev/v1alpha1"] = "phalanx.dev/v1alpha1"
    kind: Literal["PipelineRun"] = "PipelineRun"
    metadata: ObjectMeta
    spec: PipelineRunSpec
    status: PipelineRunStatus = Field(default_factory=PipelineRunStatus)


def parse_pipeline(raw: Any, *, source: str | None = None) -> Pipeline:
    """Check a Pipeline document's shape (not its references: ``core.pipelines.dag.check_pipeline`` does).

    Raises:
        SpecError: every shape problem, each with its field path.
    """
    return parse_shape(raw, Pipeline, "Pipeline", source=source)


def parse_pipeline_run(raw: Any, *, source: str | None = None) -> PipelineRun:
    """Check a PipelineRun document's shape.

    Raises:
        SpecError: every shape problem, each with its field path.
    """
    return parse_shape(raw, PipelineRun, "PipelineRun", source=source)
