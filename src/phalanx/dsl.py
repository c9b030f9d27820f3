"""A small Python DSL that writes Phalanx Pipeline documents: steps, the wiring between them, and a submit.

    from phalanx import Client, dsl

    p = dsl.Pipeline("train-eval")
    rows = p.param("rows", "Integer", default=100)
    prep = p.component("prepare", "components/prepare.yaml", arguments={"rows": rows})
    train = p.training_job(
        "train",
        {"type": "generic", "replicas": {"worker": {"count": 1, "template": {"command": ["python", "train.py"]}}}},
        arguments={"data": prep.outputs["data"]},
        outputs={"model": "Model", "accuracy": "Float"},
    )
    p.command(
        "evaluate",
        ["python", "eval.py", dsl.input_path("model"), dsl.input_value("shard")],
        inputs={"model": "Model", "shard": "Integer"},
        arguments={"model": train.outputs["model"], "shard": dsl.ITEM},
        parallel_for=[0, 1, 2],
        when=train.outputs["accuracy"] > 0.8,
        retries=2,
    )
    print(p.to_yaml())
    p.submit(Client(), arguments={"rows": 200})   # the Pipeline and a PipelineRun of it

It is Phalanx's own, not KFP's: what it writes is the YAML a person would (``docs/pipelines.md``), and the door
checks it as any other file (``Pipeline.check`` runs the same checks before anything is sent). A component file is
read when the step is defined and put in the document inline, so the document holds everything it runs; an
output name the step does not declare is refused at once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from phalanx.core.pipelines.references import render
from phalanx.model.errors import FieldError, SpecError
from phalanx.model.kfp_component import parse_component
from phalanx.model.loading import parse_documents


@dataclass(frozen=True, slots=True)
class Condition:
    """A ``when`` condition: ``left op right``, one comparison (``ref > 0.8``, ``ref.eq("adam")``)."""

    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Ref:
    """A value known when the run runs: ``{{params.NAME}}``, ``{{steps.STEP.outputs.NAME}}`` or ``{{item}}``."""

    text: str

    def __str__(self) -> str:
        return self.text

    def _compare(self, op: str, other: object) -> Condition:
        right = other.text if isinstance(other, Ref) else _operand(other)
        return Condition(f"{self.text} {op} {right}")

    def __lt__(self, other: object) -> Condition:
        return self._compare("<", other)

    def __le__(self, other: object) -> Condition:
        return self._compare("<=", other)

    def __gt__(self, other: object) -> Condition:
        return self._compare(">", other)

    def __ge__(self, other: object) -> Condition:
        return self._compare(">=", other)

    def eq(self, other: object) -> Condition:
        """``self == other`` as a condition (``==`` itself keeps its Python meaning)."""
        return self._compare("==", other)

    def ne(self, other: object) -> Condition:
        """``self != other`` as a condition."""
        return self._compare("!=", other)


#: The current item of a step with ``parallel_for``.
ITEM = Ref("{{item}}")


def _operand(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    return f"'{text}'" if "'" not in text else f'"{text}"'


def input_value(name: str) -> dict[str, str]:
    """``{inputValue: NAME}`` for a command line: the input's value."""
    return {"inputValue": name}


def input_path(name: str) -> dict[str, str]:
    """``{inputPath: NAME}``: a local path holding the input's data."""
    return {"inputPath": name}


def output_path(name: str) -> dict[str, str]:
    """``{outputPath: NAME}``: the local path the program writes the output to."""
    return {"outputPath": name}


class Outputs:
    """A step's outputs by name: ``step.outputs["model"]`` is a reference to it."""

    def __init__(self, step: str, names: Sequence[str] | None) -> None:
        self._step = step
        self._names = names

    def __getitem__(self, name: str) -> Ref:
        if self._names is not None and name not in self._names:
            known = ", ".join(repr(item) for item in self._names) or "none"
            raise KeyError(f"step {self._step!r} has no output {name!r}; its outputs: {known}")
        return Ref(f"{{{{steps.{self._step}.outputs.{name}}}}}")


@dataclass(frozen=True)
class Step:
    """A step defined in a pipeline: its name and its outputs."""

    name: str
    outputs: Outputs


class Submitter(Protocol):
    """What ``Pipeline.submit`` needs of a client: ``phalanx.Client`` (embedded or Kubernetes) is one."""

    def submit(self, spec: Any) -> Any:  # noqa: D102
        ...


