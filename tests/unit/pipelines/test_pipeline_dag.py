"""The whole-pipeline check: every problem at its path, cycles named, a stable topological order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.unit.pipelines.builders import PipelineBuilder, inp, job_spec, out, pipeline

from phalanx.core.pipelines.dag import SWEEP_OUTPUTS, check_pipeline, topological_order, types_agree
from phalanx.model.errors import SpecError
from phalanx.model.pipelines import parse_pipeline


def _errors(builder: PipelineBuilder) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        builder.graph()
    return {error.path: error.message for error in caught.value.errors}


def _design_pipeline() -> PipelineBuilder:
    return (
        pipeline()
        .param("lr", "Float", "0.01")
        .param("shards", "JsonArray", "[1,2,3]")
        .component(
            "prepare",
            inputs=(inp("raw data"), inp("rows", "JsonArray")),
            outputs=(out("shard list", "JsonArray"), out("data", "Dataset")),
            arguments={"raw data": "gs://x", "rows": "{{params.shards}}"},
        )
        .job(
            "train",
            command=("python", "train.py", "--lr", "${inputs.lr}", "--data", "${inputs.data}"),
            arguments={"lr": "{{params.lr}}", "data": "{{steps.prepare.outputs.data}}"},
            inputs=[{"name": "data", "type": "Dataset"}],
            outputs=[{"name": "model", "type": "Model"}, {"name": "accuracy", "type": "Float"}],
            after=["prepare"],
        )
        .component(
            "evaluate",
            inputs=(inp("model", "Model"), inp("shard"), inp("gate", "Float", required=False)),
            outputs=(out("score", "Float"),),
            parallel_for={"items": "{{steps.prepare.outputs.shard list}}"},
            arguments={"model": "{{steps.train.outputs.model}}", "shard": "{{item}}"},
            when="{{steps.train.outputs.accuracy}} > 0.8",
            retries=2,
        )
        .component(
            "report", inputs=(inp("scores", "JsonArray"),), arguments={"scores": "{{steps.evaluate.outputs.score}}"}
        )
    )


def test_the_design_pipeline_checks_and_orders() -> None:
    graph = _design_pipeline().graph()
    assert graph.order == ("prepare", "train", "evaluate", "report")
    assert graph.upstream["evaluate"] == {"prepare", "train"}
    assert graph.data_upstream["train"] == {"prepare"}
    assert graph.fanned_out == {"evaluate"}


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        (lambda b: b.job("x", arguments={"a": "{{params.nope}}"}), "spec.steps[4].arguments.a", "no parameter 'nope'"),
        (
            lambda b: b.job("x", arguments={"a": "{{steps.ghost.outputs.o}}"}),
            "spec.steps[4].arguments.a",
            "no step is called 'ghost'",
        ),
        (
            lambda b: b.job("x", arguments={"a": "{{steps.train.outputs.weights}}"}),
            "spec.steps[4].arguments.a",
            "its outputs are: 'model', 'accuracy'",
        ),
        (lambda b: b.job("x", arguments={"a": "{{item}}"}), "spec.steps[4].arguments.a", "has none"),
        (lambda b: b.job("x", arguments={"a": "{{ params }}"}), "spec.steps[4].arguments.a", "is not a reference"),
        (lambda b: b.job("x", after=["nobody"]), "spec.steps[4].after[0]", "the steps are: prepare"),
        (lambda b: b.job("x", after=["x"]), "spec.steps[4].after[0]", "after itself"),
        (
            lambda b: b.job("x", arguments={"a": "{{steps.x.outputs.o}}"}, outputs=[{"name": "o"}]),
            "spec.steps[4].arguments.a",
            "its own outputs",
        ),
        (
            lambda b: b.component(
                "x", inputs=(inp("model", "Model"),), arguments={"model": "{{steps.prepare.outputs.data}}"}
            ),
            "spec.steps[4].arguments.model",
            "of type Dataset but input 'model' wants Model",
        ),
        (
            lambda b: b.component("x", inputs=(inp("n", "Integer"),), arguments={"n": "{{params.lr}}"}),
            "spec.steps[4].arguments.n",
            "of type Float",
        ),
        (
            lambda b: b.component("x", inputs=(inp("a"),), arguments={"a": "1", "b": "2"}),
            "spec.steps[4].arguments.b",
            "no input 'b'; its inputs are: 'a'",
        ),
        (
            lambda b: b.component("x", inputs=(inp("a"), inp("b", required=False))),
            "spec.steps[4].arguments",
            "input 'a' has no argument",
        ),
        (
            lambda b: b.component(
                "x", inputs=(inp("m", "Float"),), arguments={"m": "{{steps.evaluate.outputs.score}}"}
            ),
            "spec.steps[4].arguments.m",
            "JSON list of its outputs",
        ),
        (lambda b: b.job("x", when="{{steps.train.outputs.accuracy}} >"), "spec.steps[4].when", "one comparison"),
        (lambda b: b.job("x", when="{{steps.nope.outputs.a}} > 1"), "spec.steps[4].when", "no step is called"),
        (
            lambda b: b.job("x", parallel_for={"items": "{{params.lr}}"}),
            "spec.steps[4].parallelFor.items",
            "JSON array (type JsonArray), got type Float",
        ),
        (lambda b: b.job("x", parallel_for={"items": "a,b"}), "spec.steps[4].parallelFor.items", "one whole reference"),
        (
            lambda b: b.job("x", command=("run", "${inputs.missing}")),
            "spec.steps[4].trainingJob.spec.replicas.worker.template.command[1]",
            "names no input",
        ),
        (
            lambda b: b.job("x", command=("run", "{{params.lr}}")),
            "spec.steps[4].trainingJob.spec.replicas.worker.template.command[1]",
            "${inputs.NAME}",
        ),
        (
            lambda b: b.job("x", inputs=[{"name": "d", "type": "Dataset"}]),
            "spec.steps[4].arguments",
            "input 'd' has no argument",
        ),
        (lambda b: b.param("bad", "Integer", "1.5"), "spec.parameters[2].default", "whole number"),
    ],
    ids=[
        "unknown-param",
        "unknown-step",
        "unknown-output",
        "item-outside-loop",
        "not-a-reference",
        "unknown-after",
        "after-itself",
        "own-output",
        "artifact-type-mismatch",
        "param-type-mismatch",
        "input-the-component-lacks",
        "missing-required-input",
        "fan-in-into-scalar",
        "bad-when",
        "when-unknown-step",
        "items-not-array",
        "items-not-reference",
        "unknown-job-input",
        "braces-in-job-spec",
        "declared-input-without-argument",
        "bad-default",
    ],
)
def test_each_problem_is_refused_at_its_path(change, path: str, words: str) -> None:  # type: ignore[no-untyped-def]
    errors = _errors(change(_design_pipeline()))
    assert path in errors, errors
    assert words in errors[path], errors[path]
    assert len(errors) == 1, errors  # one problem, one error: nothing else of the pipeline is blamed


def test_a_bad_job_spec_is_refused_by_the_trainingjob_model_at_its_path() -> None:
    builder = pipeline()
    builder.steps.append({"name": "t", "trainingJob": {"spec": {"replicas": {"worker": {"count": 0}}}}})
    errors = _errors(builder)
    assert any(path.startswith("spec.steps[0].trainingJob.spec.replicas.worker") for path in errors), errors


def test_a_cycle_is_named_from_its_first_step_in_file_order() -> None:
    builder = (
        pipeline()
        .job("a", arguments={"x": "{{steps.c.outputs.o}}"}, outputs=[{"name": "o"}])
        .job("b", arguments={"x": "{{steps.a.outputs.o}}"}, outputs=[{"name": "o"}])
        .job("c", after=["b"], outputs=[{"name": "o"}])
        .job("d", after=["a"])
    )
    errors = _errors(builder)
    assert errors == {
        "spec.steps[0]": "steps form a cycle a -> b -> c -> a; remove one of these references or after entries"
    }


def test_a_bad_reference_next_to_a_good_one_hides_no_cycle() -> None:
    builder = (
        pipeline()
        .job("a", arguments={"x": "{{steps.b.outputs.o}}"}, outputs=[{"name": "o"}])
        .job("b", arguments={"x": "{{steps.a.outputs.o}} {{oops}}"}, outputs=[{"name": "o"}])
    )
    errors = _errors(builder)
    assert set(errors) == {"spec.steps[1].arguments.x", "spec.steps[0]"}
    assert "a -> b -> a" in errors["spec.steps[0]"]


def test_a_sweep_step_has_its_best_results_as_outputs() -> None:
    raw = pipeline().raw()
    raw["spec"]["steps"] = [
        {"name": "tune", "sweep": {"spec": {"maxTrials": 4}}},
        {
            "name": "train",
            "trainingJob": {"spec": job_spec("train", "${inputs.best}")},
            "arguments": {"best": "{{steps.tune.outputs.bestParameters}}"},
            "inputs": [{"name": "best", "type": "JsonObject"}],
        },
    ]
    graph = check_pipeline(parse_pipeline(raw).spec, {})
    assert {decl.name for decl in graph.interfaces["tune"].outputs} == set(SWEEP_OUTPUTS)


def test_a_component_step_without_its_interface_is_refused() -> None:
    builder = pipeline().component("a")
    with pytest.raises(SpecError) as caught:
        check_pipeline(builder.spec(), {})
    assert caught.value.errors[0].path == "spec.steps[0].component"


@pytest.mark.parametrize(
    ("given", "wanted", "agree"),
    [
        (None, "Model", True),
        ("String", "Model", True),
        ("Model", "str", True),
        ("int", "Integer", True),
        ("Dataset", "Model", False),
        ("Float", "Integer", False),
        ("JsonArray", "list", True),
    ],
)
def test_types_compare_only_when_both_are_specific(given: str | None, wanted: str | None, agree: bool) -> None:
    assert types_agree(given, wanted) is agree


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[str], dict[str, set[str]]]:
    count = draw(st.integers(1, 12))
    names = [f"s{i}" for i in range(count)]
    # Edges only from a lower to a higher rank: acyclic; then shuffle the file order.
    upstream = {name: {names[j] for j in range(i) if draw(st.booleans())} for i, name in enumerate(names)}
    order = draw(st.permutations(names))
    return list(order), upstream


@given(dags())
def test_topological_order_respects_every_edge_and_file_order(dag: tuple[list[str], dict[str, set[str]]]) -> None:
    names, upstream = dag
    order = topological_order(names, upstream)
    assert sorted(order) == sorted(names)
    position = {name: i for i, name in enumerate(order)}
    assert all(position[source] < position[name] for name, sources in upstream.items() for source in sources)
    # Stable: at each point, the earliest step in file order among those ready is taken.
    placed: set[str] = set()
    for name in order:
        ready = [n for n in names if n not in placed and upstream[n] <= placed]
        assert name == ready[0]
        placed.add(name)


@given(st.lists(st.booleans(), min_size=1, max_size=10))
def test_file_order_is_kept_when_it_is_already_topological(links: list[bool]) -> None:
    names = [f"s{i}" for i in range(len(links))]
    upstream = {name: ({names[i - 1]} if i and links[i] else set()) for i, name in enumerate(names)}
    assert topological_order(names, upstream) == tuple(names)


def test_a_constant_for_a_typed_input_is_read_now() -> None:
    builder = pipeline().component(
        "a", inputs=(inp("n", "Integer"), inp("s", "String")), arguments={"n": "ten", "s": "x"}
    )
    assert _errors(builder) == {
        "spec.steps[0].arguments.n": "input 'n' must be a whole number (type Integer), got 'ten'"
    }


def test_an_input_placeholder_in_a_number_field_is_judged_with_a_valid_sample() -> None:
    raw = pipeline().raw()
    raw["spec"]["steps"] = [
        {
            "name": "t",
            "trainingJob": {"spec": {"replicas": {"worker": {"count": "${inputs.n}", "template": {"command": ["x"]}}}}},
            "arguments": {"n": "4"},
        },
    ]
    graph = check_pipeline(parse_pipeline(raw).spec, {})
    assert graph.order == ("t",)
