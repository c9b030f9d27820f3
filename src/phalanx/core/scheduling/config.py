"""How a scheduler instance is tuned: queue order, quotas, fair share, backfill, preemption, the random seed.

What may pass a job that waits (best-effort FIFO, strict FIFO, backfill), time slicing by attained service,
whether waiting jobs are explained, and the workload profile are set here too. One ``SchedulerConfig`` serves a
whole run (a control plane, a Kubernetes scheduler, a simulation); the per-job choices (placement, topology,
priority) travel on each ``PendingJob``. The defaults are what Phalanx uses when nobody says otherwise, and they
reproduce the scheduler before queues existed: no queue is limited, no fair share, best-effort FIFO, no
preemption, no time slicing, every waiting job explained.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from phalanx.core.scheduling.policies import AUTO, PLACEMENTS
from phalanx.core.scheduling.types import QueueQuota, TaskShape
from phalanx.model.scheduler_config import SchedulerConfiguration

FIFO = "fifo"
SHORTEST_FIRST = "shortest-first"
LEAST_ATTAINED_SERVICE = "least-attained-service"
QUEUE_ORDERS = (FIFO, SHORTEST_FIRST, LEAST_ATTAINED_SERVICE)

# Tiresias-style discretised LAS: a job's attained GPU-seconds put it in the band below the first threshold it
# has not reached; lower bands go first and jobs within a band keep FIFO order. One GPU-hour and ten GPU-hours
# separate short experiments, medium runs and long training.
DEFAULT_LAS_THRESHOLDS = (3_600.0, 36_000.0)
# With ``las_preempt`` (time slicing), the band is an effective priority below the real one: a waiting job may
# preempt running jobs of its priority whose attained service has put them in a lower band (Tiresias'
# discretised 2D-LAS). ``las_starve_limit`` K > 0 promotes a waiting job back to the top band once it has
# waited K times as long as it ran since its last promotion (Tiresias' STARVELIMIT); 0 never promotes.

# What may pass a job that cannot start (Kueue's queueingStrategy, plus EASY backfill):
BEST_EFFORT_FIFO = "best-effort-fifo"  # anything that fits passes it
STRICT_FIFO = "strict-fifo"  # nothing passes a job waiting for nodes; a job over quota blocks its own queue
BACKFILL = "backfill"  # a job passes only if it does not delay the first waiting job's reserved start
QUEUEING_STRATEGIES = (BEST_EFFORT_FIFO, STRICT_FIFO, BACKFILL)


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Run-wide scheduling settings.

    Attributes:
        queue_order: order among jobs of equal priority: ``fifo``, ``shortest-first`` (by
            ``duration_estimate``; jobs without one go after those with one) or ``least-attained-service``.
        las_thresholds: GPU-second band limits for ``least-attained-service``, ascending.
        workload: typical task shapes with their popularity, for fragmentation-aware placement; empty means
            "learn it from the jobs the scheduler sees".
        seed: seed of the ``random`` placement baseline (decisions stay a pure function of the inputs).
        queues: quota of each queue (``quotas.py``); jobs of a queue not listed are not limited.
        fair_share: among jobs of equal priority, the queue with the lowest weighted dominant share goes first
            (``fairshare.py``); off: the queue order alone decides.
        queueing_strategy: ``best-effort-fifo``, ``strict-fifo`` or ``backfill`` (``backfill.py``).
        preemption: let a waiting job stop running ones: lower-priority jobs of its own queue or of queues
            without quota, and, to reclaim its nominal quota, jobs of its cohort's queues that borrow
            (``preemption.py``).
        las_preempt: time slicing by attained service (needs ``queue_order`` ``least-attained-service``): a
            waiting job may also preempt running jobs of its own priority whose attained GPU-seconds put them
            in a lower band than its own (never within a band, never a job admitted in this or the previous
            cycle), as Tiresias does. Works with or without ``preemption`` (which adds priority and reclaim).
        las_starve_limit: with ``las_preempt``, a waiting job that has run and waited, since its last promotion,
            at least this many times as long as it ran goes back to the top band (its service counts from zero
            again for the bands); 0 turns the guard off. It needs a ``SchedulingSession`` kept across cycles.
        placement: the placement policy of jobs that ask for ``auto`` (the default); jobs that name one keep it.
        explain: write the one-sentence reason of every job left waiting (``Decisions.waiting``). Off, each
            waiting job maps to an empty string and the cycle is about twice as fast; the decisions are the
            same. The runtimes keep it on; the simulator turns it off.
    """

    queue_order: str = FIFO
    las_thresholds: tuple[float, ...] = DEFAULT_LAS_THRESHOLDS
    workload: tuple[TaskShape, ...] = ()
    seed: int = 0
    queues: tuple[QueueQuota, ...] = ()
    fair_share: bool = False
    queueing_strategy: str = BEST_EFFORT_FIFO
    preemption: bool = False
    las_preempt: bool = False
    las_starve_limit: float = 0.0
    placement: str = AUTO
    explain: bool = True

    def __post_init__(self) -> None:
        if self.queue_order not in QUEUE_ORDERS:
            raise ValueError(f"queue_order {self.queue_order!r} is not one of {', '.join(QUEUE_ORDERS)}")
        if self.queueing_strategy not in QUEUEING_STRATEGIES:
            allowed = ", ".join(QUEUEING_STRATEGIES)
            raise ValueError(f"queueing_strategy {self.queueing_strategy!r} is not one of {allowed}")
        names = [queue.name for queue in self.queues]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"queues listed more than once: {', '.join(repeated)}")
        if list(self.las_thresholds) != sorted(self.las_thresholds) or any(t <= 0 for t in self.las_thresholds):
            raise ValueError(f"las_thresholds must be positive and ascending, got {self.las_thresholds}")
        if self.las_preempt and self.queue_order != LEAST_ATTAINED_SERVICE:
            raise ValueError(f"las_preempt needs queue_order {LEAST_ATTAINED_SERVICE!r}, not {self.queue_order!r}")
        if not self.las_starve_limit >= 0:
            raise ValueError(f"las_starve_limit must be 0 (off) or positive, got {self.las_starve_limit}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement {self.placement!r} is not one of {', '.join(sorted(PLACEMENTS))}")
        if self.las_starve_limit and not self.las_preempt:
            raise ValueError("las_starve_limit needs las_preempt: promotion undoes the demotion time slicing applies")


