"""Which search algorithms this installation runs, and the sampler settings each takes; checked at the door.

A Sweep names an algorithm (``spec.algorithm.name``) whose Optuna sampler may need more than Optuna: cmaes needs
the ``cmaes`` package (in the ``sweeps`` extra), gp needs PyTorch and SciPy, which the extra does not bring (torch
is gigabytes; a control plane that serves tpe and random should not carry it). ``algorithm_available`` says, in
one sentence with the fix, what is missing, so a sweep is refused when it is created rather than failing at the
trial where the sampler first needs the library (GPSampler imports torch only after its startup trials).

``spec.algorithm.settings`` are the keyword arguments of the algorithm's Optuna sampler, under Optuna's names
(the Katib converter writes the same names): each is checked here for its type and range, and anything else is
refused by path instead of being passed on and ignored or failing later. Nothing here imports Optuna, so the
door can run these checks on an installation without the ``sweeps`` extra and say how to get it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.util import find_spec

from phalanx.model.errors import FieldError, short
from phalanx.model.sweeps import MAX_TRIALS, Algorithm, AlgorithmName

SWEEPS_EXTRA = "pip install 'phalanx[sweeps]'"

#: Libraries an algorithm needs besides Optuna, and the sentence that says how to get them.
_NEEDS: dict[AlgorithmName, tuple[tuple[str, ...], str]] = {
    AlgorithmName.CMAES: (
        ("cmaes",),
        f"cmaes needs the cmaes package, which is not installed where the control plane runs: {SWEEPS_EXTRA} "
        "(it brings cmaes), or use tpe",
    ),
    AlgorithmName.GP: (
        ("torch", "scipy"),
        "gp (Gaussian-process Bayesian optimization, Katib's bayesianoptimization) needs PyTorch and SciPy, which "
        "are not installed where the control plane runs: install them (pip install torch scipy), or use tpe",
    ),
}


def _installed(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or half-removed package counts as missing
        return False


def algorithm_available(name: str) -> str | None:
    """``None`` when algorithm ``name`` runs here; else what is missing and the fix, in one sentence.

    The sentence is the message of a refusal at ``spec.algorithm.name`` (``check_algorithm`` makes that error).
    """
    if not _installed("optuna"):
        return f"sweeps need Optuna, which is not installed where the control plane runs: {SWEEPS_EXTRA}"
    needs = _NEEDS.get(AlgorithmName(name))
    if needs is not None and not all(_installed(module) for module in needs[0]):
        return needs[1]
    return None


@dataclass(frozen=True)
class Setting:
    """One sampler setting: its type and bounds (inclusive), and why it exists for the user."""

    kind: type[bool] | type[int] | type[float]
    low: float | None = None
    high: float | None = None
    positive: bool = False

    def problem(self, value: object) -> str | None:
        """Why ``value`` is not accepted (``None`` when it is)."""
        if self.kind is bool:
            return None if isinstance(value, bool) else f"must be true or false, got {short(value)}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be a{'n integer' if self.kind is int else ' number'}, got {short(value)}"
        if self.kind is int and not isinstance(value, int):
            return f"must be an integer, got {short(value)}"
        if not math.isfinite(value):
            return f"must be a finite number, got {short(value)}"
        if self.positive and value <= 0:
            return f"must be > 0, got {short(value)}"
        if self.low is not None and value < self.low:
            return f"must be >= {self.low:g}, got {short(value)}"
        if self.high is not None and value > self.high:
            return f"must be <= {self.high:g}, got {short(value)}"
        return None


_STARTUP = Setting(int, 0, MAX_TRIALS)
#: Per algorithm, the settings accepted: Optuna's keyword arguments of its sampler (Optuna 5). Deprecated ones that
#: still work (prior_weight, sigma0: removed in Optuna 6) are kept because Katib files carry them.
SETTINGS: dict[AlgorithmName, dict[str, Setting]] = {
    AlgorithmName.GRID: {},
    AlgorithmName.RANDOM: {},
    AlgorithmName.TPE: {
        "n_startup_trials": _STARTUP,
        "n_ei_candidates": Setting(int, 1, 10_000),
        "multivariate": Setting(bool),
        "group": Setting(bool),
        "constant_liar": Setting(bool),
        "prior_weight": Setting(float, high=1e6, positive=True),
    },
    AlgorithmName.CMAES: {
        "n_startup_trials": _STARTUP,
        "sigma0": Setting(float, high=1e6, positive=True),
        "popsize": Setting(int, 2, 10_000),
        "use_separable_cma": Setting(bool),
        "with_margin": Setting(bool),
        "lr_adapt": Setting(bool),
        "consider_pruned_trials": Setting(bool),
    },
    AlgorithmName.GP: {
        "n_startup_trials": _STARTUP,
        "deterministic_objective": Setting(bool),
    },
}

#: Settings Optuna once had and now ignores: refused with the reason rather than silently dropped.
_IGNORED = {
    "restart_strategy": "Optuna 4.4 and later ignore restart_strategy (CMA-ES restarts moved to OptunaHub), so "
    "the search would not restart as asked; remove it",
    "inc_popsize": "Optuna 4.4 and later ignore inc_popsize (it belongs to restart_strategy); remove it",
}


def check_settings(name: AlgorithmName, settings: Mapping[str, object]) -> list[FieldError]:
    """Each setting of algorithm ``name`` known, typed and in range, and no two that Optuna refuses together."""
    table = SETTINGS[name]
    errors = []
    for key, value in settings.items():
        where = f"spec.algorithm.settings.{key}"
        if name is AlgorithmName.CMAES and key in _IGNORED:
            errors.append(FieldError(where, _IGNORED[key]))
        elif key not in table:
            known = ", ".join(table)
            listed = f"its settings are {known}" if known else "it takes none"
            errors.append(FieldError(where, f"{short(key)} is not a setting of {name.value}; {listed}"))
        elif (problem := table[key].problem(value)) is not None:
            errors.append(FieldError(where, problem))
    on = {key for key, value in settings.items() if value is True}
    if name is AlgorithmName.TPE and "group" in on and settings.get("multivariate") is False:
        errors.append(FieldError("spec.algorithm.settings.group", "group needs multivariate TPE; remove one"))
    if name is AlgorithmName.CMAES:
        if "lr_adapt" in on and on & {"use_separable_cma", "with_margin"}:
            errors.append(
                FieldError(
                    "spec.algorithm.settings.lr_adapt",
                    "Optuna's lr_adapt works with plain CMA-ES only: "
                    "remove use_separable_cma and with_margin, or lr_adapt",
                )
            )
        if {"use_separable_cma", "with_margin"} <= on:
            errors.append(
                FieldError(
                    "spec.algorithm.settings.with_margin",
                    "Optuna has no separable CMA-ES with margin; remove use_separable_cma or with_margin",
                )
            )
    return errors


def check_algorithm(algorithm: Algorithm) -> list[FieldError]:
    """The door's check of ``spec.algorithm``: it runs here (libraries installed) and its settings are known."""
    name = AlgorithmName(algorithm.name)
    errors = []
    missing = algorithm_available(name)
    if missing is not None:
        errors.append(FieldError("spec.algorithm.name", missing))
    errors.extend(check_settings(name, algorithm.settings))
    return errors
