"""A compiled Kubeflow Pipelines v2 IR as a Phalanx Pipeline document: the DAG flattened, every refusal by IR path.

``pipeline_from_ir`` reads what ``kfp.compiler`` writes (``model.kfp_ir`` owns the vocabulary) and returns a raw
``Pipeline`` document, checked afterwards like any other (``parse_pipeline`` and ``check_pipeline``):

- ``root.inputDefinitions.parameters`` -> ``spec.parameters`` (types, defaults);
- each task that runs an executor -> a step running the executor's container as an inline KFP v1 component;
  its inputs -> ``arguments``: ``componentInputParameter`` -> what the enclosing DAG was given (``{{params.x}}`` at
  the root), ``taskOutputParameter``/``taskOutputArtifact`` -> ``{{steps.t.outputs.o}}``, ``runtimeValue`` -> the
  constant; ``dependentTasks`` -> ``after``; ``cachingOptions.enableCache`` -> ``cache`` (false when absent, as
  KFP's driver reads it); ``retryPolicy.maxRetryCount`` -> ``retries``;
- a task running a DAG component is a group, flattened: ``dsl.ParallelFor`` (``parameterIterator`` over a literal
  list, a parameter or an output) -> ``parallelFor`` on each step inside, the loop item -> ``{{item}}``;
  ``dsl.If``/``dsl.Condition``/``dsl.Else`` (``triggerPolicy.condition``) -> ``when``; the SDK's plain groups
  (``condition-branches-N``, a sub-pipeline used once) pass their inputs through; a group's ``dependentTasks``
  apply to every step inside; ``dsl.Collected`` (a loop's ``dag.outputs``) -> the fan-in reference.

The condition strings are the CEL the SDK writes: one comparison ``A op B`` whose sides are
``inputs.parameter_values['x']`` (maybe inside ``int()``/``double()``), a quoted string, a number or a boolean,
possibly negated ``!(...)`` (``dsl.Else``; the operator is inverted). ``&&`` (``dsl.Elif``), a task under two
conditions, nested loops, a loop body whose tasks read each other's outputs (Phalanx fans out one step at a time),
importers, resolvers, exit handlers (``triggerPolicy.strategy``, ``taskFinalStatus``), ``dsl.OneOf``,
artifact iterators, lists of artifacts, field selectors of loop items, container resources and lifecycle hooks
are refused at their IR path (``root.dag.tasks.<name>.<field>``, ``components.<comp>...``,
``deploymentSpec.executors.<exec>...``). ``iteratorPolicy.parallelismLimit`` and retry backoff settings are not
applied (Phalanx's queue admits steps; retries start when the failure is seen), and are documented so.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.core.pipelines.dag import topological_order
from phalanx.model.errors import FieldError, SpecError, short
from phalanx.model.kfp_component import parse_component
from phalanx.model.kfp_ir import (
    artifact_type,
    convert_item,
    convert_string,
    is_kfp_ir,
    parameter_type,
    render_value,
    unknown_fields,
)
from phalanx.model.kubeflow.convert import CONVERTED_FROM
from phalanx.model.pipelines import MAX_STEP_NAME_LENGTH

_TOP_FIELDS = (
    "pipelineInfo",
    "root",
    "components",
    "deploymentSpec",
    "schemaVersion",
    "sdkVersion",
    "defaultPipelineRoot",
)
_COMPONENT_FIELDS = ("executorLabel", "dag", "inputDefinitions", "outputDefinitions")
_TASK_FIELDS = (
    "taskInfo",
    "inputs",
    "dependentTasks",
    "cachingOptions",
    "componentRef",
    "triggerPolicy",
    "parameterIterator",
    "artifactIterator",
    "retryPolicy",
    "iteratorPolicy",
)
_CONTAINER_FIELDS = ("image", "command", "args", "env")
_PASSING = ("", "TRIGGER_STRATEGY_UNSPECIFIED", "ALL_UPSTREAM_TASKS_SUCCEEDED")
_NEGATED = {"==": "!=", "!=": "==", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
_COMPARISON = re.compile(r"\s*(.+?)\s*(==|!=|<=|>=|<|>)\s*(.+?)\s*", re.DOTALL)
_OPERAND = re.compile(r"inputs\.parameter_values\['([^']+)'\]")
_CAST = re.compile(r"(?:int|double|string)\((.*)\)", re.DOTALL)
_STEP_REFERENCE = re.compile(r"\{\{\s*steps\.([a-z][-a-z0-9]*)\.outputs\.")
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")
#: The annotation a converted Pipeline carries (as Kubeflow jobs' conversions do): what it was written as.
KFP_IR_SOURCE = "kfp PipelineSpec"


@dataclass(frozen=True, slots=True)
class _Binding:
    """What a DAG input stands for: a Phalanx reference, or a constant (its JSON value)."""

    reference: str | None = None
    value: Any = None
    #: the step whose output it is (to refuse a loop body reading its own loop's outputs)
    producer: str | None = None


@dataclass(frozen=True, slots=True)
class _Loop:
    items: str | list[Any]
    task: str  # the IR path of the ParallelFor task


@dataclass(frozen=True, slots=True)
class _Context:
    loop: _Loop | None = None
    conditions: tuple[tuple[str, str], ...] = ()  # (when, IR path of the condition)
    after: frozenset[str] = frozenset()  # IR paths of tasks every step here waits for
    cache: bool = True  # false inside a sub-pipeline whose task turns caching off


@dataclass
class _Converter:
    document: Mapping[str, Any]
    problems: list[FieldError] = field(default_factory=list)
    components: Mapping[str, Any] = field(default_factory=dict)
    executors: Mapping[str, Any] = field(default_factory=dict)
    dags: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # IR path of a dag -> the dag
    step_names: dict[str, str] = field(default_factory=dict)  # IR path of an executor task -> step name
    loop_of: dict[str, str | None] = field(default_factory=dict)  # step name -> IR path of its ParallelFor
    under: dict[str, list[str]] = field(default_factory=dict)  # IR path of a task -> the steps it runs
    inline: dict[str, dict[str, Any]] = field(default_factory=dict)  # component name -> its v1 document
    walked: set[str] = field(default_factory=set)  # dag components already flattened
    steps: list[dict[str, Any]] = field(default_factory=list)
    after_of: dict[str, frozenset[str]] = field(default_factory=dict)  # step name -> task paths it waits for

    def fail(self, path: str, message: str) -> None:
        self.problems.append(FieldError(path, message))

    def mapping(self, value: Any, path: str, what: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fail(path, f"{what} must be a mapping, got {short(value)}")
            return {}
        return value

    # ---- the whole document -------------------------------------------------------------------------------

    def convert(self) -> dict[str, Any]:
        doc = self.document
        unknown_fields(doc, _TOP_FIELDS, "", self.problems, what="PipelineSpec")
        schema = doc.get("schemaVersion")
        if schema is not None and not str(schema).startswith("2."):
            self.fail("schemaVersion", f"schema {short(schema)} is not a KFP v2 IR (2.x); compile with kfp 2")
        self.components = self.mapping(doc.get("components"), "components", "components")
        deployment = self.mapping(doc.get("deploymentSpec"), "deploymentSpec", "deploymentSpec")
        unknown_fields(deployment, ("executors",), "deploymentSpec", self.problems, what="deploymentSpec")
        self.executors = self.mapping(deployment.get("executors"), "deploymentSpec.executors", "executors")
        info = self.mapping(doc.get("pipelineInfo"), "pipelineInfo", "pipelineInfo")
        root = self.mapping(doc.get("root"), "root", "root")
        unknown_fields(root, ("inputDefinitions", "dag", "outputDefinitions"), "root", self.problems, what="root")
        parameters, scope = self.pipeline_parameters(root)
        if not isinstance(root.get("dag"), Mapping):
            self.fail("root.dag", "the root of a pipeline is a dag of tasks")
        else:
            self.survey(root["dag"], "root.dag", None, set())
            self.walk(root["dag"], "root.dag", scope, _Context())
        for step in self.steps:
            waits = sorted({name for key in self.after_of[step["name"]] for name in self.under.get(key, [])})
            waits = [name for name in waits if name != step["name"]]
            if waits:
                step["after"] = waits
        self.steps = _in_order(self.steps)
        if not self.steps and not self.problems:
            self.fail("root.dag.tasks", "the pipeline has no task to run")
        if self.problems:
            raise SpecError(self.problems)
        annotations = {CONVERTED_FROM: f"{KFP_IR_SOURCE} {doc.get('schemaVersion', '')}".strip()}
        if isinstance(doc.get("sdkVersion"), str):
            annotations["phalanx.dev/kfp-sdk-version"] = doc["sdkVersion"]
        spec: dict[str, Any] = {"steps": self.steps}
        if parameters:
            spec = {"parameters": parameters, **spec}
        return {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "Pipeline",
            "metadata": {"name": _dns_name(str(info.get("name") or "pipeline")), "annotations": annotations},
            "spec": spec,
        }

    def pipeline_parameters(self, root: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, _Binding]]:
        path = "root.inputDefinitions"
        definitions = self.mapping(root.get("inputDefinitions"), path, "inputDefinitions")
        unknown_fields(definitions, ("parameters", "artifacts"), path, self.problems, what="inputDefinitions")
        for name in self.mapping(definitions.get("artifacts"), f"{path}.artifacts", "artifacts"):
            self.fail(
                f"{path}.artifacts.{name}",
                "pipeline-level artifact inputs are not supported; pass a path or URI as a string parameter",
            )
        parameters: list[dict[str, Any]] = []
        scope: dict[str, _Binding] = {}
        for name, raw in self.mapping(definitions.get("parameters"), f"{path}.parameters", "parameters").items():
            where = f"{path}.parameters.{name}"
            spec = self.mapping(raw, where, "a parameter")
            unknown_fields(
                spec,
                ("parameterType", "type", "defaultValue", "isOptional", "description", "literals"),
                where,
                self.problems,
                what="parameter",
            )
            kind = parameter_type(spec, where, self.problems)
            entry: dict[str, Any] = {"name": name}
            if kind is not None:
                entry["type"] = kind
            if spec.get("defaultValue") is not None:
                entry["default"] = render_value(spec["defaultValue"], kind)
            if isinstance(spec.get("description"), str):
                entry["description"] = spec["description"]
            parameters.append(entry)
            scope[name] = _Binding(reference=f"{{{{params.{name}}}}}")
        return parameters, scope

    # ---- names, before any step is made -------------------------------------------------------------------

    def survey(self, dag: Mapping[str, Any], path: str, loop: str | None, seen: set[str], group: str = "") -> None:
        """Name every executor task and note its loop, so references can be made to tasks not yet converted."""
        self.dags[path] = dag
        for name, task in self.mapping(dag.get("tasks"), f"{path}.tasks", "tasks").items():
            where = f"{path}.tasks.{name}"
            if not isinstance(task, Mapping):
                continue  # walk() reports it
            ref = self.component_name(task, where)
            component = self.components.get(ref) if ref else None
            if ref is None or not isinstance(component, Mapping):
                continue
            if isinstance(component.get("dag"), Mapping):
                if ref in seen:
                    self.fail(
                        f"{where}.componentRef.name",
                        f"component {ref!r} is run by two tasks; a sub-pipeline used more than once is not "
                        "supported (call its components in the outer pipeline instead)",
                    )
                    continue
                seen.add(ref)
                iterates = "parameterIterator" in task or "artifactIterator" in task
                self.survey(component["dag"], f"components.{ref}.dag", where if iterates else loop, seen, name)
            else:
                step = _step_name(name, set(self.step_names.values()), group)
                self.step_names[where] = step
                self.loop_of[step] = loop

    def component_name(self, task: Mapping[str, Any], where: str) -> str | None:
        ref = task.get("componentRef")
        name = ref.get("name") if isinstance(ref, Mapping) else None
        return name if isinstance(name, str) else None

    # ---- the DAG ------------------------------------------------------------------------------------------

    def walk(self, dag: Mapping[str, Any], path: str, scope: Mapping[str, _Binding], context: _Context) -> list[str]:
        """Turn the tasks of ``dag`` into steps; the names of the steps made."""
        unknown_fields(dag, ("tasks", "outputs"), path, self.problems, what="dag")
        tasks = self.mapping(dag.get("tasks"), f"{path}.tasks", "tasks")
        made: list[str] = []
        for name, raw in tasks.items():
            where = f"{path}.tasks.{name}"
            task = self.mapping(raw, where, "a task")
            unknown_fields(task, _TASK_FIELDS, where, self.problems, what="task")
            ref = self.component_name(task, where)
            component = self.components.get(ref) if ref else None
            if not isinstance(component, Mapping):
                self.fail(f"{where}.componentRef.name", f"names no component of this file: {short(ref)}")
                continue
            unknown_fields(component, _COMPONENT_FIELDS, f"components.{ref}", self.problems, what="component")
            waits = set(context.after)
            dependencies = task.get("dependentTasks") or []
            if not isinstance(dependencies, list):
                self.fail(f"{where}.dependentTasks", "must be a list of task names")
                dependencies = []
            for other in dependencies:
                if not isinstance(other, str) or other not in tasks:
                    self.fail(f"{where}.dependentTasks", f"names no task of this dag: {short(other)}")
                    continue
                waits.add(f"{path}.tasks.{other}")
            self.trigger_strategy(task, where)
            bindings = self.task_inputs(task, where, path, scope, context)
            inner = _Context(context.loop, context.conditions, frozenset(waits), context.cache)
            if isinstance(component.get("dag"), Mapping):
                steps = self.group(task, where, str(ref), component, bindings, inner)
            elif "executorLabel" in component:
                steps = self.step(task, where, str(ref), component, bindings, inner)
            else:
                self.fail(f"components.{ref}", "a component runs a dag or an executor (executorLabel)")
                steps = []
            self.under[where] = steps
            made += steps
        return made

    def trigger_strategy(self, task: Mapping[str, Any], where: str) -> None:
        policy = self.mapping(task.get("triggerPolicy"), f"{where}.triggerPolicy", "triggerPolicy")
        unknown_fields(policy, ("condition", "strategy"), f"{where}.triggerPolicy", self.problems, what="triggerPolicy")
        if str(policy.get("strategy", "")) not in _PASSING:
            self.fail(
                f"{where}.triggerPolicy.strategy",
                f"{short(policy['strategy'])}: tasks that run after a failure (dsl.ExitHandler, "
                "ignore_upstream_failure) are not supported; a step runs when its upstream steps succeeded",
            )

    def group(
        self,
        task: Mapping[str, Any],
        where: str,
        ref: str,
        component: Mapping[str, Any],
        bindings: Mapping[str, _Binding],
        context: _Context,
    ) -> list[str]:
        """A ParallelFor, a condition or a plain group: its tasks become steps with the group's settings."""
        if ref in self.walked:
            return []  # a dag component run twice (or by itself): survey() refused it
        self.walked.add(ref)
        if "retryPolicy" in task:
            self.fail(
                f"{where}.retryPolicy", "retries of a whole sub-pipeline are not supported; set them on its tasks"
            )
        # A sub-pipeline's task has caching options of its own: off there turns caching off for every step inside.
        caching = self.cache(task, where) if "cachingOptions" in task else True
        if "artifactIterator" in task:
            self.fail(f"{where}.artifactIterator", "a ParallelFor over artifacts is not supported; loop over values")
        scope = dict(bindings)
        loop = context.loop
        conditions = context.conditions
        policy = task.get("triggerPolicy")
        if isinstance(policy, Mapping) and policy.get("condition"):
            at = f"{where}.triggerPolicy.condition"
            when = self.condition(policy["condition"], at, scope)
            if when is not None:
                conditions = (*conditions, (when, at))
        if "parameterIterator" in task:
            at = f"{where}.parameterIterator"
            if loop is not None:
                self.fail(at, f"a ParallelFor inside a ParallelFor ({loop.task}) is not supported; flatten the list")
            iterator = self.mapping(task["parameterIterator"], at, "parameterIterator")
            unknown_fields(iterator, ("items", "itemInput"), at, self.problems, what="parameterIterator")
            items = self.loop_items(iterator.get("items"), f"{at}.items", scope)
            item_input = iterator.get("itemInput")
            if not isinstance(item_input, str):
                self.fail(f"{at}.itemInput", "names the input that takes each item")
            elif items is not None:
                scope[item_input] = _Binding(reference="{{item}}")
                loop = _Loop(items, where)
        inner = _Context(loop, conditions, context.after, context.cache and caching)
        return self.walk(component["dag"], f"components.{ref}.dag", scope, inner)

    def loop_items(self, raw: Any, at: str, scope: Mapping[str, _Binding]) -> str | list[Any] | None:
        items = self.mapping(raw, at, "items")
        unknown_fields(items, ("raw", "inputParameter"), at, self.problems, what="items")
        if "raw" in items:
            try:
                parsed = json.loads(items["raw"]) if isinstance(items["raw"], str) else None
            except ValueError:
                parsed = None
            if not isinstance(parsed, list):
                self.fail(f"{at}.raw", f"must be a JSON list, got {short(items['raw'])}")
                return None
            return [json.loads(render_value(item, None)) if not isinstance(item, str) else item for item in parsed]
        name = items.get("inputParameter")
        binding = scope.get(name) if isinstance(name, str) else None
        if binding is None:
            self.fail(f"{at}.inputParameter", f"names no input of this group: {short(name)}")
            return None
        if binding.reference is None:
            value = binding.value
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
                    value = None
            if not isinstance(value, list):
                self.fail(f"{at}.inputParameter", f"loops over {short(binding.value)}, which is not a list")
                return None
            return [json.loads(render_value(item, None)) if not isinstance(item, str) else item for item in value]
        return binding.reference

    def condition(self, text: Any, at: str, scope: Mapping[str, _Binding]) -> str | None:
        """The CEL condition as one Phalanx comparison, or None (refused at ``at``)."""
        if not isinstance(text, str):
            self.fail(at, f"must be a condition string, got {short(text)}")
            return None
        body = text.strip()
        if "&&" in body or "||" in body:
            self.fail(
                at,
                f"{short(text)}: a condition of several comparisons (dsl.Elif) is not supported; Phalanx's when "
                "is one comparison (use dsl.If and dsl.Else)",
            )
            return None
        negate = body.startswith("!(") and body.endswith(")")
        if negate:
            body = body[2:-1]
        match = _COMPARISON.fullmatch(body)
        if match is None:
            self.fail(at, f"{short(text)}: not a comparison Phalanx can run (A op B, op one of == != < <= > >=)")
            return None
        left = self.operand(match.group(1), at, scope)
        right = self.operand(match.group(3), at, scope)
        if left is None or right is None:
            return None
        op = _NEGATED[match.group(2)] if negate else match.group(2)
        return f"{left} {op} {right}"

    def operand(self, text: str, at: str, scope: Mapping[str, _Binding]) -> str | None:
        inner = text.strip()
        if cast := _CAST.fullmatch(inner):
            inner = cast.group(1).strip()
        if reference := _OPERAND.fullmatch(inner):
            binding = scope.get(reference.group(1))
            if binding is None:
                self.fail(at, f"reads {reference.group(1)!r}, which is no input of this group")
                return None
            if binding.reference is not None:
                return binding.reference
            return _quoted(render_value(binding.value, None))
        if len(inner) >= 2 and inner[0] == inner[-1] == "'":
            return _quoted(inner[1:-1])
        if inner in ("true", "false") or _NUMBER.fullmatch(inner):
            return inner
        self.fail(at, f"{short(text)}: a side of a condition is an input, a string, a number or a boolean")
        return None

    # ---- inputs -------------------------------------------------------------------------------------------

    def task_inputs(
        self, task: Mapping[str, Any], where: str, dag: str, scope: Mapping[str, _Binding], context: _Context
    ) -> dict[str, _Binding]:
        at = f"{where}.inputs"
        inputs = self.mapping(task.get("inputs"), at, "inputs")
        unknown_fields(inputs, ("parameters", "artifacts"), at, self.problems, what="inputs")
        bindings: dict[str, _Binding] = {}
        for name, raw in self.mapping(inputs.get("parameters"), f"{at}.parameters", "parameters").items():
            path = f"{at}.parameters.{name}"
            spec = self.mapping(raw, path, "an input")
            kinds = ("componentInputParameter", "taskOutputParameter", "runtimeValue", "taskFinalStatus")
            unknown_fields(spec, (*kinds, "parameterExpressionSelector"), path, self.problems, what="input")
            if "parameterExpressionSelector" in spec:
                self.fail(
                    f"{path}.parameterExpressionSelector",
                    "selecting a field of a value (a ParallelFor item's field, item.a) is not supported; loop "
                    "over a list of plain values, or pass the whole item and read the field in the component",
                )
                continue
            if "taskFinalStatus" in spec:
                self.fail(f"{path}.taskFinalStatus", "exit handlers (dsl.PipelineTaskFinalStatus) are not supported")
                continue
            binding = self.input_binding(spec, path, dag, scope, context, artifact=False)
            if binding is not None:
                bindings[name] = binding
        for name, raw in self.mapping(inputs.get("artifacts"), f"{at}.artifacts", "artifacts").items():
            path = f"{at}.artifacts.{name}"
            spec = self.mapping(raw, path, "an input")
            unknown_fields(spec, ("componentInputArtifact", "taskOutputArtifact"), path, self.problems, what="input")
            binding = self.input_binding(spec, path, dag, scope, context, artifact=True)
            if binding is not None:
                bindings[name] = binding
        return bindings

    def input_binding(
        self,
        spec: Mapping[str, Any],
        path: str,
        dag: str,
        scope: Mapping[str, _Binding],
        context: _Context,
        *,
        artifact: bool,
    ) -> _Binding | None:
        from_input = spec.get("componentInputArtifact" if artifact else "componentInputParameter")
        if from_input is not None:
            binding = scope.get(from_input) if isinstance(from_input, str) else None
            if binding is None:
                self.fail(path, f"reads {short(from_input)}, which is no input of the enclosing dag")
            return binding
        key = "taskOutputArtifact" if artifact else "taskOutputParameter"
        if key in spec:
            output = self.mapping(spec[key], f"{path}.{key}", key)
            field_name = "outputArtifactKey" if artifact else "outputParameterKey"
            unknown_fields(output, ("producerTask", field_name), f"{path}.{key}", self.problems, what=key)
            binding = self.output(dag, output.get("producerTask"), output.get(field_name), f"{path}.{key}")
            if binding is not None and self.in_same_loop(binding, context):
                self.fail(
                    f"{path}.{key}",
                    f"reads an output of {binding.producer!r} inside the same ParallelFor; Phalanx fans out "
                    "one step at a time, so a loop body's tasks must not feed each other (make the body "
                    "one component, or loop twice)",
                )
                return None
            return binding
        if "runtimeValue" in spec and not artifact:
            runtime = self.mapping(spec["runtimeValue"], f"{path}.runtimeValue", "runtimeValue")
            unknown_fields(runtime, ("constant", "constantValue"), f"{path}.runtimeValue", self.problems, what="value")
            value = runtime.get("constant")
            if value is None and isinstance(runtime.get("constantValue"), Mapping):
                value = next(iter(runtime["constantValue"].values()), None)
            if isinstance(value, str) and "{{$" in value:
                self.fail(
                    f"{path}.runtimeValue.constant",
                    f"{short(value)}: run-level placeholders (dsl.PIPELINE_JOB_NAME_PLACEHOLDER...) have no "
                    "Phalanx counterpart yet",
                )
                return None
            return _Binding(value=value)
        self.fail(path, "an input comes from a component input, a task output or a runtime value")
        return None

    def in_same_loop(self, binding: _Binding, context: _Context) -> bool:
        """Whether ``binding`` is an output of a step fanned out by the loop the reader is in."""
        if context.loop is None or binding.producer is None:
            return False
        return self.loop_of.get(binding.producer) == context.loop.task

    def output(self, dag: str, producer: Any, key: Any, path: str, depth: int = 0) -> _Binding | None:
        """The binding of output ``key`` of task ``producer`` of the dag at IR path ``dag``."""
        if depth > len(self.components):  # a group's output selecting itself (a hand-made loop)
            self.fail(path, "the output leads back to itself through the groups' outputs")
            return None
        tasks = self.dags.get(dag, {}).get("tasks")
        task = tasks.get(producer) if isinstance(tasks, Mapping) and isinstance(producer, str) else None
        if not isinstance(task, Mapping) or not isinstance(key, str):
            self.fail(path, f"names no task output of this dag: {short(producer)}.{short(key)}")
            return None
        where = f"{dag}.tasks.{producer}"
        ref = self.component_name(task, where)
        component = self.components.get(ref) if ref else None
        if not isinstance(component, Mapping):
            return None  # reported where the producer is walked
        if where in self.step_names:
            outputs = self.mapping(component.get("outputDefinitions"), "", "outputDefinitions")
            declared = {
                *self.mapping(outputs.get("parameters"), "", "parameters"),
                *self.mapping(outputs.get("artifacts"), "", "artifacts"),
            }
            if key not in declared:
                self.fail(path, f"task {producer!r} has no output {key!r}")
                return None
            step = self.step_names[where]
            return _Binding(reference=f"{{{{steps.{step}.outputs.{key}}}}}", producer=step)
        outputs = self.mapping(self.mapping(component.get("dag"), "", "dag").get("outputs"), "", "outputs")
        at = f"components.{ref}.dag.outputs"
        parameter = self.mapping(outputs.get("parameters"), "", "parameters").get(key)
        if isinstance(parameter, Mapping):
            if "valueFromParameter" not in parameter:
                self.fail(f"{at}.parameters.{key}", "dsl.OneOf (an output chosen among branches) is not supported")
                return None
            selector = self.mapping(parameter["valueFromParameter"], "", "selector")
            inner = f"components.{ref}.dag"
            subtask, subkey = selector.get("producerSubtask"), selector.get("outputParameterKey")
            return self.output(inner, subtask, subkey, path, depth + 1)
        artifact = self.mapping(outputs.get("artifacts"), "", "artifacts").get(key)
        if isinstance(artifact, Mapping):
            selectors = artifact.get("artifactSelectors")
            if not isinstance(selectors, list) or len(selectors) != 1 or not isinstance(selectors[0], Mapping):
                self.fail(f"{at}.artifacts.{key}", "dsl.OneOf (an output chosen among branches) is not supported")
                return None
            inner = f"components.{ref}.dag"
            subtask, subkey = selectors[0].get("producerSubtask"), selectors[0].get("outputArtifactKey")
            return self.output(inner, subtask, subkey, path, depth + 1)
        self.fail(path, f"group {producer!r} has no output {key!r}")
        return None

    # ---- steps --------------------------------------------------------------------------------------------

    def step(
        self,
        task: Mapping[str, Any],
        where: str,
        ref: str,
        component: Mapping[str, Any],
        bindings: Mapping[str, _Binding],
        context: _Context,
    ) -> list[str]:
        name = self.step_names.get(where)
        document = self.component(ref, component)
        retries = self.retries(task, where)
        cache = self.cache(task, where)
        if name is None or document is None:
            return []
        types = {item["name"]: item.get("type") for item in document.get("inputs", [])}
        arguments = {
            key: binding.reference if binding.reference is not None else render_value(binding.value, types.get(key))
            for key, binding in bindings.items()
        }
        step: dict[str, Any] = {"name": name, "component": {"inline": document}}
        if arguments:
            step["arguments"] = arguments
        if context.loop is not None:
            step["parallelFor"] = {"items": context.loop.items}
        if len(context.conditions) > 1:
            self.fail(
                context.conditions[1][1],
                f"task {where.rsplit('.', 1)[-1]!r} runs under two conditions; Phalanx's when is one comparison "
                "(nest no dsl.If in another, or compute the combined test in a component)",
            )
        elif context.conditions:
            step["when"] = context.conditions[0][0]
        if retries:
            step["retries"] = retries
        step["cache"] = cache and context.cache
        self.after_of[name] = context.after
        self.steps.append(step)
        return [name]

    def retries(self, task: Mapping[str, Any], where: str) -> int:
        policy = self.mapping(task.get("retryPolicy"), f"{where}.retryPolicy", "retryPolicy")
        allowed = ("maxRetryCount", "backoffDuration", "backoffFactor", "backoffMaxDuration")
        unknown_fields(policy, allowed, f"{where}.retryPolicy", self.problems, what="retryPolicy")
        count = policy.get("maxRetryCount", 0)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            self.fail(f"{where}.retryPolicy.maxRetryCount", f"must be a whole number >= 0, got {short(count)}")
            return 0
        return count

    def cache(self, task: Mapping[str, Any], where: str) -> bool:
        options = self.mapping(task.get("cachingOptions"), f"{where}.cachingOptions", "cachingOptions")
        unknown_fields(options, ("enableCache",), f"{where}.cachingOptions", self.problems, what="cachingOptions")
        return options.get("enableCache") is True

    def component(self, ref: str, component: Mapping[str, Any]) -> dict[str, Any] | None:
        """The executor of ``ref`` as an inline KFP v1 component document (made once per component)."""
        if ref in self.inline:
            return self.inline[ref]
        before = len(self.problems)
        at = f"components.{ref}"
        label = component.get("executorLabel")
        executor = self.executors.get(label) if isinstance(label, str) else None
        if not isinstance(executor, Mapping):
            self.fail(f"{at}.executorLabel", f"names no executor of deploymentSpec.executors: {short(label)}")
            return None
        exe = f"deploymentSpec.executors.{label}"
        for kind, why in (
            ("importer", "dsl.importer is not supported; pass the artifact's location as a parameter"),
            ("resolver", "resolvers are not supported"),
            ("customJob", "Vertex AI custom jobs are not supported"),
        ):
            if kind in executor:
                self.fail(f"{exe}.{kind}", why)
                return None
        unknown_fields(executor, ("container",), exe, self.problems, what="executor")
        container = self.mapping(executor.get("container"), f"{exe}.container", "container")
        for key, why in (
            (
                "resources",
                "container resources are not supported on component steps; run the work as a "
                "trainingJob step, which sets resources",
            ),
            ("lifecycle", "container lifecycle hooks (pre-cache checks) are not supported"),
        ):
            if key in container:
                self.fail(f"{exe}.container.{key}", why)
        unknown_fields(
            {k: v for k, v in container.items() if k not in ("resources", "lifecycle")},
            _CONTAINER_FIELDS,
            f"{exe}.container",
            self.problems,
            what="container",
        )
        v1_container: dict[str, Any] = {"image": container.get("image")}
        for key in ("command", "args"):
            items = container.get(key)
            if items is None:
                continue
            if not isinstance(items, list):
                self.fail(f"{exe}.container.{key}", "must be a list of strings")
                continue
            v1_container[key] = [
                convert_item(item, f"{exe}.container.{key}[{i}]", self.problems) for i, item in enumerate(items)
            ]
        env = container.get("env")
        if env is not None:
            v1_container["env"] = self.env(env, f"{exe}.container.env")
        document = {
            "name": ref.removeprefix("comp-"),
            "inputs": self.interface(component, at, "inputDefinitions"),
            "outputs": self.interface(component, at, "outputDefinitions"),
            "implementation": {"container": v1_container},
        }
        if len(self.problems) > before:
            return None
        try:
            parse_component(document)
        except SpecError as err:
            for error in err.errors:
                self.fail(exe, f"as a component, {error.path}: {error.message}")
            return None
        self.inline[ref] = document
        return document

    def env(self, env: Any, at: str) -> dict[str, Any]:
        if not isinstance(env, list):
            self.fail(at, "must be a list of {name, value}")
            return {}
        found: dict[str, Any] = {}
        for index, item in enumerate(env):
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                self.fail(f"{at}[{index}]", "must be {name: NAME, value: VALUE}")
                continue
            unknown_fields(item, ("name", "value"), f"{at}[{index}]", self.problems, what="env")
            found[item["name"]] = convert_string(str(item.get("value", "")), f"{at}[{index}].value", self.problems)
        return found

    def interface(self, component: Mapping[str, Any], at: str, key: str) -> list[dict[str, Any]]:
        """A component's inputs (or outputs) as v1 declarations: parameters typed, artifacts by their type."""
        where = f"{at}.{key}"
        definitions = self.mapping(component.get(key), where, key)
        unknown_fields(definitions, ("parameters", "artifacts"), where, self.problems, what=key)
        declared: list[dict[str, Any]] = []
        parameter_fields: tuple[str, ...] = ("parameterType", "type", "description")
        if key == "inputDefinitions":
            parameter_fields += ("defaultValue", "isOptional", "literals")
        for name, raw in self.mapping(definitions.get("parameters"), f"{where}.parameters", "parameters").items():
            path = f"{where}.parameters.{name}"
            spec = self.mapping(raw, path, "a parameter")
            unknown_fields(spec, parameter_fields, path, self.problems, what="parameter")
            kind = parameter_type(spec, path, self.problems)
            entry: dict[str, Any] = {"name": name, "type": kind}
            if spec.get("defaultValue") is not None:
                entry["default"] = render_value(spec["defaultValue"], kind)
            if spec.get("isOptional") is True:
                entry["optional"] = True
            declared.append(entry)
        artifact_fields: tuple[str, ...] = ("artifactType", "isArtifactList", "description")
        artifact_fields += ("isOptional",) if key == "inputDefinitions" else ("metadata",)
        for name, raw in self.mapping(definitions.get("artifacts"), f"{where}.artifacts", "artifacts").items():
            path = f"{where}.artifacts.{name}"
            spec = self.mapping(raw, path, "an artifact")
            unknown_fields(spec, artifact_fields, path, self.problems, what="artifact")
            if spec.get("isArtifactList") is True:
                self.fail(
                    f"{path}.isArtifactList",
                    "lists of artifacts (List[Dataset], Collected artifacts) are not supported",
                )
            entry = {"name": name, "type": artifact_type(spec)}
            if spec.get("isOptional") is True:
                entry["optional"] = True
            declared.append(entry)
        return declared


