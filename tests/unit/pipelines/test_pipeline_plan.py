"""Run planning: start, cache, skip, retry, fan-out, fan-in, finish — idempotent, each with a sentence."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.pipelines.builders import inp, out, pipeline

from phalanx.core.pipelines.cache import cache_key
from phalanx.core.pipelines.dag import PipelineGraph
from phalanx.core.pipelines.parameters import bind_parameters
from phalanx.core.pipelines.plan import (
    Action,
    CachedResult,
    FailStep,
    FanIn,
    FanOut,
    FinishRun,
    InstanceKey,
    InstanceState,
    OutputValue,
    RetryStep,
    RunObservation,
    RunPlan,
    SkipStep,
    StartStep,
    UseCache,
    observation,
    plan_run,
)
from phalanx.model.base import validated_copy
from phalanx.model.pipelines import PipelineRunStatus, RunPhase, StepPhase, StepStatus


def design() -> PipelineGraph:
    return (
        pipeline()
        .param("lr", "Float", "0.01")
        .param("shards", "JsonArray", "[1,2,3]")
        .component(
            "prepare",
            inputs=(inp("rows", "JsonArray"),),
            outputs=(out("data", "Dataset"),),
            arguments={"rows": "{{params.shards}}"},
        )
        .job(
            "train",
            command=("train", "${inputs.lr}", "${inputs.data}"),
            arguments={"lr": "{{params.lr}}", "data": "{{steps.prepare.outputs.data}}"},
            outputs=[{"name": "model", "type": "Model"}, {"name": "accuracy", "type": "Float"}],
        )
        .component(
            "evaluate",
            inputs=(inp("model", "Model"), inp("shard")),
            outputs=(out("score", "Float"),),
            parallel_for={"items": "{{params.shards}}"},
            arguments={"model": "{{steps.train.outputs.model}}", "shard": "shard-{{item}}"},
            when="{{steps.train.outputs.accuracy}} > 0.8",
            retries=2,
        )
        .component(
            "report",
            inputs=(inp("scores", "JsonArray"),),
            outputs=(out("summary"),),
            arguments={"scores": "{{steps.evaluate.outputs.score}}"},
        )
        .graph()
    )


DIGESTS = {"prepare": "p" * 64, "train": "t" * 64, "evaluate": "e" * 64, "report": "r" * 64}


def plan(
    graph: PipelineGraph, observed: RunObservation, cache: dict[str, CachedResult] | None = None, **arguments: str
) -> RunPlan:
    parameters = bind_parameters(graph.spec, arguments)
    return plan_run(graph, parameters, observed, component_digests=DIGESTS, cache=cache or {})


def done(outputs: dict[str, str], *, digests: bool = True, **fields: object) -> InstanceState:
    values = {name: OutputValue(value, f"sha-{value}" if digests else None) for name, value in outputs.items()}
    return InstanceState(StepPhase.SUCCEEDED, outputs=values, **fields)  # type: ignore[arg-type]


def seen(**instances: InstanceState) -> dict[InstanceKey, InstanceState]:
    return {(name, None): state for name, state in instances.items()}


def test_a_fresh_run_starts_only_the_first_step() -> None:
    actions = plan(design(), RunObservation()).actions
    assert len(actions) == 1
    start = actions[0]
    assert isinstance(start, StartStep) and start.step == "prepare" and start.attempt == 1
    assert start.arguments == {"rows": "[1,2,3]"}
    assert start.reason == "prepare starts: its inputs are ready (no cached result)"


def test_an_artifact_is_passed_by_location_and_keyed_by_content() -> None:
    observed = RunObservation(seen(prepare=done({"data": "/store/run1/prepare/data"})))
    (start,) = plan(design(), observed, lr="0.5").actions
    assert isinstance(start, StartStep) and start.step == "train"
    assert start.arguments == {"lr": "0.5", "data": "/store/run1/prepare/data"}
    assert start.artifact_inputs == {"data"}
    assert start.cache_key == cache_key(
        component_digest="t" * 64, values={"lr": "0.5"}, artifact_digests={"data": "sha-/store/run1/prepare/data"}
    )
    # Same bytes at another location: the same key (a rerun whose artifacts land elsewhere still hits).
    moved = RunObservation(
        {
            ("prepare", None): InstanceState(
                StepPhase.SUCCEEDED,
                outputs={"data": OutputValue("/store/run2/prepare/data", "sha-/store/run1/prepare/data")},
            )
        }
    )
    (again,) = plan(design(), moved, lr="0.5").actions
    assert isinstance(again, StartStep) and again.cache_key == start.cache_key


def _trained(accuracy: str) -> RunObservation:
    return RunObservation(seen(prepare=done({"data": "d"}), train=done({"model": "m", "accuracy": accuracy})))


def test_a_true_condition_fans_out_and_starts_every_item() -> None:
    actions = plan(design(), _trained("0.9")).actions
    assert actions[0] == FanOut("evaluate", (1, 2, 3), "step evaluate fans out over 3 items")
    starts = actions[1:]
    assert [(a.step, a.item, a.arguments["shard"]) for a in starts if isinstance(a, StartStep)] == [
        ("evaluate", 0, "shard-1"),
        ("evaluate", 1, "shard-2"),
        ("evaluate", 2, "shard-3"),
    ]
    assert len({a.cache_key for a in starts if isinstance(a, StartStep)}) == 3


def test_a_false_condition_skips_each_item_and_the_readers_of_its_outputs() -> None:
    graph = design()
    first = plan(graph, _trained("0.5")).actions
    assert [type(a) for a in first] == [FanOut, SkipStep, SkipStep, SkipStep]
    assert first[1].reason == "evaluate[0] is skipped: its condition '{{steps.train.outputs.accuracy}} > 0.8' is false"
    observed = replace(
        _trained("0.5"),
        fanouts={"evaluate": (1, 2, 3)},
        instances={
            **_trained("0.5").instances,
            **{("evaluate", i): InstanceState(StepPhase.SKIPPED) for i in range(3)},
        },
    )
    (fan_in,) = plan(graph, observed).actions
    assert isinstance(fan_in, FanIn) and fan_in.phase is StepPhase.SKIPPED
    observed = replace(observed, joined=frozenset({"evaluate"}))
    (skip,) = plan(graph, observed).actions
    assert skip == SkipStep("report", None, "report is skipped: it reads outputs of skipped step evaluate")


def _evaluated(*states: InstanceState) -> RunObservation:
    base = _trained("0.9")
    return replace(
        base,
        fanouts={"evaluate": (1, 2, 3)},
        instances={**base.instances, **{("evaluate", i): s for i, s in enumerate(states)}},
    )


def test_fan_in_gives_readers_the_list_of_item_outputs_in_item_order() -> None:
    graph = design()
    observed = _evaluated(done({"score": "0.7"}), InstanceState(StepPhase.SKIPPED), done({"score": "0.9"}))
    (fan_in,) = plan(graph, observed).actions
    assert fan_in == FanIn(
        "evaluate", StepPhase.SUCCEEDED, {"score": "[0.7, 0.9]"}, "all 3 items of step evaluate are done: Succeeded"
    )
    (start,) = plan(graph, replace(observed, joined=frozenset({"evaluate"}))).actions
    assert isinstance(start, StartStep) and json.loads(start.arguments["scores"]) == [0.7, 0.9]


def test_nothing_observed_is_started_again() -> None:
    observed = _evaluated(InstanceState(StepPhase.RUNNING), done({"score": "1"}), InstanceState(StepPhase.RUNNING))
    assert plan(design(), observed).actions == ()


def test_a_failed_item_is_retried_while_retries_last_then_the_run_fails() -> None:
    graph = design()
    failed = InstanceState(StepPhase.FAILED, attempts=1)
    observed = _evaluated(done({"score": "1"}), failed, InstanceState(StepPhase.RUNNING))
    (retry,) = plan(graph, observed).actions
    assert isinstance(retry, RetryStep) and (retry.item, retry.attempt) == (1, 2)
    assert retry.reason == "evaluate[1] failed on attempt 1; retrying (attempt 2 of 3)"
    assert plan(graph, observed).actions == (retry,)  # the same observation, the same decision
    exhausted = _evaluated(done({"score": "1"}), replace(failed, attempts=3), InstanceState(StepPhase.RUNNING))
    assert plan(graph, exhausted).actions == ()  # failFast: nothing new, the running item finishes
    finished = _evaluated(done({"score": "1"}), replace(failed, attempts=3), done({"score": "2"}))
    actions = plan(graph, finished).actions
    assert isinstance(actions[-1], FinishRun) and actions[-1].phase is RunPhase.FAILED
    assert "evaluate[1]" in actions[-1].reason


def test_a_cache_hit_starts_nothing_unless_caching_is_off() -> None:
    graph = design()
    (start,) = plan(graph, RunObservation()).actions
    assert isinstance(start, StartStep) and start.cache_key is not None
    hit = CachedResult({"data": OutputValue("/old/data", "sha-old")})
    (use,) = plan(graph, RunObservation(), {start.cache_key: hit}).actions
    assert use == UseCache(
        "prepare", None, start.cache_key, hit.outputs, f"prepare is reused from the cache (key {start.cache_key[:12]})"
    )
    graph.spec.steps[0].cache = False
    (again,) = plan(graph, RunObservation(), {start.cache_key: hit}).actions
    assert isinstance(again, StartStep) and "caching is off" in again.reason


def test_items_that_are_not_a_json_array_fail_the_step_without_starting_it() -> None:
    graph = pipeline().param("xs", "String", "a,b").job("loop", parallel_for={"items": "{{params.xs}}"}).graph()
    (fail,) = plan_run(graph, {"xs": "a,b"}, RunObservation(), component_digests={}, cache={}).actions
    assert isinstance(fail, FailStep) and "is not a JSON array" in fail.reason


def test_a_finished_run_plans_nothing() -> None:
    assert plan(design(), RunObservation(finished=RunPhase.SUCCEEDED)).actions == ()


def apply(observed: RunObservation, actions: tuple[Action, ...]) -> RunObservation:
    """What a service records for each action (the one fake of the service side in these tests)."""
    instances = dict(observed.instances)
    fanouts = dict(observed.fanouts)
    joined = set(observed.joined)
    finished = observed.finished
    for action in actions:
        if isinstance(action, StartStep | RetryStep):
            instances[(action.step, action.item)] = InstanceState(StepPhase.RUNNING, attempts=action.attempt)
        elif isinstance(action, UseCache):
            instances[(action.step, action.item)] = InstanceState(
                StepPhase.SUCCEEDED, outputs=action.outputs, cache_hit=True
            )
        elif isinstance(action, SkipStep):
            instances[(action.step, action.item)] = InstanceState(StepPhase.SKIPPED)
        elif isinstance(action, FailStep):
            instances[(action.step, action.item)] = InstanceState(StepPhase.FAILED, retryable=False)
        elif isinstance(action, FanOut):
            fanouts[action.step] = action.items
        elif isinstance(action, FanIn):
            joined.add(action.step)
        elif isinstance(action, FinishRun):
            finished = action.phase
    return RunObservation(instances, fanouts, frozenset(joined), finished)


def run_to_the_end(
    graph: PipelineGraph,
    cache: dict[str, CachedResult],
    outcome: Callable[[str, int | None, int], bool],
    *,
    score: str = "0.9",
) -> tuple[RunObservation, list[Action]]:
    observed = RunObservation()
    history: list[Action] = []
    for _ in range(200):
        actions = plan_run(graph, bind_parameters(graph.spec, {}), observed, component_digests=DIGESTS, cache=cache)
        # Idempotent: planning twice from the same observation decides the same.
        assert (
            plan_run(graph, bind_parameters(graph.spec, {}), observed, component_digests=DIGESTS, cache=cache).actions
            == actions.actions
        )
        history.extend(actions.actions)
        observed = apply(observed, actions.actions)
        if observed.finished is not None:
            return observed, history
        instances = dict(observed.instances)
        for (name, item), state in observed.instances.items():
            if state.phase is StepPhase.RUNNING:
                if outcome(name, item, state.attempts):
                    outputs = {
                        decl.name: OutputValue(
                            score if decl.type in ("Float", None) else f"{name}-{item}", f"sha-{name}-{item}"
                        )
                        for decl in graph.interfaces[name].outputs
                    }
                    instances[(name, item)] = InstanceState(StepPhase.SUCCEEDED, state.attempts, outputs)
                    for action in history:
                        if (
                            isinstance(action, StartStep | RetryStep)
                            and (action.step, action.item) == (name, item)
                            and action.cache_key is not None
                        ):
                            cache[action.cache_key] = CachedResult(outputs)
                else:
                    instances[(name, item)] = replace(state, phase=StepPhase.FAILED)
        observed = replace(observed, instances=instances)
    raise AssertionError("the run never finished")


def test_a_rerun_with_nothing_changed_completes_from_cache_without_starting_anything() -> None:
    cache: dict[str, CachedResult] = {}
    first, history = run_to_the_end(design(), cache, lambda *_: True)
    assert first.finished is RunPhase.SUCCEEDED
    assert sum(isinstance(a, StartStep) for a in history) == 6  # prepare, train, 3 x evaluate, report
    second, history = run_to_the_end(design(), cache, lambda *_: True)
    assert second.finished is RunPhase.SUCCEEDED
    assert not any(isinstance(a, StartStep | RetryStep) for a in history)
    assert sum(isinstance(a, UseCache) for a in history) == 6
    assert "6 from cache" in history[-1].reason


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.tuples(
            st.sampled_from(["prepare", "train", "evaluate", "report"]),
            st.sampled_from([None, 0, 1, 2]),
            st.integers(1, 3),
        ),
        st.booleans(),
    ),
    st.sampled_from(["0.9", "0.5"]),
)
def test_every_run_ends_and_starts_each_attempt_once(
    failures: dict[tuple[str, int | None, int], bool], score: str
) -> None:
    graph = design()
    final, history = run_to_the_end(
        graph, {}, lambda name, item, attempt: not failures.get((name, item, attempt)), score=score
    )
    starts = [(a.step, a.item, a.attempt) for a in history if isinstance(a, StartStep | RetryStep)]
    assert len(starts) == len(set(starts))
    assert all(attempt <= graph.spec.step(step).retries + 1 for step, _, attempt in starts)  # type: ignore[union-attr]
    failed_for_good = any(state.phase is StepPhase.FAILED for state in final.instances.values())
    assert final.finished is (RunPhase.FAILED if failed_for_good else RunPhase.SUCCEEDED)
    assert sum(isinstance(a, FinishRun) for a in history) == 1
    assert all(a.reason for a in history)
    if score == "0.5" and final.finished is RunPhase.SUCCEEDED:  # the condition is false: no evaluation ran
        assert not any(isinstance(a, StartStep) and a.step in ("evaluate", "report") for a in history)


def test_a_step_only_ordered_after_a_skipped_step_still_runs() -> None:
    graph = (
        pipeline()
        .param("go", "String", "no")
        .job("maybe", when="{{params.go}} == yes", outputs=[{"name": "o"}])
        .job("after-it", after=["maybe"])
        .job("reader", arguments={"x": "{{steps.maybe.outputs.o}}"})
        .graph()
    )
    (skip,) = plan_run(graph, {"go": "no"}, RunObservation(), component_digests={}, cache={}).actions
    assert skip == SkipStep("maybe", None, "maybe is skipped: its condition '{{params.go}} == yes' is false")
    observed = apply(RunObservation(), (skip,))
    actions = plan_run(graph, {"go": "no"}, observed, component_digests={}, cache={}).actions
    assert [(type(a), a.step) for a in actions] == [(StartStep, "after-it"), (SkipStep, "reader")]  # type: ignore[union-attr]
    assert actions[0].reason == "after-it starts: its inputs are ready (no digest to cache by)"


def test_a_stored_status_reads_back_as_the_observation_it_records() -> None:
    status = PipelineRunStatus(
        phase=RunPhase.RUNNING,
        instances=[
            StepStatus(
                step="prepare",
                phase=StepPhase.SUCCEEDED,
                attempts=1,
                outputs={"data": "/d"},
                output_digests={"data": "sha-d"},
            ),
            StepStatus(step="evaluate", item=1, phase=StepPhase.FAILED, attempts=2, retryable=False),
        ],
        fanouts={"evaluate": [1, "b"]},
        joined=["evaluate"],
    )
    stored = PipelineRunStatus.model_validate(status.to_dict())
    observed = observation(stored)
    assert observed.instances[("prepare", None)] == InstanceState(
        StepPhase.SUCCEEDED, 1, {"data": OutputValue("/d", "sha-d")}
    )
    assert observed.instances[("evaluate", 1)].retryable is False
    assert observed.fanouts == {"evaluate": (1, "b")} and observed.joined == {"evaluate"}
    assert observed.finished is None
    assert observation(validated_copy(stored, phase=RunPhase.FAILED)).finished is RunPhase.FAILED


def test_a_fanned_out_step_reading_a_skipped_step_is_skipped_whole_and_the_run_ends() -> None:
    graph = (
        pipeline()
        .param("go", "String", "no")
        .job("maybe", when="{{params.go}} == yes", outputs=[{"name": "xs", "type": "JsonArray"}])
        .job("loop", parallel_for={"items": "{{steps.maybe.outputs.xs}}"}, arguments={"x": "{{item}}"})
        .graph()
    )
    observed = RunObservation()
    history: list[Action] = []
    for _ in range(4):
        actions = plan_run(graph, {"go": "no"}, observed, component_digests={}, cache={}).actions
        history.extend(actions)
        observed = apply(observed, actions)
    assert [type(a) for a in history] == [SkipStep, SkipStep, FinishRun]
    assert history[1] == SkipStep("loop", None, "loop is skipped: it reads outputs of skipped step maybe")
    assert observed.finished is RunPhase.SUCCEEDED
