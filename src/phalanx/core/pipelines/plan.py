"""What a pipeline run does next: a pure, idempotent decision from what was observed, each action with a sentence.

``plan_run`` takes the checked pipeline (``dag.check_pipeline``), the bound parameters, what was observed of each
step instance (a fanned-out step has one instance per item), the recorded fan-outs and fan-ins, the component
digests and a read-only view of the step cache, and returns actions:

- ``FanOut``: a ``parallelFor`` step's items are known (a literal list, a parameter, an upstream output): record
  them; its instances are ``step[0]``, ``step[1]``...
- ``UseCache``: a ready instance whose cache key has a finished entry (and ``cache: true``): its outputs are
  reused and no process starts.
- ``StartStep``: a ready instance, with its resolved arguments, the inputs fed by artifacts and its cache key.
- ``RetryStep``: a failed instance with retries left (``attempt`` counts starts, the first is 1).
- ``SkipStep``: the ``when`` condition is false, or an input comes from a skipped step.
- ``FailStep``: the instance cannot start (items not a JSON array, an output the producer did not write, a
  condition that cannot be evaluated).
- ``FanIn``: every item of a fanned-out step is done: its outputs become JSON lists, in item order (skipped items
  left out), and readers may start.
- ``FinishRun``: Succeeded when every step is done with none failed; Failed once a step has failed for good and
  nothing is running.

Cache keys count an upstream artifact by its content digest (``OutputValue.digest``, which the service fills through
``cache.ArtifactDigests`` when the producer finishes); an artifact without a digest counts by its location, which
only ever misses. ``observation`` reads a stored ``PipelineRunStatus`` back into what this module takes.

Idempotent: the same observation gives the same actions, and an action is derived only from what is not yet
observed (an instance observed in any phase is never started again; ``attempt`` is the key a service dedupes
retries on). After a step fails for good nothing new starts — running instances finish — as Argo's DAG
``failFast`` and KFP do. A finished run plans nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import JsonValue

from phalanx.core.pipelines.cache import cache_key, document_digest
from phalanx.core.pipelines.dag import PipelineGraph
from phalanx.core.pipelines.references import (
    ItemRef,
    OutputRef,
    ParamRef,
    Reference,
    ReferenceSyntaxError,
    evaluate,
    parse_condition,
    render,
    substitute,
    whole_reference,
)
from phalanx.model.pipelines import MAX_PARALLEL_ITEMS, PipelineRunStatus, RunPhase, Step, StepPhase

InstanceKey = tuple[str, int | None]


def instance_name(step: str, item: int | None) -> str:
    """``step`` or ``step[item]``: how an instance is named in status and messages."""
    return step if item is None else f"{step}[{item}]"


@dataclass(frozen=True, slots=True)
class OutputValue:
    """One output of a finished instance: its value (a parameter, or an artifact's location) and content digest."""

    value: str
    digest: str | None = None


@dataclass(frozen=True, slots=True)
class InstanceState:
    """What was observed of one step instance."""

    phase: StepPhase
    attempts: int = 1
    outputs: Mapping[str, OutputValue] = field(default_factory=dict)
    cache_hit: bool = False
    #: False for a failure a retry cannot mend (recorded from ``FailStep``): the instance is final at once.
    retryable: bool = True


@dataclass(frozen=True, slots=True)
class RunObservation:
    """Everything observed of a run.

    Attributes:
        instances: (step, item index or None) -> state; an instance absent here was never started.
        fanouts: step -> the items recorded by ``FanOut``.
        joined: steps whose ``FanIn`` was recorded.
        finished: the run's final phase, once recorded.
    """

    instances: Mapping[InstanceKey, InstanceState] = field(default_factory=dict)
    fanouts: Mapping[str, tuple[JsonValue, ...]] = field(default_factory=dict)
    joined: frozenset[str] = frozenset()
    finished: RunPhase | None = None


def observation(status: PipelineRunStatus) -> RunObservation:
    """The observation a stored run status holds (what a service passes to ``plan_run`` after a restart)."""
    instances: dict[InstanceKey, InstanceState] = {}
    for entry in status.instances:
        outputs = {name: OutputValue(value, entry.output_digests.get(name)) for name, value in entry.outputs.items()}
        # The model keeps enum fields as their values (plain strings): this module compares members by identity.
        instances[(entry.step, entry.item)] = InstanceState(
            StepPhase(entry.phase), entry.attempts, outputs, entry.cache_hit, entry.retryable
        )
    finished = status.phase if status.phase in (RunPhase.SUCCEEDED, RunPhase.FAILED) else None
    return RunObservation(
        instances=instances,
        fanouts={name: tuple(items) for name, items in status.fanouts.items()},
        joined=frozenset(status.joined),
        finished=RunPhase(finished) if finished is not None else None,
    )


@dataclass(frozen=True, slots=True)
class CachedResult:
    """A finished instance's outputs, stored under its cache key."""

    outputs: Mapping[str, OutputValue]


@dataclass(frozen=True, slots=True)
class StartStep:
    """Start an instance (its first attempt)."""

    step: str
    item: int | None
    attempt: int
    arguments: Mapping[str, str]
    artifact_inputs: frozenset[str]
    cache_key: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class RetryStep:
    """Start a failed instance again."""

    step: str
    item: int | None
    attempt: int
    arguments: Mapping[str, str]
    artifact_inputs: frozenset[str]
    cache_key: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class UseCache:
    """Finish an instance with a cached result; no process starts."""

    step: str
    item: int | None
    cache_key: str
    outputs: Mapping[str, OutputValue]
    reason: str


@dataclass(frozen=True, slots=True)
class SkipStep:
    """Mark an instance Skipped."""

    step: str
    item: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class FailStep:
    """Mark an instance Failed without starting it (recorded with ``retryable=False``)."""

    step: str
    item: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class FanOut:
    """Record a parallelFor step's items."""

    step: str
    items: tuple[JsonValue, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class FanIn:
    """Record that every item of a fanned-out step is done, with the step's phase and its list outputs."""

    step: str
    phase: StepPhase
    outputs: Mapping[str, str]
    reason: str


@dataclass(frozen=True, slots=True)
class FinishRun:
    """Record the run's final phase."""

    phase: RunPhase
    reason: str


Action = StartStep | RetryStep | UseCache | SkipStep | FailStep | FanOut | FanIn | FinishRun


@dataclass(frozen=True, slots=True)
class RunPlan:
    """The actions of one planning pass, in step order."""

    actions: tuple[Action, ...]

    def sentences(self) -> list[str]:
        """One sentence per action, for events and ``describe``."""
        return [action.reason for action in self.actions]


class _UnresolvableError(Exception):
    """An argument cannot be resolved now: the instance fails with this message."""


@dataclass(frozen=True, slots=True)
class _StepOutcome:
    done: bool
    phase: StepPhase | None  # when done
    outputs: Mapping[str, OutputValue]


def plan_run(
    graph: PipelineGraph,
    parameters: Mapping[str, str],
    observed: RunObservation,
    *,
    component_digests: Mapping[str, str],
    cache: Mapping[str, CachedResult],
    namespace: str = "",
) -> RunPlan:
    """Decide the run's next actions.

    Args:
        graph: the checked pipeline.
        parameters: every parameter's value (``parameters.bind_parameters``).
        observed: what was observed of the run.
        component_digests: step name -> the digest of what it runs (``cache``); a step without one is not cached.
        cache: cache key -> stored result (a read-only view; only the keys of ready instances are looked up).
        namespace: the run's namespace, part of every cache key: one namespace never reuses another's outputs.
    """
    if observed.finished is not None:
        return RunPlan(())
    return _Planner(graph, parameters, observed, component_digests, cache, namespace).run()


class _Planner:
    def __init__(
        self,
        graph: PipelineGraph,
        parameters: Mapping[str, str],
        observed: RunObservation,
        component_digests: Mapping[str, str],
        cache: Mapping[str, CachedResult],
        namespace: str,
    ) -> None:
        self.namespace = namespace
        self.graph = graph
        self.parameters = parameters
        self.observed = observed
        self.digests = component_digests
        self.cache = cache
        self.steps = {step.name: step for step in graph.spec.steps}
        self.actions: list[Action] = []

    def run(self) -> RunPlan:
        outcomes = {name: self.outcome(name) for name in self.graph.order}
        failed = sorted(
            {
                instance_name(name, item)
                for (name, item), state in self.observed.instances.items()
                if name in self.steps and state.phase is StepPhase.FAILED and self.is_final(self.steps[name], state)
            }
        )
        running = any(state.phase is StepPhase.RUNNING for state in self.observed.instances.values())
        for name in self.graph.order:
            step = self.steps[name]
            if step.parallel_for is not None and name not in self.observed.joined:
                self.maybe_fan_in(step)
        if failed:
            if not running:
                self.actions.append(
                    FinishRun(RunPhase.FAILED, f"the run failed: {', '.join(failed)} failed and nothing runs")
                )
            return RunPlan(tuple(self.actions))
        for name in self.graph.order:
            if not outcomes[name].done:
                self.advance(self.steps[name], outcomes)
        if all(outcome.done for outcome in outcomes.values()) and not self.actions:
            counts = _tally(self.observed.instances.values())
            self.actions.append(
                FinishRun(RunPhase.SUCCEEDED, f"the run succeeded: all {len(outcomes)} steps done ({counts})")
            )
        return RunPlan(tuple(self.actions))

    # ---- what is known of a step --------------------------------------------------------------------------

    def outcome(self, name: str) -> _StepOutcome:
        step = self.steps[name]
        if step.parallel_for is None:
            state = self.observed.instances.get((name, None))
            if state is None or not self.is_final(step, state):
                return _StepOutcome(False, None, {})
            return _StepOutcome(True, state.phase, state.outputs)
        whole = self.observed.instances.get((name, None))
        if whole is not None and self.is_final(step, whole):
            return _StepOutcome(True, whole.phase, {})  # skipped or failed as a whole, before any item
        if name not in self.observed.joined:
            return _StepOutcome(False, None, {})
        states = self.item_states(name)
        return _StepOutcome(True, _joined_phase(states), self.joined_outputs(name, states))

    def is_final(self, step: Step, state: InstanceState) -> bool:
        if state.phase is StepPhase.FAILED:
            return not state.retryable or state.attempts > step.retries
        return state.phase in (StepPhase.SUCCEEDED, StepPhase.SKIPPED)

    def item_states(self, name: str) -> list[InstanceState | None]:
        items = self.observed.fanouts.get(name, ())
        return [self.observed.instances.get((name, index)) for index in range(len(items))]

    def joined_outputs(self, name: str, states: list[InstanceState | None]) -> dict[str, OutputValue]:
        produced = [state for state in states if state is not None and state.phase is StepPhase.SUCCEEDED]
        interface = self.graph.interfaces[name]
        joined: dict[str, OutputValue] = {}
        for decl in interface.outputs:
            values = [state.outputs[decl.name] for state in produced if decl.name in state.outputs]
            digests = [value.digest for value in values]
            digest = document_digest(list(digests)) if all(d is not None for d in digests) else None
            joined[decl.name] = OutputValue(json.dumps([_json_item(value.value) for value in values]), digest)
        return joined

    def maybe_fan_in(self, step: Step) -> None:
        if step.name not in self.observed.fanouts:
            return
        states = self.item_states(step.name)
        if not all(state is not None and self.is_final(step, state) for state in states):
            return
        phase = _joined_phase(states)
        outputs = {name: value.value for name, value in self.joined_outputs(step.name, states).items()}
        self.actions.append(
            FanIn(step.name, phase, outputs, f"all {len(states)} items of step {step.name} are done: {phase}")
        )

    # ---- moving a step on -----------------------------------------------------------------------------------

    def advance(self, step: Step, outcomes: Mapping[str, _StepOutcome]) -> None:
        if not all(outcomes[name].done for name in self.graph.upstream[step.name]):
            return
        skipped = [
            name for name in sorted(self.graph.data_upstream[step.name]) if outcomes[name].phase is StepPhase.SKIPPED
        ]
        if step.parallel_for is None:
            self.advance_instance(step, None, None, outcomes, skipped)
            return
        items = self.observed.fanouts.get(step.name)
        if items is None:
            if skipped:
                self.actions.append(SkipStep(step.name, None, _skip_reason(step.name, skipped)))
                return
            try:
                found = self.items(step, outcomes)
            except _UnresolvableError as err:
                self.actions.append(FailStep(step.name, None, f"step {step.name} cannot fan out: {err}"))
                return
            self.actions.append(FanOut(step.name, found, f"step {step.name} fans out over {len(found)} items"))
            items = found
        for index, item in enumerate(items):
            self.advance_instance(step, index, item, outcomes, skipped)

    def advance_instance(
        self,
        step: Step,
        index: int | None,
        item: JsonValue,
        outcomes: Mapping[str, _StepOutcome],
        skipped: list[str],
    ) -> None:
        label = instance_name(step.name, index)
        state = self.observed.instances.get((step.name, index))
        if state is not None and state.phase is not StepPhase.FAILED:
            return  # running or done: never started twice
        if state is None and skipped:
            self.actions.append(SkipStep(step.name, index, _skip_reason(label, skipped)))
            return
        resolve = _Resolver(self.parameters, outcomes, self.graph.fanned_out, item, index is not None)
        try:
            if state is None and step.when is not None and not evaluate(parse_condition(step.when), resolve):
                self.actions.append(
                    SkipStep(step.name, index, f"{label} is skipped: its condition {step.when!r} is false")
                )
                return
            arguments = {name: substitute(value, resolve) for name, value in step.arguments.items()}
        except (_UnresolvableError, ReferenceSyntaxError) as err:
            # Deterministic once the upstream is done: record it as a failure no retry mends.
            self.actions.append(FailStep(step.name, index, f"{label} cannot start: {err}"))
            return
        artifacts = self.artifact_digests(step, outcomes)
        key = None
        digest = self.digests.get(step.name)
        if digest is not None:
            values = {name: value for name, value in arguments.items() if name not in artifacts}
            key = cache_key(
                component_digest=digest, values=values, artifact_digests=artifacts, namespace=self.namespace
            )
        if state is not None:
            attempt = state.attempts + 1
            self.actions.append(
                RetryStep(
                    step.name,
                    index,
                    attempt,
                    arguments,
                    frozenset(artifacts),
                    key,
                    f"{label} failed on attempt {state.attempts}; retrying (attempt {attempt} of {step.retries + 1})",
                )
            )
            return
        hit = self.cache.get(key) if key is not None and step.cache else None
        if key is not None and hit is not None:
            self.actions.append(
                UseCache(step.name, index, key, hit.outputs, f"{label} is reused from the cache (key {key[:12]})")
            )
            return
        why = "caching is off" if not step.cache else "no cached result" if key is not None else "no digest to cache by"
        self.actions.append(
            StartStep(
                step.name,
                index,
                1,
                arguments,
                frozenset(artifacts),
                key,
                f"{label} starts: its inputs are ready ({why})",
            )
        )

    def items(self, step: Step, outcomes: Mapping[str, _StepOutcome]) -> tuple[JsonValue, ...]:
        assert step.parallel_for is not None
        source = step.parallel_for.items
        if isinstance(source, list):
            return tuple(source)
        text = substitute(source, _Resolver(self.parameters, outcomes, self.graph.fanned_out, None, False))
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if not isinstance(parsed, list):
            raise _UnresolvableError(f"items {source.strip()} is not a JSON array: {text[:80]!r}")
        if len(parsed) > MAX_PARALLEL_ITEMS:
            raise _UnresolvableError(f"items has {len(parsed)} entries; at most {MAX_PARALLEL_ITEMS} are allowed")
        return tuple(parsed)

    def artifact_digests(self, step: Step, outcomes: Mapping[str, _StepOutcome]) -> dict[str, str]:
        """Input name -> content digest, for arguments that are one whole reference to an artifact output."""
        found: dict[str, str] = {}
        for name, value in step.arguments.items():
            reference = whole_reference(value)
            if isinstance(reference, OutputRef):
                output = outcomes[reference.step].outputs.get(reference.output)
                if output is not None and output.digest is not None:
                    found[name] = output.digest
        return found


class _Resolver:
    """Resolves a reference against the bound parameters, finished upstream outputs and the current item."""

    def __init__(
        self,
        parameters: Mapping[str, str],
        outcomes: Mapping[str, _StepOutcome],
        fanned_out: frozenset[str],
        item: JsonValue,
        in_loop: bool,
    ) -> None:
        self.parameters = parameters
        self.outcomes = outcomes
        self.fanned_out = fanned_out
        self.item = item
        self.in_loop = in_loop

    def __call__(self, reference: Reference) -> str:
        if isinstance(reference, ItemRef):
            if not self.in_loop:
                raise _UnresolvableError("{{item}} is used outside a parallelFor")
            return render(self.item)
        if isinstance(reference, ParamRef):
            if reference.name not in self.parameters:
                raise _UnresolvableError(f"parameter {reference.name!r} has no value")
            return self.parameters[reference.name]
        outcome = self.outcomes.get(reference.step)
        output = outcome.outputs.get(reference.output) if outcome is not None else None
        if output is None:
            raise _UnresolvableError(f"step {reference.step} produced no output {reference.output!r}")
        return output.value


def _json_item(value: str) -> JsonValue:
    """An output value inside a fan-in list: its JSON when it is JSON (numbers, lists...), else the string."""
    try:
        parsed: JsonValue = json.loads(value)
    except ValueError:
        return value
    return parsed


def _joined_phase(states: list[InstanceState | None]) -> StepPhase:
    phases = [state.phase for state in states if state is not None]
    if StepPhase.FAILED in phases:
        return StepPhase.FAILED
    if phases and all(phase is StepPhase.SKIPPED for phase in phases):
        return StepPhase.SKIPPED
    return StepPhase.SUCCEEDED


def _skip_reason(label: str, skipped: list[str]) -> str:
    return f"{label} is skipped: it reads outputs of skipped step {', '.join(skipped)}"


def _tally(states: Iterable[InstanceState]) -> str:
    counted: dict[str, int] = {}
    for state in states:
        what = "from cache" if state.cache_hit else str(state.phase).lower()
        counted[what] = counted.get(what, 0) + 1
    return ", ".join(f"{count} {what}" for what, count in sorted(counted.items())) or "no instances"
