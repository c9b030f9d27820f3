"""What the sweep controller needs of a search algorithm's persistent study (the Optuna adapter serves it).

``adapters.sweeps.optuna_study`` implements these two protocols (``StudyStore``, ``SweepStudy``); the controller
is written against them alone, so that its unit tests run with a small fake and no Optuna. The study is the
sweep's memory of what it *asked*: a suggestion handed out and not yet told survives a restart there
(``asked``), so that a crash between asking and creating a trial job neither loses nor repeats a trial.

``UnavailableStudies`` stands in where the algorithm's package is not installed: every sweep then waits, its status
saying how to install it. ``LazyStudies`` makes the store on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal, Protocol

from phalanx.adapters.lazy_imports import serially
from phalanx.model.sweeps import ParamValue, Sweep

Outcome = Literal["complete", "fail", "pruned"]


class StudyUnavailableError(Exception):
    """The sweep's study cannot be opened for a reason its owner must fix (the message says how)."""


class SweepStudy(Protocol):
    """One sweep's study: ask for suggestions, tell outcomes; trial numbers are the sweep's."""

    def asked(self) -> dict[int, dict[str, ParamValue]]:
        """Suggestions asked and not told, by trial number."""
        ...

    def ask(self, count: int) -> dict[int, dict[str, ParamValue]]:
        """``count`` new suggestions, persisted before they are returned."""
        ...

    def exhausted(self) -> bool:
        """Nothing more to suggest (a grid fully asked)."""
        ...

    def report(self, number: int, intermediate: Mapping[int, float]) -> None:
        """Keep the trial's intermediate values by step (history only: early stopping is ours)."""
        ...

    def tell(self, number: int, outcome: Outcome, value: float | None) -> None:
        """The trial's outcome; telling a finished trial again does nothing."""
        ...

    def told(self) -> set[int]:
        """Numbers already told."""
        ...


class StudyStore(Protocol):
    """Where the studies of every sweep live (a SQLite file, a PostgreSQL database)."""

    def open(self, sweep: Sweep) -> SweepStudy:
        """Create or load the sweep's study (one per sweep uid).

        Raises:
            StudyUnavailableError: it cannot be opened here; the message says why and what to do.
        """
        ...

    def delete(self, sweep: Sweep) -> None:
        """Drop the sweep's study (the sweep was deleted); nothing when there is none."""
        ...


class UnavailableStudies:
    """A ``StudyStore`` that opens nothing and says why: the algorithm's package is missing."""

    def __init__(self, why: str) -> None:
        self.why = why

    def open(self, sweep: Sweep) -> SweepStudy:
        """Refuse, with the sentence given."""
        raise StudyUnavailableError(self.why)

    def delete(self, sweep: Sweep) -> None:
        """Nothing was ever opened."""


class LazyStudies:
    """A ``StudyStore`` made on first use.

    A control plane with no sweep then never imports the algorithm's package (Optuna takes a while to import).
    """

    def __init__(self, make: Callable[[], StudyStore]) -> None:
        self._make = make
        self._store: StudyStore | None = None

    def _real(self) -> StudyStore:
        if self._store is None:
            self._store = self._make()
        return self._store

    def open(self, sweep: Sweep) -> SweepStudy:
        """The real store's ``open``."""
        return self._real().open(sweep)

    def delete(self, sweep: Sweep) -> None:
        """The real store's ``delete``."""
        self._real().delete(sweep)


def optuna_studies(storage_url: str, who: str) -> StudyStore:
    """The Optuna studies in the database at ``storage_url``; without Optuna, sweeps wait saying how to install it.

    ``who`` names the process that runs the sweeps in that sentence (``the control plane``, ``phalanx-operator``).
    """
    # Under the lazy-import lock: Optuna loads SQLAlchemy and Alembic, which other threads may be loading for the
    # job history or a SQL Dataset (adapters.lazy_imports).
    with serially():
        try:
            # Imported here: Optuna is an extra (``phalanx[sweeps]``), and a control plane runs without it.
            from phalanx.adapters.sweeps.optuna_study import StudyStore as OptunaStudies
            from phalanx.adapters.sweeps.optuna_study import StudyStoreError
        except ImportError as error:
            return UnavailableStudies(
                f"sweeps need Optuna, which {who} cannot import ({error}); install it with "
                f"`pip install 'phalanx[sweeps]'` and restart {who}"
            )
        try:
            return _Explained(OptunaStudies(storage_url), StudyStoreError)
        except StudyStoreError as error:  # a storage URL that cannot be used: every sweep waits, saying why
            return UnavailableStudies(f"{who} cannot use its sweep storage: {error}")


class _Explained:
    """A store whose refusals make the sweep wait with the store's sentence instead of failing a pass.

    Its refusals are an algorithm's library missing where the sweep runs, or a database it cannot open: the owner
    fixes those, as for ``StudyUnavailableError``.
    """

    def __init__(self, store: StudyStore, refusal: type[Exception]) -> None:
        self._store = store
        self._refusal = refusal

    def open(self, sweep: Sweep) -> SweepStudy:
        """The store's ``open``; its refusal becomes ``StudyUnavailableError``."""
        try:
            return self._store.open(sweep)
        except self._refusal as error:
            raise StudyUnavailableError(str(error)) from error

    def delete(self, sweep: Sweep) -> None:
        """The store's ``delete``."""
        self._store.delete(sweep)
