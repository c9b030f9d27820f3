"""Sweep decisions, pure: trial jobs, metrics, early stopping and the sweep's idempotent decision function.

``substitute`` makes a trial's TrainingJob from the template, ``metrics`` reads a trial's metrics.json and
``phalanx-metric`` lines, ``stopping`` holds the early-stopping rules and ``plan`` decides what to do next. The
suggestion algorithm (Optuna's ask/tell) is not here: it is an adapter, and the plan takes its suggestions as input.
"""
