"""Search algorithms for Sweeps: Optuna's samplers behind a small ask/tell interface, with a persistent study.

- ``algorithms``: which algorithms this installation can run and which sampler settings each takes, checked at
  the door without importing Optuna (so a sweep is refused with the fix, never failed at its first trial);
- ``optuna_space``: the search space as Optuna distributions, suggested define-by-run (conditional parameters);
- ``optuna_samplers``: the sampler of each algorithm, seeded per trial so a restart suggests what it would have;
- ``optuna_study``: ``StudyStore`` and ``SweepStudy``, the interface the sweep controller codes against.

Optuna (and ``cmaes``) come with the ``sweeps`` extra; only ``optuna_*`` modules import it.
"""
