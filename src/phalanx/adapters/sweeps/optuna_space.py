"""A Sweep's search space in Optuna's terms: each parameter suggested define-by-run, values typed as the model's.

- double: ``suggest_float`` (log, step); int: ``suggest_int`` (log, step).
- discrete and categorical: ``suggest_categorical`` over the listed values. A discrete parameter could instead be
  an int distribution over the values' positions, which would let TPE model their order; but its stored value
  would then be a position, not the number the user listed (a study read in optuna-dashboard, or by a restarted
  controller, would show indexes), and irregular lists such as [32, 64, 128] carry no distance that a position
  keeps. Katib's Optuna service makes the same choice. The value comes back exactly as listed, int or float.
- conditional parameters (``when``): suggested only when ``core.sweeps.substitute.active_parameters`` says so,
  in search-space order, so a parent is always chosen before the parameters that depend on it.

A stepped range whose width is not a whole number of steps is cut at the last step inside it here (as Optuna
would, with a warning per suggestion), and stepped values are computed in decimal, so that a grid over
``0.1..0.4`` step ``0.1`` holds 0.3, not 0.30000000000000004 (which is past Optuna's bound and the model's).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

import optuna

from phalanx.core.sweeps.substitute import active_parameters
from phalanx.model.sweeps import Parameter, ParameterType, ParamValue, SweepSpec


def _decimal(value: float) -> Decimal:
    # str() is the shortest text that reads back as the same float: what the user wrote, not its binary value.
    return Decimal(str(value))


def stepped_values(parameter: Parameter) -> list[ParamValue] | None:
    """Every value of a finite parameter, as a grid visits them; ``None`` for a continuous double."""
    if parameter.values is not None:
        return list(parameter.values)
    size = parameter.grid_size()
    if size is None:
        return None
    assert parameter.min is not None
    if parameter.type == ParameterType.INT:
        return [int(parameter.min) + index * int(parameter.step or 1) for index in range(size)]
    low, step = _decimal(parameter.min), _decimal(parameter.step or 0)
    return [float(low + index * step) for index in range(size)]


def _upper(parameter: Parameter) -> float:
    """The range's top, cut at the last whole step (the model counts the steps: the grid has that many)."""
    assert parameter.min is not None and parameter.max is not None
    size = parameter.grid_size() if parameter.step is not None else None
    if size is None:
        return parameter.max
    return float(_decimal(parameter.min) + (size - 1) * _decimal(parameter.step or 1))


def suggest(trial: optuna.Trial, parameter: Parameter) -> ParamValue:
    """Suggest ``parameter`` in ``trial`` (or read it back, when the trial already has it)."""
    kind = ParameterType(parameter.type)
    if parameter.values is not None:
        chosen = trial.suggest_categorical(parameter.name, parameter.values)
        return _listed(parameter, chosen)
    assert parameter.min is not None
    if kind is ParameterType.INT:
        return trial.suggest_int(
            parameter.name,
            int(parameter.min),
            int(_upper(parameter)),
            step=int(parameter.step or 1),
            log=parameter.log,
        )
    step = float(parameter.step) if parameter.step is not None else None
    value = trial.suggest_float(
        parameter.name, float(parameter.min), float(_upper(parameter)), step=step, log=parameter.log
    )
    return _on_step(parameter, value)


def _on_step(parameter: Parameter, value: float) -> float:
    """A stepped double's value on its decimal step: Optuna computes ``0.1 + 2 * 0.1`` in binary (0.30...04)."""
    if parameter.step is None:
        return value
    assert parameter.min is not None
    low, step = _decimal(parameter.min), _decimal(parameter.step)
    steps = ((_decimal(value) - low) / step).to_integral_value()
    return float(low + steps * step)


def suggest_all(trial: optuna.Trial, spec: SweepSpec) -> dict[str, ParamValue]:
    """The trial's assignment, define-by-run: every parameter active given the earlier ones, in order."""
    assignment: dict[str, ParamValue] = {}
    for parameter in spec.parameters:
        # The parents of a parameter are earlier ones, already in ``assignment``: enough to decide this one.
        if parameter.name in active_parameters(spec, assignment):
            assignment[parameter.name] = suggest(trial, parameter)
    return assignment


def _listed(parameter: Parameter, value: object) -> ParamValue:
    # The listed value equal to what Optuna returns, so 64 stays the int 64 and 0.5 the float 0.5.
    assert parameter.values is not None
    for listed in parameter.values:
        if listed == value and type(listed) is type(value):
            return listed
    for listed in parameter.values:
        if listed == value:
            return listed
    raise ValueError(f"{parameter.name}: {value!r} is not one of {parameter.values!r}")


def typed(spec: SweepSpec, params: Mapping[str, object]) -> dict[str, ParamValue]:
    """A stored trial's parameters as the model's types (int for int, float for double, listed values as listed).

    A parameter the spec no longer has is kept as stored (a string, an int or a float).
    """
    result: dict[str, ParamValue] = {}
    for name, value in params.items():
        parameter = spec.parameter(name)
        if parameter is None:
            result[name] = value if isinstance(value, str | int | float) else str(value)
        elif parameter.values is not None:
            result[name] = _listed(parameter, value)
        elif not isinstance(value, int | float):
            raise ValueError(f"{name}: stored {value!r} for a {parameter.type} parameter")
        elif parameter.type == ParameterType.INT:
            result[name] = int(value)
        else:
            result[name] = _on_step(parameter, float(value))
    return result


def grid(spec: SweepSpec) -> dict[str, list[ParamValue]]:
    """The grid of a finite search space (the model refuses grid on a continuous one), values as suggested."""
    points: dict[str, list[ParamValue]] = {}
    for parameter in spec.parameters:
        values = stepped_values(parameter)
        if values is None:
            raise ValueError(f"{parameter.name}: a continuous double has no grid (model.sweeps refuses it)")
        points[parameter.name] = values
    return points


def grid_size(spec: SweepSpec) -> int:
    """How many points the grid has."""
    size = 1
    for values in grid(spec).values():
        size *= len(values)
    return size
