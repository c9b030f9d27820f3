"""Any value anywhere in a compiled IR: the conversion answers with a result or a SpecError by path, never a crash."""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phalanx.core.pipelines.kfp_ir import pipeline_from_ir
from phalanx.model.errors import SpecError
from phalanx.model.pipelines import parse_pipeline

IR = yaml.safe_load((Path(__file__).parents[3] / "examples" / "pipelines" / "kfp_v2_pipeline.yaml").read_text())


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


PATHS = paths(IR)[1:]
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["{{$}}", "{{$.inputs.parameters['nope']}}", "!(x)", "[1, 2", '{"Concat": 1}', "comp-missing"]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def replaced(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    document = copy.deepcopy(IR)
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return document


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATHS), JUNK)
def test_any_value_anywhere_is_converted_or_refused_by_path(path: tuple[Any, ...], value: Any) -> None:
    try:
        document = pipeline_from_ir(replaced(path, value))
    except SpecError as err:
        assert err.errors and all(isinstance(error.message, str) and error.message for error in err.errors)
        return
    # A shape the Pipeline refuses by its own path (a name, a bound) is still no crash.
    with contextlib.suppress(SpecError):
        parse_pipeline(document)


def test_a_group_running_itself_is_refused_not_recursed() -> None:
    document = copy.deepcopy(IR)
    loop = document["components"]["comp-for-loop-2"]["dag"]
    loop["tasks"]["again"] = {"componentRef": {"name": "comp-for-loop-2"}, "taskInfo": {"name": "again"}}
    # ...and the loop's output selecting that task's output: a loop through the groups' outputs.
    loop["outputs"]["parameters"]["pipelinechannel--scaled-sum-Output"]["valueFromParameter"] = {
        "producerSubtask": "again",
        "outputParameterKey": "pipelinechannel--scaled-sum-Output",
    }
    with pytest.raises(SpecError) as caught:
        pipeline_from_ir(document)
    found = {error.path: error.message for error in caught.value.errors}
    assert found == {
        "components.comp-for-loop-2.dag.tasks.again.componentRef.name": "component 'comp-for-loop-2' is run by two "
        "tasks; a sub-pipeline used more than once is not supported (call its components in the outer pipeline "
        "instead)",
        "root.dag.tasks.report.inputs.parameters.totals.taskOutputParameter": "the output leads back to itself "
        "through the groups' outputs",
    }
