"""Colours of phases, shared by tables and the live follower.

Kept free of the model layer: the fast path of `phalanx run` imports it.
"""

from __future__ import annotations

PHASE_STYLE: dict[str, str] = {
    "Pending": "dim",
    "Queued": "yellow",
    "Admitted": "cyan",
    "Downloading": "cyan",
    "Running": "blue",
    "Restarting": "magenta",
    "Storing": "cyan",
    "Succeeded": "green",
    "Failed": "bold red",
    "Preempted": "magenta",
    "Halting": "yellow",
    "Halted": "yellow",
    "Quarantined": "bold red",  # not a phase: a job the control plane sets aside (``phalanx status`` says why)
}
# Phases after which `run` and `logs -f` stop following: model.jobs.STOPPED_PHASES, spelt out because `run`'s
# fast path imports this module and no model (tests/unit/cli/test_output.py checks both).
STOP_FOLLOWING = frozenset({"Succeeded", "Failed", "Halted"})


def styled_phase(phase: str) -> str:
    """The phase name in its colour."""
    style = PHASE_STYLE.get(phase, "")
    return f"[{style}]{phase}[/]" if style else phase


def phase_label(phase: str, width: int = 12) -> str:
    """The phase padded to a column, then coloured (markup must not count towards the width)."""
    style = PHASE_STYLE.get(phase, "")
    padded = phase.ljust(width)
    return f"[{style}]{padded}[/]" if style else padded