_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def _component_file(path: Path, step: str) -> Any:
    """The one document of the component file at ``path``; a ``SpecError`` naming the step when it cannot be read."""
    where = f"the component of step {step!r}"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        shown = path if path.is_absolute() else f"{path} (relative to the current directory, {Path.cwd()})"
        problem = f"{where}: cannot read {shown}: {why}; give the path of a KFP component.yaml"
        raise SpecError([FieldError("", problem)], source=str(path)) from None
    documents = parse_documents(text, source=str(path))  # YAML errors by line and column, within the limits
    if len(documents) != 1:
        problem = f"{where}: {path} holds {len(documents)} documents; a component file holds one component"
        raise SpecError([FieldError("", problem)], source=str(path))
    return documents[0]


@dataclass
class Pipeline:
    """A Pipeline document being written: ``param``, the step verbs, then ``to_yaml``/``to_dict``/``submit``."""

    name: str
    namespace: str | None = None
    _parameters: list[dict[str, Any]] = field(default_factory=list)
    _steps: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name) or len(self.name) > 63:
            raise ValueError(f"pipeline name {self.name!r} must be lowercase letters, digits and '-' (a DNS label)")

    def param(self, name: str, type: str = "String", *, default: Any = None, description: str | None = None) -> Ref:
        """Declare a pipeline parameter (a KFP type name: String, Integer, Float, Boolean, JsonArray, JsonObject)."""
        entry: dict[str, Any] = {"name": name, "type": type}
        if default is not None:
            entry["default"] = render(default)
        if description is not None:
            entry["description"] = description
        self._parameters.append(entry)
        return Ref(f"{{{{params.{name}}}}}")

    def component(
        self,
        name: str,
        component: str | Path | Mapping[str, Any],
        *,
        arguments: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Step:
        """A step running a KFP v1 component: a ``component.yaml`` path (read now, put inline) or its mapping.

        ``options``: ``parallel_for``, ``when``, ``retries``, ``cache``, ``after`` (see ``command``).
        """
        source = str(component) if isinstance(component, str | Path) else None
        document = _component_file(Path(component), name) if isinstance(component, str | Path) else dict(component)
        parsed = parse_component(document, source=source)
        outputs = [item.name for item in parsed.outputs]
        step = {"name": name, "component": {"inline": document}}
        return self._add(step, arguments, outputs, options)

    def command(
        self,
        name: str,
        command: Sequence[str | Mapping[str, Any]],
        *,
        image: str = "python:3.11",
        inputs: Mapping[str, str | None] | None = None,
        outputs: Mapping[str, str | None] | None = None,
        arguments: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Step:
        """A step running one command line: an inline component with these inputs and outputs (name -> type).

        The command holds strings and ``input_value``/``input_path``/``output_path`` placeholders. ``options``:
        ``parallel_for`` (a list, or a reference to a JSON array), ``when`` (a ``Condition`` or its text),
        ``retries``, ``cache``, ``after`` (steps or names).
        """
        declared = {
            "name": name,
            "inputs": [_declaration(key, kind) for key, kind in (inputs or {}).items()],
            "outputs": [_declaration(key, kind) for key, kind in (outputs or {}).items()],
            "implementation": {"container": {"image": image, "command": list(command)}},
        }
        return self.component(name, declared, arguments=arguments, **options)

    def training_job(
        self,
        name: str,
        spec: Mapping[str, Any],
        *,
        arguments: Mapping[str, Any] | None = None,
        inputs: Mapping[str, str | None] | None = None,
        outputs: Mapping[str, str | None] | None = None,
        **options: Any,
    ) -> Step:
        """A step running a TrainingJob spec; its strings read arguments as ``${inputs.NAME}``.

        An output NAME is the file or folder the job writes at ``$PHALANX_OUTPUTS/NAME``.
        """
        step: dict[str, Any] = {"name": name, "trainingJob": {"spec": dict(spec)}}
        return self._add(_declared(step, inputs, outputs), arguments, list(outputs or {}), options)

    def sweep(
        self,
        name: str,
        spec: Mapping[str, Any],
        *,
        arguments: Mapping[str, Any] | None = None,
        inputs: Mapping[str, str | None] | None = None,
        **options: Any,
    ) -> Step:
        """A tuning step running a Sweep spec; its outputs are ``bestParameters``, ``bestValue`` and ``bestTrial``."""
        step: dict[str, Any] = {"name": name, "sweep": {"spec": dict(spec)}}
        return self._add(
            _declared(step, inputs, None), arguments, ["bestParameters", "bestValue", "bestTrial"], options
        )

    def _add(
        self,
        step: dict[str, Any],
        arguments: Mapping[str, Any] | None,
        outputs: Sequence[str],
        options: Mapping[str, Any],
    ) -> Step:
        unknown = set(options) - {"parallel_for", "when", "retries", "cache", "after"}
        if unknown:
            raise TypeError(f"unknown step options: {', '.join(sorted(unknown))}")
        if any(existing["name"] == step["name"] for existing in self._steps):
            raise ValueError(f"a step called {step['name']!r} is already defined")
        if arguments:
            step["arguments"] = {key: _argument(value) for key, value in arguments.items()}
        if "parallel_for" in options:
            items = options["parallel_for"]
            step["parallelFor"] = {"items": items.text if isinstance(items, Ref) else list(items)}
        if options.get("when") is not None:
            step["when"] = str(options["when"])
        if options.get("retries"):
            step["retries"] = int(options["retries"])
        if "cache" in options:
            step["cache"] = bool(options["cache"])
        if options.get("after"):
            step["after"] = [item.name if isinstance(item, Step) else str(item) for item in options["after"]]
        self._steps.append(step)
        return Step(step["name"], Outputs(step["name"], outputs))

    def to_dict(self) -> dict[str, Any]:
        """The Pipeline document."""
        metadata: dict[str, Any] = {"name": self.name}
        if self.namespace is not None:
            metadata["namespace"] = self.namespace
        spec: dict[str, Any] = {"steps": [dict(step) for step in self._steps]}
        if self._parameters:
            spec = {"parameters": [dict(item) for item in self._parameters], **spec}
        return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Pipeline", "metadata": metadata, "spec": spec}

    def check(self) -> Any:
        """Run the door's checks on the Pipeline document (against the built-in JobTypes); the stored form.

        Raises:
            SpecError: every problem, each at its path in the document, as ``submit`` would report it.
        """
        from phalanx.model.loading import builtin_jobtypes
        from phalanx.services.operations import validate_documents

        [pipeline] = validate_documents([self.to_dict()], builtin_jobtypes())
        return pipeline

    def to_yaml(self) -> str:
        """The Pipeline document as YAML (keys in the order a person writes them)."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)

    def run(self, name: str | None = None, *, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A PipelineRun document of this pipeline (``<pipeline>-run`` unless named)."""
        metadata: dict[str, Any] = {"name": name or f"{self.name}-run"}
        if self.namespace is not None:
            metadata["namespace"] = self.namespace
        spec: dict[str, Any] = {"pipelineRef": {"name": self.name}}
        if arguments:
            spec["arguments"] = {key: render(value) for key, value in arguments.items()}
        return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "PipelineRun", "metadata": metadata, "spec": spec}

    def submit(
        self,
        client: Submitter,
        *,
        run: bool = True,
        run_name: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> Any:
        """Submit the Pipeline (and, unless ``run=False``, a PipelineRun of it) through ``client`` in one submission.

        Nothing is created if either is invalid; returns what ``client.submit`` returns.
        """
        documents = [self.to_dict()]
        if run:
            documents.append(self.run(run_name, arguments=arguments))
        return client.submit(documents)


def _declaration(name: str, kind: str | None) -> dict[str, Any]:
    return {"name": name} if kind is None else {"name": name, "type": kind}


def _declared(
    step: dict[str, Any], inputs: Mapping[str, str | None] | None, outputs: Mapping[str, str | None] | None
) -> dict[str, Any]:
    if inputs:
        step["inputs"] = [_declaration(key, kind) for key, kind in inputs.items()]
    if outputs:
        step["outputs"] = [_declaration(key, kind) for key, kind in outputs.items()]
    return step


def _argument(value: Any) -> str:
    """An argument as the document's string: a reference's text, a string as is, anything else as JSON."""
    if isinstance(value, Ref):
        return value.text
    return render(value)


__all__ = [
    "ITEM",
    "Condition",
    "Outputs",
    "Pipeline",
    "Ref",
    "Step",
    "Submitter",
    "input_path",
    "input_value",
    "output_path",
]
