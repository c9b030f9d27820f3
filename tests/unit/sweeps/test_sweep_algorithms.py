"""The door's algorithm checks: what this installation runs, and each sampler setting's name, type and range."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from phalanx.adapters.sweeps import algorithms
from phalanx.adapters.sweeps.algorithms import SETTINGS, algorithm_available, check_algorithm, check_settings
from phalanx.adapters.sweeps.optuna_samplers import PerTrialSeeded
from phalanx.model.sweeps import Algorithm, AlgorithmName


def missing(*modules: str) -> Any:
    def installed(module: str) -> bool:
        return module not in modules

    return installed


@pytest.mark.parametrize("name", ["grid", "random", "tpe", "cmaes"])
def test_the_sweeps_extra_runs_every_algorithm_but_gp(name: str) -> None:
    assert algorithm_available(name) is None


def test_gp_without_torch_says_what_to_install_or_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(algorithms, "_installed", missing("torch"))
    message = algorithm_available("gp")
    assert message is not None
    assert "PyTorch" in message and "pip install torch scipy" in message and "use tpe" in message
    assert algorithm_available("tpe") is None
    errors = check_algorithm(Algorithm(name=AlgorithmName.GP))
    assert [(e.path, e.message) for e in errors] == [("spec.algorithm.name", message)]


def test_gp_with_torch_and_scipy_is_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(algorithms, "_installed", missing())
    assert algorithm_available("gp") is None


def test_without_optuna_every_algorithm_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(algorithms, "_installed", missing("optuna"))
    for name in AlgorithmName:
        message = algorithm_available(name)
        assert message is not None and "pip install 'phalanx[sweeps]'" in message


def test_cmaes_without_its_package_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(algorithms, "_installed", missing("cmaes"))
    message = algorithm_available("cmaes")
    assert message is not None and "cmaes package" in message and "use tpe" in message


#: A valid value for every accepted setting.
VALID: dict[str, Any] = {
    "n_startup_trials": 4,
    "n_ei_candidates": 16,
    "multivariate": True,
    "group": True,
    "constant_liar": False,
    "prior_weight": 0.5,
    "sigma0": 0.3,
    "popsize": 8,
    "use_separable_cma": True,
    "with_margin": False,
    "lr_adapt": False,
    "consider_pruned_trials": True,
    "deterministic_objective": True,
}


@pytest.mark.parametrize("name", list(AlgorithmName), ids=str)
def test_every_accepted_setting_is_an_argument_of_optunas_sampler(name: AlgorithmName) -> None:
    settings = {key: VALID[key] for key in SETTINGS[name]}
    algorithm = Algorithm(name=name, seed=3, settings=settings)
    assert check_settings(name, settings) == []
    if name is not AlgorithmName.GRID:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated (prior_weight, sigma0) and experimental ones warn
            PerTrialSeeded(algorithm)  # builds the sampler: an unknown keyword would raise TypeError here


@pytest.mark.parametrize(
    ("name", "settings", "path", "message"),
    [
        ("random", {"n_startup_trials": 3}, "settings.n_startup_trials", "not a setting of random; it takes none"),
        ("tpe", {"gamma": 0.2}, "settings.gamma", "its settings are n_startup_trials, n_ei_candidates"),
        ("tpe", {"n_startup_trials": 2.5}, "settings.n_startup_trials", "must be an integer, got 2.5"),
        ("tpe", {"n_startup_trials": -1}, "settings.n_startup_trials", "must be >= 0, got -1"),
        ("tpe", {"multivariate": 1}, "settings.multivariate", "must be true or false, got 1"),
        ("tpe", {"n_ei_candidates": True}, "settings.n_ei_candidates", "must be an integer, got True"),
        ("tpe", {"prior_weight": 0.0}, "settings.prior_weight", "must be > 0, got 0.0"),
        ("tpe", {"prior_weight": "high"}, "settings.prior_weight", "must be a number, got 'high'"),
        ("tpe", {"group": True, "multivariate": False}, "settings.group", "group needs multivariate TPE"),
        ("cmaes", {"restart_strategy": "ipop"}, "settings.restart_strategy", "ignore restart_strategy"),
        ("cmaes", {"sigma0": float("inf")}, "settings.sigma0", "must be a finite number"),
        ("cmaes", {"popsize": 1}, "settings.popsize", "must be >= 2, got 1"),
        ("cmaes", {"lr_adapt": True, "with_margin": True}, "settings.lr_adapt", "works with plain CMA-ES only"),
        (
            "cmaes",
            {"use_separable_cma": True, "with_margin": True},
            "settings.with_margin",
            "no separable CMA-ES with margin",
        ),
        ("grid", {"seed": 1}, "settings.seed", "not a setting of grid; it takes none"),
    ],
    ids=lambda v: v if isinstance(v, str) and " " not in v else None,
)
def test_bad_settings_are_refused_by_path(name: str, settings: dict[str, Any], path: str, message: str) -> None:
    errors = check_algorithm(Algorithm(name=AlgorithmName(name), settings=settings))
    assert len(errors) == 1, errors
    assert errors[0].path == f"spec.algorithm.{path}"
    assert message in errors[0].message
