"""Queue quotas: nominal quota, borrowing within a cohort and its limits, reclaim, and the reasons."""

from __future__ import annotations

import pytest
from queue_builders import cluster, gpu_node, keys, on, pending, quota, running, victims
from scheduling_builders import GI, T0, make_job

from phalanx.core.scheduling import (
    ClusterSnapshot,
    NodeSnapshot,
    PendingJob,
    QueueQuota,
    QuotaAmounts,
    SchedulerConfig,
    SchedulingSession,
    schedule,
)
from phalanx.core.scheduling.holdings import Usage
from phalanx.core.scheduling.quotas import BORROWING_LIMIT, COHORT_EXHAUSTED, LENT, NO_COHORT, QuotaLedger


def two_nodes() -> list[NodeSnapshot]:
    return [gpu_node("n0"), gpu_node("n1")]


def job(name: str, queue: str, gpus: int, *, replicas: int = 1, created: float = 0, priority: int = 0) -> PendingJob:
    builder = make_job(name).replicas(replicas, gpu=gpus).created(created).priority(priority)
    return pending(builder, queue=queue)


def config(*queues: QueueQuota, preemption: bool = False) -> SchedulerConfig:
    return SchedulerConfig(queues=queues, preemption=preemption)


# --- the ledger -----------------------------------------------------------------------------------------


def test_a_queue_may_use_its_nominal_quota_and_no_more_without_a_cohort() -> None:
    ledger = QuotaLedger([quota("a", gpus=4)])
    assert ledger.shortfall("a", Usage(gpu_milli=4000)) is None
    ledger.charge("a", Usage(gpu_milli=3000))
    shortfall = ledger.shortfall("a", Usage(gpu_milli=2000))
    assert shortfall is not None and shortfall.kind == NO_COHORT
    assert (shortfall.used, shortfall.nominal, shortfall.need) == (3000, 4000, 2000)
    ledger.refund("a", Usage(gpu_milli=3000))
    assert ledger.shortfall("a", Usage(gpu_milli=4000)) is None


def test_resources_a_quota_leaves_out_are_not_limited() -> None:
    ledger = QuotaLedger([quota("a", gpus=1), quota("zero", gpus=0)])
    assert ledger.shortfall("a", Usage(cpu_milli=10**9, memory=10**15)) is None
    assert ledger.shortfall("elsewhere", Usage(gpu_milli=10**9)) is None
    zero = ledger.shortfall("zero", Usage(gpu_milli=1))
    assert zero is not None and zero.kind == NO_COHORT
    assert ledger.shortfall("zero", Usage(cpu_milli=1000)) is None


@pytest.mark.parametrize(
    ("queues", "need", "kind"),
    [
        pytest.param([quota("a", gpus=4, cohort="c"), quota("b", gpus=12, cohort="c")], 16, None, id="borrow-all-idle"),
        pytest.param(
            [quota("a", gpus=4, cohort="c"), quota("b", gpus=12, cohort="c")],
            17,
            COHORT_EXHAUSTED,
            id="beyond-the-cohort",
        ),
        pytest.param(
            [quota("a", gpus=4, cohort="c", borrow=2), quota("b", gpus=12, cohort="c")],
            7,
            BORROWING_LIMIT,
            id="borrowing-limit",
        ),
        pytest.param(
            [quota("a", gpus=4, cohort="c", borrow=2), quota("b", gpus=12, cohort="c")],
            6,
            None,
            id="within-borrowing-limit",
        ),
        pytest.param(
            [quota("a", gpus=4, cohort="c"), quota("b", gpus=12, cohort="c", lend=3)],
            8,
            COHORT_EXHAUSTED,
            id="lending-limit",
        ),
        pytest.param(
            [quota("a", gpus=4, cohort="c"), quota("b", gpus=12, cohort="c", lend=3)],
            7,
            None,
            id="within-lending-limit",
        ),
    ],
)
def test_borrowing_from_the_cohort(queues: list[QueueQuota], need: int, kind: str | None) -> None:
    shortfall = QuotaLedger(queues).shortfall("a", Usage(gpu_milli=need * 1000))
    assert (shortfall.kind if shortfall is not None else None) == kind


