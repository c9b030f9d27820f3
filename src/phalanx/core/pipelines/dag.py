"""The whole-pipeline check and the step order: every problem by field path, then a stable topological order.

``check_pipeline`` refuses, each at its path: references that are not ``{{params.NAME}}``,
``{{steps.STEP.outputs.NAME}}`` or ``{{item}}``; unknown parameters, steps and outputs; ``{{item}}`` outside a
``parallelFor``; unknown ``after`` steps; arguments for inputs a component lacks; required inputs with no argument;
types that disagree between an output (or a parameter) and the input it feeds; bad ``when`` and ``parallelFor``;
``${inputs.NAME}`` in a trainingJob/sweep spec naming no input; and cycles, named ``a -> b -> a``.

Components stay opaque to this module: the caller gives each component step's ``StepInterface`` (what the KFP
component declares; ``model.kfp_component`` builds it). Decisions the design left open, and why:

- Types are KFP v1's free strings, compared only when both ends give one and neither is generic (unset or
  ``String``), after mapping Python spellings to KFP's (``int`` -> ``Integer``...): KFP v1's own checker ignores
  untyped ends the same way.
- An artifact output may feed an ``inputValue`` input (KFP v1 passes the file's content): allowed here, for small
  values only — the service reads at most ``MAX_INLINE_ARTIFACT_BYTES`` and fails the step past it, since the
  size is known only at run time.
- The output of a fanned-out step is a JSON list (fan-in): it feeds an untyped, ``String`` or ``JsonArray``
  input only.
- A sweep step has three outputs of its own besides those it declares: ``bestParameters`` (JsonObject),
  ``bestValue`` (Float) and ``bestTrial`` (String), so the best parameters can feed later steps.
- Inputs of a trainingJob/sweep step are its argument names plus its declared ``inputs`` (which add a type); a
  declared input with no argument is refused like a component's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import JsonValue, ValidationError

from phalanx.core.pipelines.parameters import type_problem
from phalanx.core.pipelines.references import (
    ItemRef,
    OutputRef,
    ParamRef,
    Reference,
    ReferenceSyntaxError,
    condition_references,
    parse_condition,
    scan,
    whole_reference,
)
from phalanx.model.errors import FieldError, SpecError, from_validation_error, join_path
from phalanx.model.jobs import TrainingJobSpec
from phalanx.model.pipelines import PipelineSpec, Step, StepKind

#: The most bytes of an artifact passed by value (an artifact output into an ``inputValue`` input).
MAX_INLINE_ARTIFACT_BYTES = 256 * 1024

#: The outputs every sweep step has, with their types.
SWEEP_OUTPUTS: Mapping[str, str] = {"bestParameters": "JsonObject", "bestValue": "Float", "bestTrial": "String"}

_INPUT_PLACEHOLDER = re.compile(r"\$\{inputs\.([^}]*)\}")
_TYPE_ALIASES = {
    "int": "Integer",
    "integer": "Integer",
    "float": "Float",
    "double": "Float",
    "bool": "Boolean",
    "boolean": "Boolean",
    "dict": "JsonObject",
    "jsonobject": "JsonObject",
    "list": "JsonArray",
    "jsonarray": "JsonArray",
}
_GENERIC_TYPES = frozenset({"", "string", "str"})
_PARAMETER_TYPES = frozenset({"Integer", "Float", "Boolean", "JsonObject", "JsonArray"})


@dataclass(frozen=True, slots=True)
class InputDecl:
    """One input a step accepts.

    Attributes:
        required: no default and not optional: an argument must be given.
    """

    name: str
    type: str | None = None
    required: bool = True


@dataclass(frozen=True, slots=True)
class OutputDecl:
    """One output a step produces."""

    name: str
    type: str | None = None


@dataclass(frozen=True, slots=True)
class StepInterface:
    """What a step declares it takes and gives; the DAG check needs nothing else of a component."""

    inputs: tuple[InputDecl, ...] = ()
    outputs: tuple[OutputDecl, ...] = ()

    def input(self, name: str) -> InputDecl | None:
        """The input called ``name``, if declared."""
        return next((decl for decl in self.inputs if decl.name == name), None)

    def output(self, name: str) -> OutputDecl | None:
        """The output called ``name``, if declared."""
        return next((decl for decl in self.outputs if decl.name == name), None)


@dataclass(frozen=True, slots=True)
class PipelineGraph:
    """A checked pipeline: each step's interface, upstream steps, and the order to consider steps in.

    Attributes:
        order: step names, upstream before downstream, file order among steps ready together.
        upstream: each step's direct upstream steps (data references and ``after``).
        data_upstream: the upstream steps whose outputs a step reads (a skipped one skips the reader too).
        fanned_out: steps with ``parallelFor``.
    """

    spec: PipelineSpec
    interfaces: Mapping[str, StepInterface]
    order: tuple[str, ...]
    upstream: Mapping[str, frozenset[str]]
    data_upstream: Mapping[str, frozenset[str]]
    fanned_out: frozenset[str] = field(default_factory=frozenset)


def normal_type(kind: str | None) -> str | None:
    """A KFP type name in one spelling, or None for a generic one (unset, ``String``)."""
    if kind is None or kind.strip().lower() in _GENERIC_TYPES:
        return None
    return _TYPE_ALIASES.get(kind.strip().lower(), kind.strip())


def types_agree(given: str | None, wanted: str | None) -> bool:
    """Whether a value of type ``given`` may feed an input of type ``wanted`` (generic ends agree with all)."""
    a, b = normal_type(given), normal_type(wanted)
    return a is None or b is None or a == b


def step_interface(step: Step, components: Mapping[str, StepInterface]) -> StepInterface | None:
    """The interface of ``step``: the component's (given by the caller), or built from a job/sweep step's fields."""
    if step.kind is StepKind.COMPONENT:
        return components.get(step.name)
    declared = {spec.name: spec.type for spec in step.inputs}
    names = list(dict.fromkeys([*declared, *step.arguments]))
    inputs = tuple(InputDecl(name, declared.get(name)) for name in names)
    outputs = [OutputDecl(spec.name, spec.type) for spec in step.outputs]
    if step.kind is StepKind.SWEEP:
        own = {decl.name for decl in outputs}
        outputs += [OutputDecl(name, kind) for name, kind in SWEEP_OUTPUTS.items() if name not in own]
    return StepInterface(inputs, tuple(outputs))


def check_pipeline(spec: PipelineSpec, components: Mapping[str, StepInterface]) -> PipelineGraph:
    """Check a shape-valid pipeline as a whole and order its steps.

    Args:
        spec: the pipeline (already through ``parse_pipeline``).
        components: step name -> the interface of its component, for every component step.

    Raises:
        SpecError: every problem found, each at its field path under ``spec``.
    """
    return _Checker(spec, components).run()


class _Checker:
    def __init__(self, spec: PipelineSpec, components: Mapping[str, StepInterface]) -> None:
        self.spec = spec
        self.errors: list[FieldError] = []
        self.parameters = {parameter.name: parameter for parameter in spec.parameters}
        self.index = {step.name: position for position, step in enumerate(spec.steps)}
        self.interfaces: dict[str, StepInterface] = {}
        for position, step in enumerate(spec.steps):
            interface = step_interface(step, components)
            if interface is None:
                self.error(("steps", position, "component"), "the component was not loaded; give its component.yaml")
            else:
                self.interfaces[step.name] = interface
        self.upstream: dict[str, set[str]] = {step.name: set() for step in spec.steps}
        self.data_upstream: dict[str, set[str]] = {step.name: set() for step in spec.steps}

    def error(self, where: Sequence[str | int], message: str) -> None:
        self.errors.append(FieldError(join_path(["spec", *where]), message))

    def run(self) -> PipelineGraph:
        for position, parameter in enumerate(self.spec.parameters):
            if parameter.default is not None and (problem := type_problem(parameter.default, parameter.type)):
                self.error(("parameters", position, "default"), problem)
        for position, step in enumerate(self.spec.steps):
            self.check_step(position, step)
        order = self.order()
        if self.errors:
            raise SpecError(self.errors)
        return PipelineGraph(
            spec=self.spec,
            interfaces=self.interfaces,
            order=order,
            upstream={name: frozenset(names) for name, names in self.upstream.items()},
            data_upstream={name: frozenset(names) for name, names in self.data_upstream.items()},
            fanned_out=frozenset(step.name for step in self.spec.steps if step.parallel_for is not None),
        )

    # ---- one step ---------------------------------------------------------------------------------------

    def check_step(self, position: int, step: Step) -> None:
        at: tuple[str | int, ...] = ("steps", position)
        for slot, name in enumerate(step.after):
            if name == step.name:
                self.error((*at, "after", slot), "a step cannot run after itself; remove it")
            elif name not in self.index:
                self.error((*at, "after", slot), f"no step is called {name!r}; {self.known_steps()}")
            else:
                self.upstream[step.name].add(name)
        interface = self.interfaces.get(step.name)
        for name, value in step.arguments.items():
            where = (*at, "arguments", name)
            wanted = interface.input(name) if interface is not None else None
            if interface is not None and wanted is None:
                known = ", ".join(repr(decl.name) for decl in interface.inputs) or "none"
                self.error(where, f"the component has no input {name!r}; its inputs are: {known}")
            self.check_value(step, where, value, wanted)
        if interface is not None:
            for decl in interface.inputs:
                if decl.required and decl.name not in step.arguments:
                    self.error(
                        (*at, "arguments"),
                        f"input {decl.name!r} has no argument, default or optional flag; add arguments: "
                        f"{{{decl.name}: ...}}",
                    )
        if step.when is not None:
            self.check_when(step, (*at, "when"), step.when)
        if step.parallel_for is not None:
            self.check_items(step, (*at, "parallelFor", "items"), step.parallel_for.items)
        if step.training_job is not None:
            self.check_template(step, (*at, "trainingJob", "spec"), step.training_job.spec, validate_job=True)
        if step.sweep is not None:
            self.check_template(step, (*at, "sweep", "spec"), step.sweep.spec, validate_job=False)

    def check_value(self, step: Step, where: Sequence[str | int], value: str, wanted: InputDecl | None) -> None:
        references, problems = scan(value)
        for problem in problems:
            self.error(where, problem)
        for reference in references:
            self.check_reference(step, where, reference)
        whole = whole_reference(value)
        kind = normal_type(wanted.type) if wanted is not None else None
        # A constant for a typed parameter input: read it now rather than fail the step later.
        wrong = type_problem(value, str(kind)) if kind in _PARAMETER_TYPES and not (references or problems) else None
        if wanted is not None and wrong is not None:
            self.error(where, f"input {wanted.name!r} {wrong}")
        if wanted is None or whole is None:
            return
        given = self.type_of(whole)
        if isinstance(whole, OutputRef) and self.is_fanned_out(whole.step):
            if normal_type(wanted.type) not in (None, "JsonArray"):
                self.error(
                    where,
                    f"step {whole.step!r} runs once per item, so this is the JSON list of its outputs; input "
                    f"{wanted.name!r} is of type {wanted.type}: give it type JsonArray or read one item's output "
                    "in a step without parallelFor",
                )
            return
        if not types_agree(given, wanted.type):
            self.error(
                where,
                f"{value.strip()} is of type {given} but input {wanted.name!r} wants {wanted.type}; connect an "
                "output of that type or change one of the types",
            )

    def check_reference(self, step: Step, where: Sequence[str | int], reference: Reference) -> bool:
        """Whether ``reference`` names something that exists; records the edge it makes."""
        if isinstance(reference, ItemRef):
            if step.parallel_for is None:
                self.error(where, "{{item}} is the current item of a parallelFor; this step has none")
                return False
            return True
        if isinstance(reference, ParamRef):
            if reference.name not in self.parameters:
                known = ", ".join(sorted(self.parameters)) or "none"
                self.error(where, f"the pipeline has no parameter {reference.name!r}; its parameters are: {known}")
                return False
            return True
        if reference.step == step.name:
            self.error(where, "a step cannot read its own outputs; read an upstream step's")
            return False
        if reference.step not in self.index:
            self.error(where, f"no step is called {reference.step!r}; {self.known_steps()}")
            return False
        self.upstream[step.name].add(reference.step)
        self.data_upstream[step.name].add(reference.step)
        producer = self.interfaces.get(reference.step)
        if producer is not None and producer.output(reference.output) is None:
            known = ", ".join(repr(decl.name) for decl in producer.outputs) or "none"
            self.error(where, f"step {reference.step!r} has no output {reference.output!r}; its outputs are: {known}")
            return False
        return True

    def check_when(self, step: Step, where: Sequence[str | int], text: str) -> None:
        try:
            condition = parse_condition(text)
        except ReferenceSyntaxError as err:
            self.error(where, str(err))
            return
        for reference in condition_references(condition):
            self.check_reference(step, where, reference)

    def check_items(self, step: Step, where: Sequence[str | int], items: str | list[JsonValue]) -> None:
        if isinstance(items, list):
            return
        reference = whole_reference(items)
        if reference is None or isinstance(reference, ItemRef):
            self.error(
                where,
                "items is a list, or one whole reference to a JSON array: {{params.NAME}} or "
                "{{steps.STEP.outputs.NAME}}",
            )
            return
        if not self.check_reference(step, where, reference):
            return
        given = self.type_of(reference)
        if isinstance(reference, OutputRef) and self.is_fanned_out(reference.step):
            return  # the list of a fanned-out step's outputs: a JSON array
        if normal_type(given) not in (None, "JsonArray"):
            self.error(where, f"items must be a JSON array (type JsonArray), got type {given}")

    def check_template(
        self, step: Step, where: Sequence[str | int], spec: dict[str, JsonValue], *, validate_job: bool
    ) -> None:
        interface = self.interfaces.get(step.name)
        names = {decl.name for decl in interface.inputs} if interface is not None else set()
        for path, text in _strings(spec, ()):
            if "{{" in text:
                self.error(
                    (*where, *path),
                    "a job spec reads its inputs as ${inputs.NAME}: pass the {{...}} reference as an argument "
                    "of the step and write ${inputs.NAME} here",
                )
            for match in _INPUT_PLACEHOLDER.finditer(text):
                if match.group(1) not in names:
                    known = ", ".join(sorted(map(repr, names))) or "none"
                    self.error(
                        (*where, *path),
                        f"${{inputs.{match.group(1)}}} names no input of this step (its inputs are: {known}); "
                        "add an argument of that name",
                    )
        if validate_job:
            # A sample value per input: the shape of the job is checked now, not when the step starts.
            sample = sample_inputs(spec)
            try:
                TrainingJobSpec.model_validate(sample)
            except ValidationError as err:
                self.errors.extend(from_validation_error(err, prefix=["spec", *where]))

    # ---- the graph --------------------------------------------------------------------------------------

    def order(self) -> tuple[str, ...]:
        cycle = _find_cycle([step.name for step in self.spec.steps], self.upstream)
        if cycle is not None:
            first = min(cycle, key=self.index.__getitem__)
            start = cycle.index(first)
            loop = [*cycle[start:], *cycle[:start], first]
            self.error(
                ("steps", self.index[first]),
                f"steps form a cycle {' -> '.join(loop)}; remove one of these references or after entries",
            )
            return ()
        return topological_order([step.name for step in self.spec.steps], self.upstream)

    def type_of(self, reference: Reference) -> str | None:
        if isinstance(reference, ParamRef):
            parameter = self.parameters.get(reference.name)
            return str(parameter.type) if parameter is not None else None
        if isinstance(reference, OutputRef):
            producer = self.interfaces.get(reference.step)
            decl = producer.output(reference.output) if producer is not None else None
            return decl.type if decl is not None else None
        return None

    def is_fanned_out(self, name: str) -> bool:
        position = self.index.get(name)
        return position is not None and self.spec.steps[position].parallel_for is not None

    def known_steps(self) -> str:
        return f"the steps are: {', '.join(self.index)}"


def topological_order(names: Sequence[str], upstream: Mapping[str, Iterable[str]]) -> tuple[str, ...]:
    """Upstream before downstream; among steps ready at once, the earliest in ``names`` first.

    ``upstream`` must be acyclic (``check_pipeline`` refuses cycles first). Steps already in a valid order keep
    it, so the order users read in the file is the order they see.
    """
    waiting = {name: set(upstream.get(name, ())) & set(names) for name in names}
    done: list[str] = []
    placed: set[str] = set()
    while len(done) < len(names):
        ready = next(name for name in names if name not in placed and waiting[name] <= placed)
        done.append(ready)
        placed.add(ready)
    return tuple(done)


def _find_cycle(names: Sequence[str], upstream: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One cycle, in the direction data flows (``a -> b`` when b reads a), or None."""
    downstream: dict[str, list[str]] = {name: [] for name in names}
    for name in names:
        for source in upstream.get(name, ()):
            if source in downstream:
                downstream[source].append(name)
    for targets in downstream.values():
        targets.sort(key=names.index)
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for root in names:
        if state.get(root):
            continue
        path: list[str] = [root]
        stack: list[Iterator[str]] = [iter(downstream[root])]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(downstream[nxt]))
    return None


def _strings(value: JsonValue, path: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, (*path, key))
    elif isinstance(value, list):
        for position, item in enumerate(value):
            yield from _strings(item, (*path, position))


def sample_inputs(value: JsonValue) -> JsonValue:
    """``value`` with every ``${inputs.NAME}`` replaced by ``1``, to check a template's shape before a run."""
    if isinstance(value, str):
        # "1": a valid count, index, size or flag value alike, so only the template's own shape is judged.
        return _INPUT_PLACEHOLDER.sub("1", value)
    if isinstance(value, dict):
        return {key: sample_inputs(item) for key, item in value.items()}
    if isinstance(value, list):
        return [sample_inputs(item) for item in value]
    return value