def _in_order(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Steps upstream first (the IR lists tasks by name), the IR's order among steps ready together."""
    names = [step["name"] for step in steps]
    upstream = {
        step["name"]: {*step.get("after", []), *_STEP_REFERENCE.findall(json.dumps(step.get("arguments", {})))}
        | set(_STEP_REFERENCE.findall(json.dumps([step.get("when"), step.get("parallelFor")])))
        for step in steps
    }
    try:
        order = topological_order(names, upstream)
    except StopIteration:  # a cycle (a hand-edited file): the DAG check names it
        return steps
    by_name = {step["name"]: step for step in steps}
    return [by_name[name] for name in order]


def _quoted(text: str) -> str:
    return f"'{text}'" if "'" not in text else f'"{text}"'


def _step_name(task: str, taken: set[str], group: str = "") -> str:
    """A KFP task name as a Phalanx step name: lowercase, '-', a letter first, short enough, unique.

    The SDK names tasks uniquely except across sub-pipelines: a task of one whose name is taken is called
    ``<sub-pipeline task>-<task>``.
    """
    name = _clean(task)
    if name in taken and group and not group.startswith(("for-loop-", "condition-")):
        name = _clean(f"{group}-{task}")
    if len(name) > MAX_STEP_NAME_LENGTH or name in taken:
        digest = hashlib.sha256(task.encode()).hexdigest()[:8]
        name = f"{name[: MAX_STEP_NAME_LENGTH - 9].rstrip('-')}-{digest}"
    counter = 2
    base = name
    while name in taken:
        name = f"{base[: MAX_STEP_NAME_LENGTH - 4]}-{counter}"
        counter += 1
    return name


def _clean(task: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", task.lower()).strip("-") or "task"
    return name if name[0].isalpha() else f"t-{name}"


def _dns_name(name: str) -> str:
    cleaned = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].strip("-")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = f"p-{cleaned}".rstrip("-")[:63]
    return cleaned


def pipeline_from_ir(document: Mapping[str, Any], *, source: str | None = None) -> dict[str, Any]:
    """The Phalanx Pipeline document a compiled KFP v2 pipeline (its IR YAML, loaded) becomes.

    Raises:
        SpecError: every IR feature Phalanx does not run and every malformed part, each at its IR path.
    """
    try:
        return _Converter(document).convert()
    except SpecError as err:
        raise SpecError(err.errors, source=source) from None


def pipelines_from_ir(documents: Sequence[Mapping[str, Any]], *, source: str | None = None) -> list[Any]:
    """The documents of a file with each compiled KFP v2 pipeline replaced by its Pipeline document (the door's).

    The platform document ``kfp-kubernetes`` writes after the IR (``platforms: {kubernetes: ...}``) is refused:
    its volumes, secrets and node selectors would be lost.

    Raises:
        SpecError: every problem of every IR document, each at its IR path (``document N:`` before it when the
            file holds several documents).
    """
    converted: list[Any] = []
    errors: list[FieldError] = []
    for position, document in enumerate(documents):
        prefix = f"document {position + 1}: " if len(documents) > 1 else ""
        if is_kfp_ir(document):
            try:
                converted.append(pipeline_from_ir(document))
            except SpecError as err:
                errors.extend(FieldError(error.path, prefix + error.message) for error in err.errors)
        elif isinstance(document, Mapping) and set(document) == {"platforms"}:
            errors.append(
                FieldError(
                    "platforms",
                    f"{prefix}Kubernetes platform settings of a KFP pipeline (kfp-kubernetes) are not supported; "
                    "remove this document",
                )
            )
        else:
            converted.append(document)
    if errors:
        raise SpecError(errors, source=source)
    return converted
