"""The Optuna adapter on a SQLite file: ask/tell round trips, the search space, the grid, seeds and restarts."""

from __future__ import annotations

import copy
import logging
import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from phalanx.adapters.sweeps import optuna_space, optuna_study
from phalanx.adapters.sweeps.optuna_study import StudyStore, StudyStoreError, SweepStudy
from phalanx.core.sweeps.substitute import check_assignment
from phalanx.model.sweeps import Sweep, parse_sweep


@pytest.fixture(autouse=True)
def _warnings_are_errors() -> Iterator[None]:
    # Optuna warns when it has to adjust a range or a grid value: the adapter must hand it exact ones.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def make_sweep(doc: dict[str, Any], uid: str = "uid-1", **spec: Any) -> Sweep:
    document = copy.deepcopy(doc)
    document["metadata"]["uid"] = uid
    if "parameters" in spec:  # the template refers to the base space's parameters: keep it to none of them
        worker = document["spec"]["trial"]["spec"]["replicas"]["worker"]
        worker["template"] = {"command": ["python", "train.py"]}
    document["spec"].update(spec)
    return parse_sweep(document)


def url(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture
def store(tmp_path: Path) -> StudyStore:
    return StudyStore(url(tmp_path / "studies" / "sweeps.db"))


def frozen(study: SweepStudy, number: int) -> optuna.trial.FrozenTrial:
    trials = {t.number: t for t in study._study.get_trials(deepcopy=False)}
    return trials[number]


def drive(study: SweepStudy, rounds: int, per_round: int = 1) -> list[dict[str, Any]]:
    """Ask and tell ``rounds`` times; the objective is a deterministic function of the parameters."""
    seen = []
    for _ in range(rounds):
        for number, params in sorted(study.ask(per_round).items()):
            seen.append({"number": number, **params})
            numbers = [v for v in params.values() if isinstance(v, int | float)]
            study.tell(number, "complete", sum((v - 0.3) ** 2 for v in numbers))
    return seen


def test_ask_numbers_trials_from_zero_and_persists_them(doc: dict[str, Any], store: StudyStore) -> None:
    study = store.open(make_sweep(doc))
    first = study.ask(2)
    assert sorted(first) == [0, 1]
    assert study.asked() == first
    assert sorted(study.ask(1)) == [2]
    assert study.told() == set()


def test_values_have_the_models_types_and_are_points_of_the_space(doc: dict[str, Any], store: StudyStore) -> None:
    sweep = make_sweep(doc, algorithm={"name": "random", "seed": 3})
    suggestions = store.open(sweep).ask(12)
    for params in suggestions.values():
        assert check_assignment(sweep.spec, params) == []
        assert type(params["lr"]) is float
        assert type(params["layers"]) is int
        assert type(params["batch"]) is int
        assert params["optimizer"] in ("adam", "sgd")


def test_discrete_values_come_back_exactly_as_listed(doc: dict[str, Any], store: StudyStore) -> None:
    parameters = [{"name": "width", "type": "discrete", "values": [16, 0.5, 64]}]
    sweep = make_sweep(doc, parameters=parameters, algorithm={"name": "grid"})
    study = store.open(sweep)
    asked = study.ask(3)
    reopened = StudyStore(str(store._storage.url)).open(sweep).asked()
    for suggestions in (asked, reopened):
        values = sorted((params["width"] for params in suggestions.values()), key=float)
        assert values == [0.5, 16, 64]
        assert [type(v) for v in values] == [float, int, int]


def test_conditional_parameter_is_suggested_only_under_its_condition(doc: dict[str, Any], store: StudyStore) -> None:
    sweep = make_sweep(doc, algorithm={"name": "tpe", "seed": 1, "settings": {"n_startup_trials": 4}})
    seen = drive(store.open(sweep), rounds=10)
    optimizers = {row["optimizer"] for row in seen}
    assert optimizers == {"adam", "sgd"}, "both branches should have been visited in 10 trials"
    for row in seen:
        assert ("momentum" in row) == (row["optimizer"] == "sgd"), row


def test_stepped_ranges_give_exact_steps_within_bounds(doc: dict[str, Any], store: StudyStore) -> None:
    parameters = [
        {"name": "dropout", "type": "double", "min": 0.1, "max": 0.4, "step": 0.1},
        {"name": "every", "type": "int", "min": 1, "max": 10, "step": 4},
        {"name": "units", "type": "int", "min": 8, "max": 512, "log": True},
    ]
    sweep = make_sweep(doc, parameters=parameters, algorithm={"name": "random", "seed": 5})
    suggestions = store.open(sweep).ask(20)
    assert {p["dropout"] for p in suggestions.values()} <= {0.1, 0.2, 0.3, 0.4}
    assert {p["every"] for p in suggestions.values()} == {1, 5, 9}
    for params in suggestions.values():
        assert check_assignment(sweep.spec, params) == []


def test_tell_is_idempotent_and_told_lists_finished_trials(doc: dict[str, Any], store: StudyStore) -> None:
    study = store.open(make_sweep(doc))
    study.ask(3)
    study.tell(0, "complete", 0.25)
    study.tell(1, "fail", None)
    study.tell(0, "complete", 9.0)  # a second tell (a restarted controller) changes nothing
    study.tell(1, "complete", 1.0)
    assert study.told() == {0, 1}
    assert sorted(study.asked()) == [2]
    assert (frozen(study, 0).state, frozen(study, 0).value) == (TrialState.COMPLETE, 0.25)
    assert frozen(study, 1).state is TrialState.FAIL


@pytest.mark.parametrize("value", [None, math.nan], ids=["none", "nan"])
def test_complete_without_a_value_is_told_as_failed(
    doc: dict[str, Any], store: StudyStore, value: float | None
) -> None:
    study = store.open(make_sweep(doc))
    study.ask(1)
    study.tell(0, "complete", value)
    assert frozen(study, 0).state is TrialState.FAIL


def test_unknown_trial_number_is_an_error(doc: dict[str, Any], store: StudyStore) -> None:
    study = store.open(make_sweep(doc))
    with pytest.raises(KeyError, match="no trial 7"):
        study.tell(7, "complete", 1.0)
    with pytest.raises(KeyError, match="no trial 7"):
        study.report(7, {1: 1.0})


def test_report_keeps_intermediate_values_and_pruned_takes_the_last(doc: dict[str, Any], store: StudyStore) -> None:
    study = store.open(make_sweep(doc))
    study.ask(1)
    study.report(0, {1: 0.9, 2: 0.7})
    study.report(0, {1: 0.9, 2: 0.7, 3: 0.6})  # the whole history again, as the controller reads it
    assert frozen(study, 0).intermediate_values == {1: 0.9, 2: 0.7, 3: 0.6}
    study.tell(0, "pruned", None)
    trial = frozen(study, 0)
    assert (trial.state, trial.value) == (TrialState.PRUNED, 0.6)
    study.report(0, {4: 0.1})  # after the end: history is closed, and no error
    assert frozen(study, 0).intermediate_values == {1: 0.9, 2: 0.7, 3: 0.6}


def test_grid_visits_every_point_once_then_is_exhausted(doc: dict[str, Any], store: StudyStore) -> None:
    parameters = [
        {"name": "dropout", "type": "double", "min": 0.1, "max": 0.4, "step": 0.1},
        {"name": "optimizer", "type": "categorical", "values": ["adam", "sgd"]},
    ]
    sweep = make_sweep(doc, parameters=parameters, algorithm={"name": "grid", "seed": 2})
    study = store.open(sweep)
    first = study.ask(5)
    assert not study.exhausted()
    rest = study.ask(10)
    assert len(first) + len(rest) == 8
    assert study.exhausted()
    assert study.ask(3) == {}
    points = {(p["dropout"], p["optimizer"]) for p in {**first, **rest}.values()}
    assert points == {(d, o) for d in (0.1, 0.2, 0.3, 0.4) for o in ("adam", "sgd")}
    for number in sorted({**first, **rest}):
        study.tell(number, "complete", float(number))  # the last point's tell must not call Study.stop
    assert study.told() == set(range(8))


def test_grid_order_follows_the_seed(doc: dict[str, Any], tmp_path: Path) -> None:
    parameters = [{"name": "layers", "type": "int", "min": 1, "max": 6}]

    def order(seed: int, name: str) -> list[Any]:
        sweep = make_sweep(doc, parameters=parameters, algorithm={"name": "grid", "seed": seed})
        asked = StudyStore(url(tmp_path / f"{name}.db")).open(sweep).ask(6)
        return [asked[n]["layers"] for n in sorted(asked)]

    seeded = order(4, "a")
    assert order(4, "b") == seeded
    assert sorted(seeded) == [1, 2, 3, 4, 5, 6]
    assert order(5, "c") != seeded


SEEDED = [
    ("random", {}),
    ("tpe", {"n_startup_trials": 3}),
    ("cmaes", {"n_startup_trials": 2}),
]
NUMERIC = [
    {"name": "x", "type": "double", "min": -2.0, "max": 2.0},
    {"name": "lr", "type": "double", "min": 1e-4, "max": 1.0, "log": True},
    {"name": "layers", "type": "int", "min": 1, "max": 8},
]


@pytest.mark.parametrize(("algorithm", "settings"), SEEDED, ids=[name for name, _ in SEEDED])
def test_same_seed_and_results_give_the_same_suggestions_across_restarts(
    doc: dict[str, Any], tmp_path: Path, algorithm: str, settings: dict[str, Any]
) -> None:
    sweep = make_sweep(doc, parameters=NUMERIC, algorithm={"name": algorithm, "seed": 11, "settings": settings})
    straight = drive(StudyStore(url(tmp_path / "straight.db")).open(sweep), rounds=8)
    # The same sweep run by a control plane that restarts twice: every StudyStore and sampler is new.
    restarted = []
    for _ in range(3):
        restarted += drive(StudyStore(url(tmp_path / "restarted.db")).open(sweep), rounds=3)
    assert restarted[:8] == straight
    other = make_sweep(doc, parameters=NUMERIC, algorithm={"name": algorithm, "seed": 12, "settings": settings})
    assert drive(StudyStore(url(tmp_path / "other.db")).open(other), rounds=8) != straight


def test_tpe_models_the_results_after_its_startup_trials(doc: dict[str, Any], store: StudyStore) -> None:
    # A quadratic bowl at x = 0.3: after random startup trials, TPE's suggestions crowd towards the optimum.
    parameters = [{"name": "x", "type": "double", "min": -10.0, "max": 10.0}]
    algorithm = {"name": "tpe", "seed": 0, "settings": {"n_startup_trials": 5}}
    sweep = make_sweep(doc, parameters=parameters, algorithm=algorithm)
    seen = [row["x"] for row in drive(store.open(sweep), rounds=30)]
    startup, modelled = seen[:5], seen[-10:]
    assert sum(abs(x - 0.3) for x in modelled) / 10 < sum(abs(x - 0.3) for x in startup) / 5


def test_asked_survives_a_restart(doc: dict[str, Any], tmp_path: Path) -> None:
    sweep = make_sweep(doc)
    before = StudyStore(url(tmp_path / "s.db")).open(sweep)
    asked = before.ask(2)
    before.tell(0, "complete", 0.5)
    after = StudyStore(url(tmp_path / "s.db")).open(sweep)
    assert after.asked() == {1: asked[1]}
    assert after.told() == {0}
    assert sorted(after.ask(1)) == [2], "a restart must not reuse a number"


def test_a_trial_cut_off_while_suggesting_is_completed_not_lost(doc: dict[str, Any], tmp_path: Path) -> None:
    sweep = make_sweep(doc)
    store = StudyStore(url(tmp_path / "s.db"))
    study = store.open(sweep)
    # What a crash leaves: trial 0 created, its first parameter written, the others not.
    trial = study._study.ask()
    lr = optuna_space.suggest(trial, sweep.spec.parameters[0])
    resumed = StudyStore(url(tmp_path / "s.db")).open(sweep).asked()
    assert list(resumed) == [0]
    assert resumed[0]["lr"] == lr
    assert check_assignment(sweep.spec, resumed[0]) == []
    assert StudyStore(url(tmp_path / "s.db")).open(sweep).asked() == resumed, "completed once, then stable"


def test_studies_are_per_sweep_object_and_deleted_with_it(doc: dict[str, Any], store: StudyStore) -> None:
    first = make_sweep(doc, uid="a")
    study = store.open(first)
    study.ask(2)
    assert study.name == "default.lr-search.a"
    assert store.open(make_sweep(doc, uid="b")).asked() == {}, "a recreated sweep starts a new study"
    store.delete(first)
    store.delete(first)  # already gone: nothing to do
    assert store.open(first).asked() == {}


def test_maximize_is_the_studys_direction(doc: dict[str, Any], store: StudyStore) -> None:
    sweep = make_sweep(doc, objective={"metric": "accuracy", "direction": "maximize"})
    assert store.open(sweep)._study.direction is optuna.study.StudyDirection.MAXIMIZE


def test_a_sweep_without_uid_has_no_study(doc: dict[str, Any], store: StudyStore) -> None:
    sweep = make_sweep(doc, uid="")
    with pytest.raises(ValueError, match="has no uid"):
        store.open(sweep)


def test_an_algorithm_that_cannot_run_here_is_refused_when_opened(
    doc: dict[str, Any], store: StudyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(optuna_study, "algorithm_available", lambda name: "gp needs PyTorch: install it, or use tpe")
    with pytest.raises(StudyStoreError, match=r"spec\.algorithm\.name: gp needs PyTorch"):
        store.open(make_sweep(doc))


@pytest.mark.parametrize(
    ("storage_url", "message"),
    [
        ("not a url", "not a database URL"),
        ("mysql://u:secret@host/db", "SQLite or PostgreSQL, not mysql"),
        ("sqlite:///relative/x.db", "absolute path"),
    ],
    ids=["garbage", "mysql", "relative"],
)
def test_bad_storage_urls_are_refused_with_the_fix(storage_url: str, message: str) -> None:
    with pytest.raises(StudyStoreError, match=message) as caught:
        StudyStore(storage_url)
    assert "secret" not in str(caught.value)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_optuna_info_logging_is_silenced(doc: dict[str, Any], store: StudyStore) -> None:
    # Optuna's logger does not propagate to the root: listen on it directly ("A new study created ..." is INFO).
    records = _Records()
    logger = logging.getLogger("optuna")
    logger.addHandler(records)
    try:
        study = store.open(make_sweep(doc))
        study.ask(1)
        study.tell(0, "complete", 1.0)
        study.tell(0, "complete", 1.0)  # Optuna logs the skipped tell at INFO
    finally:
        logger.removeHandler(records)
    assert records.messages == []
