"""Metrics of a trial: the phalanx-metric stdout format and metrics.json, and the objective value."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.core.sweeps.metrics import (
    IntermediateMetrics,
    objective_value,
    parse_final,
    parse_intermediate,
    parse_metric_line,
)


def test_a_line_gives_its_step_and_every_value() -> None:
    assert parse_metric_line("phalanx-metric step=3 val_loss=0.25 acc=9e-1\n") == (3, {"val_loss": 0.25, "acc": 0.9})


@pytest.mark.parametrize(
    "line",
    [
        "Phalanx-metric step=1 loss=1",  # the prefix is case-sensitive
        " phalanx-metric step=1 loss=1",  # and starts the line
        "phalanx-metric step=1",  # no value
        "phalanx-metric loss=1 step=1",  # step comes first
        "phalanx-metric step=-1 loss=1",
        "phalanx-metric step=1.5 loss=1",
        "phalanx-metric step=1 loss=abc",
        "phalanx-metric step=1 loss=nan",
        "phalanx-metric step=1 loss=inf",
        "phalanx-metric step=1 loss",
        "phalanx-metric step=1 loss=1 loss=2",  # one value per name
        "phalanx-metric step=1 1loss=1",
        "phalanx-metric step=1 step=2",
        "phalanx-metric step=1 loss=1 acc=",  # one bad value spoils the whole line
        "phalanx-metric step=\u0661 loss=1",  # a non-ASCII digit
    ],
)
def test_a_malformed_line_is_refused_whole(line: str) -> None:
    assert parse_metric_line(line) is None


def test_stdout_is_read_in_order_and_malformed_lines_are_counted() -> None:
    lines = [
        "epoch 1 done",
        "phalanx-metric step=1 loss=0.9",
        "phalanx-metric step=2 loss=0.7 acc=0.5",
        "phalanx-metric step=2 loss=0.6",  # a retried step replaces the earlier report
        "phalanx-metric step=x loss=0.1",
        "phalanx-metricstep=3 loss=0.1",
        "the phalanx-metric step=4 loss=0",
    ]
    metrics = parse_intermediate(lines)
    assert metrics.of("loss") == {1: 0.9, 2: 0.6}
    assert metrics.of("acc") == {2: 0.5}
    assert metrics.of("missing") == {}
    assert metrics.malformed == 2


def test_chunks_of_stdout_add_up() -> None:
    metrics = parse_intermediate(["phalanx-metric step=1 loss=1"])
    same = parse_intermediate(["phalanx-metric step=2 loss=2", "phalanx-metric nope"], into=metrics)
    assert same is metrics
    assert metrics == IntermediateMetrics({"loss": {1: 1.0, 2: 2.0}}, malformed=1)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    step=st.integers(min_value=0, max_value=10**12),
    values=st.dictionaries(
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-/]{0,10}", fullmatch=True).filter(lambda name: name != "step"),
        st.floats(allow_nan=False, allow_infinity=False),
        min_size=1,
        max_size=5,
    ),
)
def test_what_a_program_writes_with_repr_reads_back_exactly(step: int, values: dict[str, float]) -> None:
    line = f"phalanx-metric step={step} " + " ".join(f"{name}={value!r}" for name, value in values.items())
    assert parse_metric_line(line) == (step, values)


def test_metrics_json_keeps_finite_numbers_only() -> None:
    text = json.dumps({"val_loss": 0.1, "epochs": 3, "ok": True, "note": "x", "big": 10**400, "list": [1]})
    text = text.replace("}", ', "nan": NaN}')
    assert parse_final(text) == {"val_loss": 0.1, "epochs": 3.0}


@pytest.mark.parametrize(("text", "message"), [("[1, 2]", "must hold a mapping"), ("{", "is not JSON")])
def test_metrics_json_that_is_no_mapping_is_an_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_final(text)


def test_the_objective_is_the_final_value_else_the_last_intermediate() -> None:
    assert objective_value("loss", {"loss": 0.2}, {1: 0.9, 5: 0.1}) == 0.2
    assert objective_value("loss", {"acc": 0.2}, {5: 0.1, 1: 0.9}) == 0.1
    assert objective_value("loss", {}, {}) is None


def test_katib_lines_number_each_metric_s_reports_and_skip_phalanx_lines() -> None:
    from phalanx.core.sweeps.metrics import parse_katib

    lines = ["epoch 1 val_loss=0.5 accuracy=0.8", "phalanx-metric step=9 val_loss=0.1", "val_loss = 2.5e-1", "x=nan"]
    assert parse_katib(lines).values == {"val_loss": {1: 0.5, 2: 0.25}, "accuracy": {1: 0.8}}


def test_katib_lines_read_with_the_experiment_s_own_format() -> None:
    from phalanx.core.sweeps.metrics import parse_katib

    found = parse_katib(["{metricName: loss, metricValue: 0.3}"], [r"{metricName: ([\w|-]+), metricValue: ([\d.]+)}"])
    assert found.values == {"loss": {1: 0.3}}
