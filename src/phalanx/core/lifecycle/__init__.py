"""The job lifecycle: one transition table for every backend (DESIGN §3)."""

from phalanx.core.lifecycle.transitions import (
    ACTIVE_PHASES,
    HOLDING_PHASES,
    TRANSITIONS,
    IllegalTransitionError,
    can_transition,
    transition,
)

__all__ = [
    "ACTIVE_PHASES",
    "HOLDING_PHASES",
    "TRANSITIONS",
    "IllegalTransitionError",
    "can_transition",
    "transition",
]