def test_quota_lent_to_another_queue_is_reclaimable() -> None:
    ledger = QuotaLedger([quota("a", gpus=8, cohort="c"), quota("b", gpus=8, cohort="c")])
    ledger.charge("b", Usage(gpu_milli=14_000))
    assert ledger.borrowing("b") and not ledger.borrowing("a")
    shortfall = ledger.shortfall("a", Usage(gpu_milli=4000))
    assert shortfall is not None and shortfall.kind == LENT and shortfall.cohort_free == 2000
    assert ledger.within_nominal("a", Usage(gpu_milli=4000))
    assert ledger.shortfall("a", Usage(gpu_milli=2000)) is None


def test_a_queues_guaranteed_part_is_never_lent() -> None:
    # b keeps 8 of its 12 GPUs for itself (lends 4): a borrows at most 4, and b can always use its 8.
    ledger = QuotaLedger([quota("a", gpus=4, cohort="c"), quota("b", gpus=12, cohort="c", lend=4)])
    ledger.charge("a", Usage(gpu_milli=8000))
    assert ledger.shortfall("a", Usage(gpu_milli=1000)) is not None
    assert ledger.shortfall("b", Usage(gpu_milli=8000)) is None
    lent = ledger.shortfall("b", Usage(gpu_milli=9000))
    assert lent is not None and lent.kind == LENT


def test_invalid_quotas_are_refused() -> None:
    with pytest.raises(ValueError, match="weight"):
        QueueQuota(name="a", weight=0)
    with pytest.raises(ValueError, match="gpus"):
        QuotaAmounts(gpus=-1)
    with pytest.raises(ValueError, match="queues listed more than once: a"):
        SchedulerConfig(queues=(QueueQuota(name="a"), QueueQuota(name="a")))


# --- admission ------------------------------------------------------------------------------------------


def test_jobs_are_admitted_up_to_the_quota_and_the_rest_wait_with_a_reason() -> None:
    decisions = schedule(
        cluster(two_nodes()),
        [job("one", "a", 4), job("two", "a", 4, created=1), job("free", "other", 8, created=2)],
        T0,
        config(quota("a", gpus=6)),
    )
    assert keys(decisions) == ["one", "free"]
    assert decisions.waiting["default/two"] == (
        "needs 4 GPUs; queue a has 4/6 of its GPU quota in use and no cohort to borrow from"
    )


def test_running_jobs_count_against_their_queues_quota() -> None:
    snap = cluster(two_nodes(), [running("busy", on("n0", 0, 1, 2, 3), queue="a")])
    decisions = schedule(snap, [job("more", "a", 1)], T0, config(quota("a", gpus=4)))
    assert decisions.waiting["default/more"] == (
        "needs 1 GPU; queue a is at its GPU quota 4/4 and no cohort to borrow from"
    )


def test_a_queue_borrows_idle_quota_of_its_cohort() -> None:
    queues = (quota("a", gpus=4, cohort="research"), quota("b", gpus=12, cohort="research"))
    decisions = schedule(cluster(two_nodes()), [job("x", "a", 8), job("y", "a", 8, created=1)], T0, config(*queues))
    assert keys(decisions) == ["x", "y"]


