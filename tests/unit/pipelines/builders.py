"""Fluent builders for pipeline tests: ``pipeline().component("a", ...).job("b", ...).spec()``."""

from __future__ import annotations

from typing import Any

from phalanx.core.pipelines.dag import InputDecl, OutputDecl, PipelineGraph, StepInterface, check_pipeline
from phalanx.model.kfp_component import ComponentSpec, parse_component, type_name
from phalanx.model.pipelines import Pipeline, PipelineSpec, parse_pipeline


def job_spec(*command: str) -> dict[str, Any]:
    return {"replicas": {"worker": {"count": 1, "template": {"command": list(command or ("true",))}}}}


class PipelineBuilder:
    def __init__(self) -> None:
        self.parameters: list[dict[str, Any]] = []
        self.steps: list[dict[str, Any]] = []
        self.interfaces: dict[str, StepInterface] = {}

    def param(self, name: str, type_: str = "String", default: str | None = None) -> PipelineBuilder:
        entry: dict[str, Any] = {"name": name, "type": type_}
        if default is not None:
            entry["default"] = default
        self.parameters.append(entry)
        return self

    def component(
        self,
        name: str,
        *,
        inputs: tuple[InputDecl, ...] = (),
        outputs: tuple[OutputDecl, ...] = (),
        **fields: Any,
    ) -> PipelineBuilder:
        self.steps.append({"name": name, "component": {"path": f"components/{name}.yaml"}, **_wire(fields)})
        self.interfaces[name] = StepInterface(inputs, outputs)
        return self

    def job(self, name: str, *, command: tuple[str, ...] = ("true",), **fields: Any) -> PipelineBuilder:
        self.steps.append({"name": name, "trainingJob": {"spec": job_spec(*command)}, **_wire(fields)})
        return self

    def raw(self) -> dict[str, Any]:
        return {"metadata": {"name": "p"}, "spec": {"parameters": self.parameters, "steps": self.steps}}

    def spec(self) -> PipelineSpec:
        return parse_pipeline(self.raw()).spec

    def graph(self) -> PipelineGraph:
        return check_pipeline(self.spec(), self.interfaces)


def _wire(fields: dict[str, Any]) -> dict[str, Any]:
    names = {"parallel_for": "parallelFor"}
    return {names.get(key, key): value for key, value in fields.items()}


def pipeline() -> PipelineBuilder:
    return PipelineBuilder()


def out(name: str, type_: str | None = None) -> OutputDecl:
    return OutputDecl(name, type_)


def inp(name: str, type_: str | None = None, *, required: bool = True) -> InputDecl:
    return InputDecl(name, type_, required)


def component_interface(component: ComponentSpec) -> StepInterface:
    return StepInterface(
        tuple(
            InputDecl(i.name, type_name(i.type), required=i.default is None and not i.optional)
            for i in component.inputs
        ),
        tuple(OutputDecl(o.name, type_name(o.type)) for o in component.outputs),
    )


def accepted(document: dict[str, Any]) -> Pipeline:
    """A Pipeline document through the pipeline checks of the door (shape, inline components, the whole DAG)."""
    pipeline = parse_pipeline(document)
    components = {
        step.name: component_interface(parse_component(step.component.inline))
        for step in pipeline.spec.steps
        if step.component is not None and step.component.inline is not None
    }
    check_pipeline(pipeline.spec, components)
    return pipeline
