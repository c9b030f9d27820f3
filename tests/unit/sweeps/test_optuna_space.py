"""The search space in Optuna's terms: stepped values exact in decimal, inside the model's bounds, and accepted by
Optuna's distributions as they are (no adjusted range, no out-of-range grid value)."""

from __future__ import annotations

import warnings
from decimal import Decimal

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.adapters.sweeps import optuna_space
from phalanx.model.sweeps import Parameter


def double(low: float, high: float, step: float) -> Parameter:
    return Parameter.model_validate({"name": "p", "type": "double", "min": low, "max": high, "step": step})


@pytest.mark.parametrize(
    ("low", "high", "step", "values"),
    [
        (0.1, 0.4, 0.1, [0.1, 0.2, 0.3, 0.4]),
        (0.0, 1.0, 0.3, [0.0, 0.3, 0.6, 0.9]),
        (0.001, 0.005, 0.001, [0.001, 0.002, 0.003, 0.004, 0.005]),
        (-0.3, 0.3, 0.2, [-0.3, -0.1, 0.1, 0.3]),
        (1.0, 2.0, 0.25, [1.0, 1.25, 1.5, 1.75, 2.0]),
    ],
)
def test_stepped_doubles_are_the_decimal_steps(low: float, high: float, step: float, values: list[float]) -> None:
    assert optuna_space.stepped_values(double(low, high, step)) == values


def test_ints_with_a_step_stop_at_the_last_whole_step() -> None:
    parameter = Parameter.model_validate({"name": "p", "type": "int", "min": 1, "max": 10, "step": 4})
    assert optuna_space.stepped_values(parameter) == [1, 5, 9]


@settings(max_examples=200, deadline=None)
@given(
    low=st.decimals(min_value=-1000, max_value=1000, places=3, allow_nan=False, allow_infinity=False),
    step=st.decimals(min_value="0.001", max_value=50, places=3, allow_nan=False, allow_infinity=False),
    steps=st.integers(min_value=1, max_value=300),
    extra=st.decimals(min_value=0, max_value="0.999", places=3),
)
def test_every_stepped_value_is_inside_the_bounds_and_optunas_distribution(
    low: Decimal, step: Decimal, steps: int, extra: Decimal
) -> None:
    # ``extra``: a range that is not a whole number of steps, cut at the last step inside it.
    high = float(low + step * steps + step * extra)
    parameter = double(float(low), high, float(step))
    values = optuna_space.stepped_values(parameter)
    assert values is not None and len(values) == parameter.grid_size()
    assert values == sorted(set(values))
    assert all(float(low) <= value <= high for value in values)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Optuna warns when it must cut the range: it must not have to
        distribution = optuna.distributions.FloatDistribution(float(low), float(values[-1]), step=float(step))
    for value in values:
        assert distribution._contains(distribution.to_internal_repr(value)), value