@pytest.mark.parametrize(
    ("queues", "reason"),
    [
        pytest.param(
            (quota("a", gpus=4, cohort="research", borrow=2), quota("b", gpus=12, cohort="research")),
            "needs 8 GPUs; queue a is at its GPU quota 8/4 and may borrow at most 2 GPUs beyond it (borrowing limit)",
            id="borrowing-limit",
        ),
        pytest.param(
            (quota("a", gpus=4, cohort="research"), quota("b", gpus=12, cohort="research", lend=6)),
            "needs 8 GPUs; queue a is at its GPU quota 8/4; cohort research has 2 GPUs to lend",
            id="lending-limit",
        ),
    ],
)
def test_borrowing_stops_at_the_limits(queues: tuple[QueueQuota, ...], reason: str) -> None:
    # x borrows first (4 of its 8 GPUs are borrowed); y would borrow 8 more.
    first = (quota("a", gpus=4, cohort="research"), quota("b", gpus=12, cohort="research"))
    snap = cluster(two_nodes(), [running("x", on("n0", *range(8)), queue="a")])
    assert keys(schedule(snap, [job("y", "a", 8)], T0, config(*first))) == ["y"]
    decisions = schedule(snap, [job("y", "a", 8)], T0, config(*queues))
    assert decisions.waiting["default/y"] == reason


def test_quota_and_nodes_are_checked_together() -> None:
    # "big" fits the quota but not the nodes: it takes no quota, and "small" of the same queue still gets it.
    snap = cluster(
        two_nodes(), [running("other", on("n0", *range(8)), queue="b"), running("o2", on("n1", 0, 1, 2, 3), queue="b")]
    )
    decisions = schedule(snap, [job("big", "a", 8), job("small", "a", 4, created=1)], T0, config(quota("a", gpus=4)))
    assert keys(decisions) == ["small"]
    assert decisions.waiting["default/big"].startswith("needs 8 GPUs")


def test_min_available_replicas_beyond_the_quota_are_left_out() -> None:
    elastic = pending(make_job("elastic").replicas(4, gpu=2).min_available(2), queue="a")
    decisions = schedule(cluster(two_nodes()), [elastic], T0, config(quota("a", gpus=6)))
    (admission,) = decisions.admitted
    assert [a.replica for a in admission.assignments] == ["elastic-worker-0", "elastic-worker-1", "elastic-worker-2"]
    tight = schedule(cluster(two_nodes()), [elastic], T0, config(quota("a", gpus=3)))
    assert tight.waiting["default/elastic"] == (
        "needs 4 GPUs; queue a has 0/3 of its GPU quota in use and no cohort to borrow from"
    )


def test_cpu_and_memory_quotas_are_explained_in_their_units() -> None:
    cpu = schedule(
        cluster(two_nodes()),
        [pending(make_job("c").replicas(2, cpu=1500), queue="a")],
        T0,
        config(QueueQuota(name="a", nominal=QuotaAmounts(cpu_milli=2000))),
    )
    assert (
        cpu.waiting["default/c"] == "needs 3 CPUs; queue a has 0/2 of its CPU quota in use and no cohort to borrow from"
    )
    memory = schedule(
        cluster(two_nodes()),
        [pending(make_job("m").replicas(1, memory=48 * GI), queue="a")],
        T0,
        config(QueueQuota(name="a", nominal=QuotaAmounts(memory=32 * GI))),
    )
    assert memory.waiting["default/m"] == (
        "needs 48Gi; queue a has 0/32Gi of its memory quota in use and no cohort to borrow from"
    )


def test_a_session_refunds_the_quota_of_a_released_job() -> None:
    session = SchedulingSession(cluster(two_nodes()), config(quota("a", gpus=8)))
    assert keys(session.cycle([job("x", "a", 8)], T0)) == ["x"]
    assert keys(session.cycle([job("y", "a", 8)], T0)) == []
    session.release("default/x")
    assert keys(session.cycle([job("y", "a", 8)], T0)) == ["y"]


# --- reclaim and preemption within a queue --------------------------------------------------------------

RESEARCH = (quota("a", gpus=8, cohort="research"), quota("b", gpus=8, cohort="research"))


