"""A Sweep's search as a persistent Optuna study, asked and told: what the sweep controller codes against.

``StudyStore(url)`` holds the studies in a database: a SQLite file in the embedded runtime's state directory
(``sqlite:///abs/path.db``) or a PostgreSQL server (``postgresql://`` or ``postgresql+psycopg://``: psycopg 3,
the ``postgres`` extra). ``open(sweep)`` creates the sweep's study or loads it, named
``<namespace>.<name>.<uid>`` (the uid keeps a deleted and recreated sweep from inheriting the old study), and
returns a ``SweepStudy``:

- ``ask(count)``: new suggestions, each an Optuna trial in state RUNNING whose parameters are written to the
  database as they are suggested. The sweep's trial N is Optuna's trial N (0-based, per study), so a restarted
  controller maps its trial jobs back to the study's trials by number.
- ``asked()``: the trials asked and not told, by number: after a restart, the suggestions that may have no trial
  job yet (``core.sweeps.plan.plan_sweep`` takes them as ``asked``). A trial cut off by a crash while its
  parameters were being suggested is completed here, define-by-run again (Optuna keeps the parameters already
  written), so no number is lost or left half-made.
- ``report(number, intermediate)``: the trial's intermediate objective values by step, kept as history (Optuna's
  pruners are not used: early stopping is ``core.sweeps.stopping``); TPE reads them for pruned trials.
- ``tell(number, outcome, value)``: the trial's end, idempotent (telling a finished trial again does nothing).
  ``complete`` needs a value: a complete trial without one (or with NaN) is told as failed, as ``plan_sweep``
  counts it. ``pruned`` takes the last reported intermediate value (Optuna's rule; ``value`` is not used) and
  ``fail`` none.
- ``exhausted()``: a grid with every point asked; ``told()``: the numbers already told.

The sampler comes from ``spec.algorithm`` (``optuna_samplers``); the search space is suggested define-by-run
(``optuna_space``). Optuna's INFO logging is silenced: the controller says what happened, in its own words.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import optuna
import sqlalchemy
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from phalanx.adapters.sqlite_wal import switch_to_wal
from phalanx.adapters.sweeps import optuna_space
from phalanx.adapters.sweeps.algorithms import algorithm_available
from phalanx.adapters.sweeps.optuna_samplers import PerTrialSeeded, make_sampler
from phalanx.core.sweeps.substitute import active_parameters
from phalanx.model.sweeps import AlgorithmName, Direction, ParamValue, Sweep, SweepSpec

optuna.logging.set_verbosity(optuna.logging.WARNING)

Outcome = Literal["complete", "fail", "pruned"]
_STATES = {"complete": TrialState.COMPLETE, "fail": TrialState.FAIL, "pruned": TrialState.PRUNED}
#: How long a SQLite writer waits for another process's lock before giving up (the embedded control plane and a
#: CLI reading the same file).
SQLITE_BUSY_TIMEOUT_S = 30


class StudyStoreError(RuntimeError):
    """The study database cannot be used; the message says why and what to do."""


def study_name(sweep: Sweep) -> str:
    """``<namespace>.<name>.<uid>``: the sweep's study, unique per sweep object (a recreated sweep starts over)."""
    meta = sweep.metadata
    if not meta.uid:
        raise ValueError(f"sweep {sweep.key} has no uid: open the sweep as the store returns it")
    return f"{meta.namespace}.{meta.name}.{meta.uid}"


def _masked(url: sqlalchemy.URL) -> str:
    return url.render_as_string(hide_password=True)


def _storage(storage_url: str) -> RDBStorage:
    try:
        url = sqlalchemy.make_url(storage_url)
    except sqlalchemy.exc.ArgumentError as error:
        raise StudyStoreError(
            "the sweep study storage is not a database URL; write sqlite:////abs/path.db or "
            "postgresql://user:password@host/database"
        ) from error
    engine: dict[str, Any] = {}
    backend = url.get_backend_name()
    if backend == "sqlite":
        if url.database and url.database != ":memory:":
            path = Path(url.database)
            if not path.is_absolute():
                raise StudyStoreError(f"{_masked(url)}: the SQLite file must be an absolute path (sqlite:////abs/x.db)")
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_ahead_log(path)
        engine["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_S}
    elif backend == "postgresql":
        if url.drivername == "postgresql":
            url = url.set(drivername="postgresql+psycopg")  # psycopg 3 (the postgres extra), not psycopg2
        engine["pool_pre_ping"] = True  # a server restart leaves dead pooled connections: test them first
    else:
        raise StudyStoreError(f"{_masked(url)}: sweep studies are kept in SQLite or PostgreSQL, not {backend}")
    try:
        return RDBStorage(url.render_as_string(hide_password=False), engine_kwargs=engine)
    except ImportError as error:
        raise StudyStoreError(
            f"{_masked(url)}: the database driver is not installed: pip install 'phalanx[postgres]'"
        ) from error
    except sqlalchemy.exc.SQLAlchemyError as error:
        reason = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
        raise StudyStoreError(f"{_masked(url)}: cannot open the sweep study database: {reason}") from error


def _write_ahead_log(path: Path) -> None:
    """Put the SQLite file in WAL mode (it stays so): readers (the CLI) then never block the controller's writes."""
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_S)) as connection:
            switch_to_wal(connection, timeout_s=SQLITE_BUSY_TIMEOUT_S)
    except sqlite3.Error as error:
        raise StudyStoreError(f"sqlite:///{path}: cannot open the sweep study database: {error}") from error


