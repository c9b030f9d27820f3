"""How a scheduler instance is tuned: queue order, the workload profile, the seed of the random baseline.

One ``SchedulerConfig`` serves a whole run (a control plane, a Kubernetes scheduler, a simulation); the
per-job choices (placement, topology, priority) travel on each ``PendingJob``. The defaults are what Phalanx
uses when nobody says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from phalanx.core.scheduling.types import TaskShape

FIFO = "fifo"
SHORTEST_FIRST = "shortest-first"
LEAST_ATTAINED_SERVICE = "least-attained-service"
QUEUE_ORDERS = (FIFO, SHORTEST_FIRST, LEAST_ATTAINED_SERVICE)

# Tiresias-style discretised LAS: a job's attained GPU-seconds put it in the band below the first threshold it
# has not reached; lower bands go first and jobs within a band keep FIFO order. One GPU-hour and ten GPU-hours
# separate short experiments, medium runs and long training.
DEFAULT_LAS_THRESHOLDS = (3_600.0, 36_000.0)


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
    """

    queue_order: str = FIFO
    las_thresholds: tuple[float, ...] = DEFAULT_LAS_THRESHOLDS
    workload: tuple[TaskShape, ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        if self.queue_order not in QUEUE_ORDERS:
            raise ValueError(f"queue_order {self.queue_order!r} is not one of {', '.join(QUEUE_ORDERS)}")
        if list(self.las_thresholds) != sorted(self.las_thresholds) or any(t <= 0 for t in self.las_thresholds):
            raise ValueError(f"las_thresholds must be positive and ascending, got {self.las_thresholds}")
