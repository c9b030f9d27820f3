"""Trial metrics, parsed: final values from ``metrics.json``, intermediate ones from stdout lines.

The one stdout format (documented for users in round 2's docs/sweeps.md)::

    phalanx-metric step=<int> <name>=<float> [<name>=<float> ...]

The prefix is case-sensitive and starts the line; ``step`` is a whole number >= 0; names are metric names
(model.sweeps.METRIC_NAME); values are finite floats. A line that starts with the prefix but breaks any of this is
ignored whole and counted (so ``describe`` can say "3 malformed metric lines"), never half-read: a line missing one
value must not shift another's meaning. Other lines are the program's own output and are not looked at.

A later report of the same metric at the same step replaces the earlier one (a program that retries a step
reports it again).

A Sweep converted from a Katib Experiment (its ``phalanx.dev/metrics-format`` annotation is ``katib-stdout``)
also reads Katib's StdOut lines, ``name=value`` pairs anywhere in a line (or the Experiment's own
``metricsFormat`` expressions, two groups each: name and value): ``parse_katib`` numbers each metric's reports
1, 2, 3... as its steps, as Katib's collector keeps them in order with no step of their own.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from phalanx.model.sweeps import METRIC_NAME

PREFIX = "phalanx-metric "


@dataclass
class IntermediateMetrics:
    """Per metric, step -> value; and how many prefixed lines could not be read."""

    values: dict[str, dict[int, float]] = field(default_factory=dict)
    malformed: int = 0

    def of(self, metric: str) -> dict[int, float]:
        """The metric's values by step (empty when never reported)."""
        return self.values.get(metric, {})


def parse_metric_line(line: str) -> tuple[int, dict[str, float]] | None:
    """``(step, {name: value})`` of one ``phalanx-metric`` line, or ``None`` when it is malformed.

    Raises nothing: a program's output is not the user's spec.
    """
    parts = line.rstrip("\r\n").split()
    if len(parts) < 3 or not line.startswith(PREFIX) or not parts[1].startswith("step="):
        return None
    step_text = parts[1].removeprefix("step=")
    if not step_text.isascii() or not step_text.isdigit() or len(step_text) > 18:
        return None
    found: dict[str, float] = {}
    for part in parts[2:]:
        name, sep, text = part.partition("=")
        if not sep or not METRIC_NAME.fullmatch(name) or name == "step" or name in found:
            return None
        try:
            value = float(text)
        except ValueError:
            return None
        if not math.isfinite(value):
            return None
        found[name] = value
    return int(step_text), found


def parse_intermediate(lines: Iterable[str], into: IntermediateMetrics | None = None) -> IntermediateMetrics:
    """Every ``phalanx-metric`` line of ``lines`` (stdout, in order), added to ``into`` when given."""
    metrics = into if into is not None else IntermediateMetrics()
    for line in lines:
        if not line.startswith(PREFIX.rstrip()):
            continue
        parsed = parse_metric_line(line)
        if parsed is None:
            metrics.malformed += 1
            continue
        step, values = parsed
        for name, value in values.items():
            metrics.values.setdefault(name, {})[step] = value
    return metrics


#: Katib's default StdOut filter (its metricsFormat default, with its inner groups made non-capturing).
KATIB_DEFAULT_FORMAT = r"([\w|-]+)\s*=\s*([+-]?\d*(?:\.\d+)?(?:[Ee][+-]?\d+)?)"


def parse_katib(
    lines: Iterable[str], formats: Iterable[str] = (KATIB_DEFAULT_FORMAT,), counts: dict[str, int] | None = None
) -> IntermediateMetrics:
    """Katib StdOut reports: every ``name=value`` match of ``formats`` outside ``phalanx-metric`` lines.

    Each metric's reports are its steps 1, 2, 3... in order; a value that is no finite number is left out.
    ``counts`` (each metric's reports so far, updated here) numbers on from an earlier part of the same log.
    """
    patterns = [re.compile(text) for text in formats]
    metrics = IntermediateMetrics()
    counts = {} if counts is None else counts
    for line in lines:
        if line.startswith(PREFIX.rstrip()):
            continue
        for pattern in patterns:
            for match in pattern.finditer(line):
                name, text = match.group(1), match.group(2)
                try:
                    value = float(text)
                except ValueError:
                    continue
                if not math.isfinite(value):
                    continue
                counts[name] = counts.get(name, 0) + 1
                metrics.values.setdefault(name, {})[counts[name]] = value
    return metrics


def parse_final(text: str) -> dict[str, float]:
    """``metrics.json``: a mapping of names to numbers; other entries (strings, lists, NaN) are left out.

    Raises:
        ValueError: when the text is not a JSON mapping (the job's outputs are then reported unreadable).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"metrics.json is not JSON: {error.msg} at line {error.lineno}") from None
    if not isinstance(data, dict):
        raise ValueError('metrics.json must hold a mapping of metric names to numbers, e.g. {"val_loss": 0.12}')
    found: dict[str, float] = {}
    for name, value in data.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:  # an integer past a float's range: not a usable metric
                continue
            if math.isfinite(number):
                found[str(name)] = number
    return found


def objective_value(metric: str, final: Mapping[str, float], intermediate: Mapping[int, float]) -> float | None:
    """A trial's objective: its final value, else its last intermediate one (highest step), else ``None``.

    Katib's ``metricStrategies`` (min, max, latest; by default the best report) come later: a program that writes
    ``metrics.json`` states its result, and its last report is the trial's state when it ended.
    """
    if metric in final:
        return final[metric]
    if intermediate:
        return intermediate[max(intermediate)]
    return None


def missing_objective(metric: str, final: Mapping[str, float]) -> str:
    """Why a succeeded trial has no objective value, naming what it did report (a misspelt metric shows at once)."""
    if not final:
        return f"it reported no {metric}"
    reported = ", ".join(sorted(final)[:10])
    return f"it reported no {metric}; its metrics.json has {reported}: is spec.objective.metric misspelt?"
