"""The sweep-quality benchmark's building blocks (benchmarks/sweep_quality_core.py): the function, its learning
curves, the Sweep it makes, and a short in-process run with the median rule. No processes, no timing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from phalanx.adapters.sweeps.optuna_study import StudyStore
from phalanx.core.sweeps.substitute import validate_sweep
from phalanx.model.loading import builtin_jobtypes

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import sweep_quality_core as bench


def test_the_function_has_its_minimum_where_it_was_moved() -> None:
    best = bench.objective({"x": -3.14159265 + bench.SHIFT_X, "y": 12.275 + bench.SHIFT_Y, "optimizer": "adam"})
    assert best == pytest.approx(bench.BRANIN_MIN, abs=1e-4)
    wrong = bench.objective({"x": -3.14159265 + bench.SHIFT_X, "y": 12.275 + bench.SHIFT_Y, "optimizer": "sgd"})
    assert wrong == pytest.approx(best + bench.WRONG_CHOICE_COST)


def test_learning_curves_are_seeded_fall_towards_the_result_and_keep_order_early() -> None:
    good = {"x": 4.44, "y": 1.6, "optimizer": "adam"}
    bad = {"x": -5.0, "y": 0.0, "optimizer": "sgd"}
    curve = bench.learning_curve(good, seed=1, number=0)
    assert curve == bench.learning_curve(good, seed=1, number=0)
    assert curve != bench.learning_curve(good, seed=2, number=0)
    assert sorted(curve) == list(range(1, bench.STEPS + 1))
    assert curve[1] > curve[bench.STEPS] + 2
    assert curve[bench.STEPS] == pytest.approx(bench.objective(good), abs=5 * bench.NOISE)
    worse = bench.learning_curve(bad, seed=1, number=1)
    assert all(worse[step] > curve[step] for step in curve), "a much worse trial is worse at every step"


def test_the_sweep_document_is_a_valid_sweep() -> None:
    document = bench.sweep_document(
        algorithm="tpe", seed=3, trials=8, command=["python", "-c", "pass", "${params.x}"], early_stopping=bench.MEDIAN
    )
    sweep = validate_sweep(document, builtin_jobtypes())
    assert [p.name for p in sweep.spec.parameters] == ["x", "y", "optimizer"]
    assert sweep.spec.early_stopping is not None


def test_an_in_process_run_tells_every_trial_and_the_median_rule_saves_steps(tmp_path: Path) -> None:
    store = StudyStore(f"sqlite:///{tmp_path / 's.db'}")
    runs = {}
    for label, rule in (("plain", None), ("median", bench.MEDIAN)):
        document = bench.sweep_document(algorithm="random", seed=0, trials=10, command=["true"], early_stopping=rule)
        document["metadata"]["uid"] = label
        runs[label] = bench.run_in_process(validate_sweep(document, builtin_jobtypes()), store, seed=0)
    plain, stopped = runs["plain"], runs["median"]
    assert sorted(plain.values) == list(range(10)) and set(plain.steps.values()) == {bench.STEPS}
    assert stopped.stopped, "random search on this function has trials the median rule stops"
    assert sum(stopped.steps.values()) < sum(plain.steps.values())
    assert stopped.best == plain.best, "the rule stops bad trials only: the best one runs to the end"