class StudyStore:
    """The sweeps' studies in one database (SQLite file or PostgreSQL server)."""

    def __init__(self, storage_url: str) -> None:
        self._storage = _storage(storage_url)

    def open(self, sweep: Sweep) -> SweepStudy:
        """The sweep's study, created on first use, loaded afterwards (by this or another process)."""
        missing = algorithm_available(sweep.spec.algorithm.name)
        if missing is not None:
            raise StudyStoreError(f"sweep {sweep.key}: spec.algorithm.name: {missing}")
        sampler = make_sampler(sweep.spec)
        study = optuna.create_study(
            storage=self._storage,
            sampler=sampler,
            study_name=study_name(sweep),
            direction=Direction(sweep.spec.objective.direction).value,
            load_if_exists=True,
        )
        return SweepStudy(study, self._storage, sweep.spec)

    def delete(self, sweep: Sweep) -> None:
        """Drop the sweep's study (the sweep is deleted); nothing to do when it has none."""
        with contextlib.suppress(KeyError):
            optuna.delete_study(study_name=study_name(sweep), storage=self._storage)


class SweepStudy:
    """One sweep's study: suggestions asked, results told, all of it in the database."""

    def __init__(self, study: optuna.Study, storage: RDBStorage, spec: SweepSpec) -> None:
        self._study = study
        self._storage = storage
        self._spec = spec
        self._study_id = storage.get_study_id_from_name(study.study_name)
        grid = AlgorithmName(spec.algorithm.name) is AlgorithmName.GRID
        self._grid_size = optuna_space.grid_size(spec) if grid else None

    @property
    def name(self) -> str:
        """The study's name in the database."""
        return self._study.study_name

    def asked(self) -> dict[int, dict[str, ParamValue]]:
        """The trials asked and not told (Optuna RUNNING), by number, each completed if a crash cut it short."""
        running = self._study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        result = {}
        for frozen in running:
            params = optuna_space.typed(self._spec, frozen.params)
            if not _complete(self._spec, params):
                params = self._suggest(optuna.Trial(self._study, self._trial_id(frozen.number)))
            result[frozen.number] = params
        return result

    def ask(self, count: int) -> dict[int, dict[str, ParamValue]]:
        """``count`` new suggestions, persisted (fewer when a grid has fewer points left, none when exhausted)."""
        if self._grid_size is not None:
            count = min(count, self._grid_size - len(self._study.get_trials(deepcopy=False)))
        result = {}
        for _ in range(max(0, count)):
            trial = self._study.ask()
            result[trial.number] = self._suggest(trial)
        return result

    def _suggest(self, trial: optuna.Trial) -> dict[str, ParamValue]:
        params = optuna_space.suggest_all(trial, self._spec)
        sampler = self._study.sampler
        if isinstance(sampler, PerTrialSeeded):
            sampler.done(trial.number)
        return params

    def exhausted(self) -> bool:
        """Nothing more to suggest: a grid whose every point was asked (other algorithms never run out)."""
        if self._grid_size is None:
            return False
        return len(self._study.get_trials(deepcopy=False)) >= self._grid_size

    def report(self, number: int, intermediate: Mapping[int, float]) -> None:
        """Record the trial's intermediate values by step (new or changed ones); a finished trial is left as is."""
        trial_id = self._trial_id(number)
        frozen = self._storage.get_trial(trial_id)
        if frozen.state.is_finished():
            return
        for step, value in sorted(intermediate.items()):
            known = frozen.intermediate_values.get(step)
            if known is None or not (known == value or (math.isnan(known) and math.isnan(value))):
                self._storage.set_trial_intermediate_value(trial_id, step, float(value))

    def tell(self, number: int, outcome: Outcome, value: float | None) -> None:
        """Finish trial ``number``; telling a finished trial again is a no-op.

        ``complete`` without a value (or with NaN) is told as ``fail``; ``pruned`` and ``fail`` ignore ``value``.
        """
        self._trial_id(number)  # an unknown number is the caller's error, never a silent no-op
        state = _STATES[outcome]
        values: float | None = None
        if state is TrialState.COMPLETE:
            if value is None or math.isnan(value):
                state = TrialState.FAIL
            else:
                values = float(value)
        self._study.tell(number, values, state=state, skip_if_finished=True)

    def told(self) -> set[int]:
        """The numbers of the trials already told (complete, failed or pruned)."""
        finished = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
        return {frozen.number for frozen in self._study.get_trials(deepcopy=False, states=finished)}

    def _trial_id(self, number: int) -> int:
        try:
            return self._storage.get_trial_id_from_study_id_trial_number(self._study_id, number)
        except KeyError:
            raise KeyError(f"study {self.name} has no trial {number}") from None


def _complete(spec: SweepSpec, params: Mapping[str, ParamValue]) -> bool:
    # Every parameter active under the values chosen has one (inactive ones never do).
    return all(name in params for name in active_parameters(spec, params))
