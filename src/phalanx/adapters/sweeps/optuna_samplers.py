"""The Optuna sampler of each algorithm, seeded per trial so that a restarted control plane suggests the same.

An Optuna sampler seeded once draws from one random stream for its whole life: a control plane that restarts
after trial 5 builds a new sampler whose stream starts again at the beginning, and TPE's startup trials (random
ones) would repeat trial 0's point, then trial 1's... Here every trial gets its own sampler, seeded with a hash of
the sweep's seed and the trial's number: the same seed and the same results told give the same suggestions,
whether the sweep ran in one process or in ten, and two trials never share a random stream.

That costs nothing the samplers keep: TPE, random and GP derive everything from the study's trials (GP caches
its kernel fit only to start the next fit sooner); CMA-ES keeps its optimizer in the trials' system attributes;
the grid keeps one sampler seeded with the sweep's seed, since the seed only shuffles the grid and each trial
number then owns one point.

Nothing is done after a trial: samplers only process constraints there (none here), and the grid sampler would
call ``Study.stop``, which Optuna refuses outside ``optimize``; the sweep ends through ``SweepStudy.exhausted``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from phalanx.adapters.sweeps import optuna_space
from phalanx.model.sweeps import Algorithm, AlgorithmName, SweepSpec

#: Samplers kept for trials being suggested; one SweepStudy suggests one trial at a time, a few suffice.
_KEPT = 8


def trial_seed(seed: int, number: int) -> int:
    """The seed of trial ``number``'s sampler: a hash, so neighbouring trials get unrelated streams."""
    digest = hashlib.sha256(f"phalanx-sweep/{seed}/{number}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def make_sampler(spec: SweepSpec) -> BaseSampler:
    """The sampler of ``spec.algorithm``, its settings passed as Optuna's keyword arguments (checked at the door)."""
    algorithm = spec.algorithm
    if AlgorithmName(algorithm.name) is AlgorithmName.GRID:
        return AskTellGrid(optuna_space.grid(spec), seed=algorithm.seed)
    return PerTrialSeeded(algorithm)


def _one_sampler(algorithm: Algorithm, seed: int) -> BaseSampler:
    name = AlgorithmName(algorithm.name)
    settings: dict[str, Any] = dict(algorithm.settings)
    factories: dict[AlgorithmName, Callable[..., BaseSampler]] = {
        AlgorithmName.RANDOM: optuna.samplers.RandomSampler,
        AlgorithmName.TPE: optuna.samplers.TPESampler,
        AlgorithmName.CMAES: optuna.samplers.CmaEsSampler,
        AlgorithmName.GP: optuna.samplers.GPSampler,
    }
    return factories[name](seed=seed, **settings)


class PerTrialSeeded(BaseSampler):
    """A sampler that is a fresh one of the algorithm for each trial, seeded by ``trial_seed``."""

    def __init__(self, algorithm: Algorithm) -> None:
        self._algorithm = algorithm
        self._samplers: dict[int, BaseSampler] = {}
        # Built once up front so that bad settings fail when the study is opened, not at the first trial.
        _one_sampler(algorithm, trial_seed(algorithm.seed, 0))

    def _for(self, trial: FrozenTrial) -> BaseSampler:
        sampler = self._samplers.get(trial.number)
        if sampler is None:
            # The stream of one trial must go on across its parameters (a fresh stream per parameter would give
            # two uniform parameters the same draw), so its sampler is kept while it is being suggested.
            while len(self._samplers) >= _KEPT:
                del self._samplers[min(self._samplers)]
            sampler = _one_sampler(self._algorithm, trial_seed(self._algorithm.seed, trial.number))
            self._samplers[trial.number] = sampler
        return sampler

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        """The trial's own sampler prepares it (the grid's picks its point here)."""
        self._for(trial).before_trial(study, trial)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        """The trial's own sampler's joint search space (multivariate TPE, CMA-ES, GP)."""
        return self._for(trial).infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        """The trial's own sampler's joint suggestion."""
        return self._for(trial).sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        """The trial's own sampler's suggestion for one parameter."""
        return self._for(trial).sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        """Nothing to process (no constraints); the trial's sampler is forgotten."""
        self._samplers.pop(trial.number, None)

    def reseed_rng(self) -> None:
        """Nothing: seeds come from trial numbers, there is no stream to reseed."""
        # Seeds are derived from the trial number: there is no stream to reseed (Optuna calls this for n_jobs > 1).
        pass

    def done(self, number: int) -> None:
        """Forget trial ``number``'s sampler: all its parameters are suggested."""
        self._samplers.pop(number, None)


class AskTellGrid(optuna.samplers.GridSampler):
    """Optuna's grid sampler without the ``Study.stop`` it calls after the last point (refused in ask-and-tell)."""

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        """Nothing: the sweep ends through ``SweepStudy.exhausted``, not ``Study.stop``."""
