"""The lifecycle table: every legal move works and records a condition, every other move raises."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from phalanx.core.lifecycle import (
    ACTIVE_PHASES,
    HOLDING_PHASES,
    TRANSITIONS,
    IllegalTransitionError,
    can_transition,
    transition,
)
from phalanx.model.jobs import TERMINAL_PHASES, Phase, ReplicaPlacement, TrainingJobStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)
P = Phase
LEGAL = [(source, target) for source, targets in TRANSITIONS.items() for target in sorted(targets)]
ILLEGAL = [(s, t) for s, t in itertools.product(Phase, Phase) if t not in TRANSITIONS[s]]
RELEASING = {P.QUEUED, P.HALTED, P.SUCCEEDED, P.FAILED}


def status_in(phase: Phase) -> TrainingJobStatus:
    return TrainingJobStatus(phase=phase, placements={"q-worker-0": ReplicaPlacement(node="n0", gpus=[0])})


def test_the_table_covers_every_phase() -> None:
    assert set(TRANSITIONS) == set(Phase)
    assert len(LEGAL) + len(ILLEGAL) == len(Phase) ** 2


@pytest.mark.parametrize(("source", "target"), LEGAL, ids=[f"{s}->{t}" for s, t in LEGAL])
def test_every_legal_transition(source: Phase, target: Phase) -> None:
    before = status_in(source)
    after = transition(before, target, reason="Because", message="it may", now=T0)
    assert can_transition(source, target)
    assert after.phase == target
    assert (after.reason, after.message) == ("Because", "it may")
    condition = after.conditions[-1]
    assert (condition.type, condition.status, condition.reason, condition.message) == (
        target,
        "True",
        "Because",
        "it may",
    )
    assert condition.last_transition_time == T0
    assert after.completion_time == (T0 if target in TERMINAL_PHASES else None)
    assert bool(after.placements) == (target not in RELEASING)
    assert before.phase == source  # the input is not changed


@pytest.mark.parametrize(("source", "target"), ILLEGAL, ids=[f"{s}->{t}" for s, t in ILLEGAL])
def test_every_illegal_transition_raises(source: Phase, target: Phase) -> None:
    assert not can_transition(source, target)
    with pytest.raises(IllegalTransitionError) as raised:
        transition(status_in(source), target, reason="No", message="no", now=T0)
    assert (raised.value.current, raised.value.target) == (source, target)
    assert f"from {source} to {target}" in str(raised.value)


def test_illegal_transition_message_lists_the_ways_out() -> None:
    with pytest.raises(IllegalTransitionError, match="from Halted it may go to Failed, Queued"):
        transition(status_in(P.HALTED), P.RUNNING, reason="x", message="x", now=T0)
    with pytest.raises(IllegalTransitionError, match="none: it is final"):
        transition(status_in(P.SUCCEEDED), P.RUNNING, reason="x", message="x", now=T0)


def test_terminal_phases_are_final() -> None:
    for phase in TERMINAL_PHASES:
        assert TRANSITIONS[phase] == frozenset()
    assert frozenset(Phase) - ACTIVE_PHASES == TERMINAL_PHASES


def test_every_phase_is_reachable_and_every_active_phase_can_finish() -> None:
    def reachable(start: Phase) -> set[Phase]:
        seen, todo = {start}, [start]
        while todo:
            for nxt in TRANSITIONS[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    assert reachable(P.PENDING) == set(Phase)
    for phase in ACTIVE_PHASES:
        assert reachable(phase) & TERMINAL_PHASES, phase


def test_holding_phases_are_the_ones_between_admission_and_release() -> None:
    assert HOLDING_PHASES <= ACTIVE_PHASES
    for source in HOLDING_PHASES:
        for target in TRANSITIONS[source]:
            kept = bool(transition(status_in(source), target, reason="r", message="m", now=T0).placements)
            assert kept == (target not in RELEASING), (source, target)


# -- conditions ---------------------------------------------------------------------------------------------
def walk(*phases: Phase) -> TrainingJobStatus:
    status = TrainingJobStatus()
    for step, phase in enumerate(phases):
        status = transition(status, phase, reason=f"R{step}", message=f"m{step}", now=T0 + timedelta(seconds=step))
    return status


def test_leaving_a_phase_turns_its_condition_false_and_keeps_its_time() -> None:
    status = walk(P.QUEUED, P.ADMITTED)
    conditions = {c.type: c for c in status.conditions}
    assert conditions["Queued"].status == "False"
    assert conditions["Queued"].last_transition_time == T0
    assert conditions["Admitted"].status == "True"


def test_one_condition_per_phase_reentry_replaces_it() -> None:
    status = walk(P.QUEUED, P.ADMITTED, P.DOWNLOADING, P.RUNNING, P.RESTARTING, P.RUNNING)
    types = [c.type for c in status.conditions]
    assert len(types) == len(set(types))
    conditions = {c.type: c for c in status.conditions}
    assert (conditions["Running"].status, conditions["Running"].reason) == ("True", "R5")
    assert conditions["Running"].last_transition_time == T0 + timedelta(seconds=5)
    assert conditions["Restarting"].status == "False"
    assert types[-1] == "Running"  # the newest condition is last


def test_only_the_current_phase_condition_is_true() -> None:
    status = walk(P.QUEUED, P.ADMITTED, P.DOWNLOADING, P.RUNNING, P.HALTING, P.HALTED, P.QUEUED)
    assert [c.type for c in status.conditions if c.status == "True"] == ["Queued"]


def test_completion_time_is_the_time_of_finishing() -> None:
    status = walk(P.QUEUED, P.ADMITTED, P.DOWNLOADING, P.RUNNING, P.STORING, P.SUCCEEDED)
    assert status.completion_time == T0 + timedelta(seconds=5)