def borrowed_cluster() -> ClusterSnapshot:
    # Queue b holds all 16 GPUs: 8 of them borrowed from a. The b jobs have a high priority.
    return cluster(
        two_nodes(),
        [
            running("b-old", on("n0", *range(8)), queue="b", priority=50, started=1),
            running("b-new", on("n1", *range(8)), queue="b", priority=50, started=2),
        ],
    )


def test_without_preemption_lent_quota_waits_to_come_back() -> None:
    decisions = schedule(borrowed_cluster(), [job("mine", "a", 8)], T0, config(*RESEARCH))
    assert decisions.waiting["default/mine"] == (
        "needs 8 GPUs; queue a has 0/8 of its GPU quota in use, but other queues of cohort research borrowed the "
        "rest (0 GPUs idle)"
    )


def test_a_queue_reclaims_its_lent_quota_from_borrowers_of_any_priority() -> None:
    decisions = schedule(borrowed_cluster(), [job("mine", "a", 8)], T0, config(*RESEARCH, preemption=True))
    assert keys(decisions) == ["mine"]
    assert victims(decisions) == ["b-new"]
    assert decisions.preempted[0].reason == (
        "preempted to make room for default/mine: queue a reclaims quota that queue b borrowed in cohort research"
    )


def test_reclaim_stops_when_the_lender_no_longer_borrows() -> None:
    # a needs 16 GPUs, beyond its nominal 8: it may not reclaim (that would be borrowing by preemption).
    decisions = schedule(
        borrowed_cluster(),
        [job("greedy", "a", 8, replicas=2)],
        T0,
        config(*RESEARCH, preemption=True),
    )
    assert decisions.preempted == ()
    # Two jobs of a within its nominal 8: the first reclaims b-new; b no longer borrows, so the second
    # (4 more GPUs, beyond a's quota of 8) cannot take b-old.
    two = schedule(
        borrowed_cluster(),
        [job("first", "a", 8), job("second", "a", 4, created=1)],
        T0,
        config(*RESEARCH, preemption=True),
    )
    assert keys(two) == ["first"] and victims(two) == ["b-new"]


def test_a_queue_within_its_quota_is_never_reclaimed_from() -> None:
    snap = cluster(
        two_nodes(),
        [
            running("b-job", on("n0", *range(8)), queue="b"),
            running("a-job", on("n1", *range(8)), queue="a", priority=100),
        ],
    )
    decisions = schedule(snap, [job("more", "a", 8, priority=99)], T0, config(*RESEARCH, preemption=True))
    assert decisions.preempted == ()
    assert "default/more" in decisions.waiting


def test_priority_preempts_within_a_queue_but_not_across_quota() -> None:
    queues = (quota("a", gpus=8), quota("b", gpus=8))
    snap = cluster(
        two_nodes(),
        [
            running("a-low", on("n0", *range(8)), queue="a", priority=0),
            running("b-low", on("n1", *range(8)), queue="b", priority=0),
        ],
    )
    decisions = schedule(snap, [job("a-high", "a", 8, priority=10)], T0, config(*queues, preemption=True))
    assert victims(decisions) == ["a-low"]
    other = schedule(snap, [job("c-high", "c", 8, priority=10)], T0, config(*queues, preemption=True))
    assert other.preempted == ()


def test_the_wait_sentence_counts_only_what_other_queues_can_lend() -> None:
    # Queue a's own 4 idle GPUs are in the cohort's pool too; a 6-GPU job counts on them already, so what it must
    # borrow (2) is compared with what b can lend (0), not with the pool's 4 (once read "has 4 GPUs to lend").
    queues = (quota("a", gpus=4, cohort="research"), quota("b", gpus=0, cohort="research"))
    decisions = schedule(cluster(two_nodes()), [job("six", "a", 6)], T0, config(*queues))
    assert decisions.waiting["default/six"] == (
        "needs 6 GPUs; queue a has 0/4 of its GPU quota in use, so it must borrow 2 GPUs; cohort research has "
        "0 GPUs to lend"
    )