def from_configuration(configuration: SchedulerConfiguration) -> SchedulerConfig:
    """The base policy a SchedulerConfiguration file describes (queues and fair share come from the Queues).

    ``queueOrder: priority`` is ``fifo``: every order puts higher priorities first, and among equal priorities
    the order that remains is submission time.
    """
    slicing = configuration.time_slicing
    order = FIFO if configuration.queue_order == "priority" else configuration.queue_order
    return SchedulerConfig(
        queue_order=order,
        las_thresholds=tuple(slicing.thresholds) if slicing is not None else DEFAULT_LAS_THRESHOLDS,
        queueing_strategy=configuration.queueing_strategy,
        preemption=configuration.preemption,
        las_preempt=slicing is not None and slicing.enabled,
        las_starve_limit=slicing.starve_limit if slicing is not None else 0.0,
        placement=configuration.placement,
    )


#: What the runtimes do when given no SchedulerConfiguration: FIFO, best-effort, auto placement, preemption on.
DEFAULT_POLICY = from_configuration(SchedulerConfiguration())


def cycle_config(policy: SchedulerConfig, quotas: tuple[QueueQuota, ...], *, stopping: bool) -> SchedulerConfig:
    """This cycle's configuration: the base policy with the Queues' quotas (fair share when there are some).

    While victims are still stopping (``stopping``), nothing is preempted, by priority or by time slicing: the
    room they free is already bought, and preempting again meanwhile would stop more.
    """
    slicing = policy.las_preempt and not stopping
    return replace(
        policy,
        queues=quotas,
        fair_share=bool(quotas),
        preemption=policy.preemption and not stopping,
        las_preempt=slicing,
        las_starve_limit=policy.las_starve_limit if slicing else 0.0,
    )
