"""Simulated jobs: what arrives, when, for how long, asking for what; from ITP traces or generated.

A ``SimJob`` is a gang of ``SimReplica``s with a submission time and a run time. The engine turns it into the
scheduler's ``PendingJob`` (one for the whole gang, or one per replica in the pod-by-pod baseline).

Modelling choices (``docs/simulator.md`` has the why):

- **ITP gangs** are split into replicas of at most 8 GPUs (one server's worth): ``ceil(n / 8)`` replicas with
  sizes as equal as possible, larger first (64 → 8x8, 16 → 2x8, 12 → 6+6, 2 → 1x2), as data-parallel
  launchers start equal workers. A replica asks for 4 CPUs and 32 GiB per GPU (the trace has no CPU or
  memory; with the default synthetic nodes' 8 CPUs and 64 GiB per GPU, GPUs run out first). A job with
  ``num_gpu == 0`` is one CPU-only replica of 4 CPUs and 32 GiB.
- **Poisson workloads**: exponential inter-arrival times at ``rate_per_hour``; the gang size drawn from a mix
  (default close to the ITP traces: mostly 1 and 8 GPUs, a few large gangs), split like ITP gangs; log-normal
  run times (default median 1 h, sigma 1.5, clipped to 1 min..7 days).
- **FfDL-like workloads** (after FfDL's gang-scheduling experiment on K80, P100 and V100 servers): each job
  asks 1-4 GPUs of one model (weights 40/30/10/20 %) as that many one-GPU learners, so that a gang spans
  several pods; the model is drawn in proportion to the cluster's GPUs of each model, so every model sees the
  same load; log-normal run times (median 30 min, sigma 1, clipped to 1 min..1 day). ``light`` offers 50 % of the
  cluster's GPU capacity, ``heavy`` 120 % (a backlog builds up: the regime where pod-by-pod scheduling
  strands GPUs in partial gangs).

Generators take a seed and draw from ``numpy.random.default_rng(seed)`` only, so a seed fixes the workload.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from phalanx.sim.traces import ItpJob

GIB = 2**30
MILLI = 1000
MAX_GPUS_PER_REPLICA = 8
CPU_MILLI_PER_GPU = 4000
MEMORY_PER_GPU = 32 * GIB

# Gang-size mix of generated Poisson workloads: close to the ITP traces' (cluster03: 34 % one GPU, 59 % eight).
DEFAULT_GANG_MIX: Mapping[int, float] = {1: 0.45, 2: 0.10, 4: 0.10, 8: 0.30, 16: 0.04, 32: 0.01}

FFDL_MODELS = ("K80", "P100", "V100")
FFDL_GPU_MIX: Mapping[int, float] = {1: 0.4, 2: 0.3, 3: 0.1, 4: 0.2}
FFDL_LOADS: Mapping[str, float] = {"light": 0.5, "heavy": 1.2}


@dataclass(frozen=True, slots=True)
class SimReplica:
    """One replica's request.

    Attributes:
        gpus: whole GPUs.
        gpu_milli: a share of one GPU in thousandths, only when ``gpus`` is 0.
        cpu_milli: CPU in millicores (taken from the node's shared pool: trace replay does not pin cores).
        memory: bytes.
    """

    gpus: int = 0
    gpu_milli: int = 0
    cpu_milli: int = 0
    memory: int = 0


@dataclass(frozen=True, slots=True)
class SimJob:
    """One simulated job: a gang of replicas that runs ``duration`` seconds once all of them are placed.

    Attributes:
        key: unique ``namespace/name``.
        submit: submission time, seconds on the simulation's clock.
        duration: run time in seconds once started.
        replicas: the gang.
        priority: higher goes first.
        queue: queue name.
        gpu_model: the GPU model every replica requires, or None for any.
    """

    key: str
    submit: float
    duration: float
    replicas: tuple[SimReplica, ...]
    priority: int = 0
    queue: str = "default"
    gpu_model: str | None = None

    @property
    def gpu_milli(self) -> int:
        """Thousandths of a GPU the whole gang holds (1000 per whole GPU)."""
        return sum(replica.gpus * MILLI + replica.gpu_milli for replica in self.replicas)

    @property
    def gpus(self) -> float:
        """GPUs the whole gang holds (fractional with GPU shares)."""
        return self.gpu_milli / MILLI


@dataclass(frozen=True, slots=True)
class LogNormal:
    """A log-normal distribution of run times, clipped to ``[minimum, maximum]`` seconds.

    Attributes:
        median: the median in seconds (``exp(mu)``).
        sigma: the standard deviation of the logarithm.
        minimum: the shortest run time drawn.
        maximum: the longest run time drawn.
    """

    median: float
    sigma: float
    minimum: float = 60.0
    maximum: float = 7 * 86_400.0

    def __post_init__(self) -> None:
        if not (self.median > 0 and self.sigma >= 0 and 0 <= self.minimum <= self.maximum):
            raise ValueError(
                f"a run-time distribution needs median > 0, sigma >= 0 and 0 <= minimum <= maximum; got {self}"
            )

    @property
    def mean(self) -> float:
        """The mean of the unclipped distribution, ``median * exp(sigma²/2)`` (sizing aid for arrival rates)."""
        return self.median * math.exp(self.sigma**2 / 2)

    def draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """``count`` run times, rounded to whole seconds."""
        values = rng.lognormal(mean=math.log(self.median), sigma=self.sigma, size=count)
        return np.clip(np.round(values), self.minimum, self.maximum)


DEFAULT_DURATION = LogNormal(median=3_600.0, sigma=1.5)
FFDL_DURATION = LogNormal(median=1_800.0, sigma=1.0, maximum=86_400.0)


def split_gang(gpus: int, max_per_replica: int = MAX_GPUS_PER_REPLICA) -> tuple[int, ...]:
    """GPUs per replica for a gang of ``gpus``: ``ceil(gpus / max_per_replica)`` replicas, as equal as possible.

    Larger replicas come first: ``split_gang(12) == (6, 6)``, ``split_gang(9) == (5, 4)``, ``split_gang(0) == (0,)``.

    Raises:
        ValueError: ``gpus`` is negative or ``max_per_replica`` is below 1.
    """
    if gpus < 0 or max_per_replica < 1:
        raise ValueError(f"cannot split {gpus} GPUs into replicas of at most {max_per_replica}")
    count = max(1, -(-gpus // max_per_replica))
    base, extra = divmod(gpus, count)
    return tuple(base + (1 if i < extra else 0) for i in range(count))


def gang_of(
    gpus: int,
    *,
    max_per_replica: int = MAX_GPUS_PER_REPLICA,
    cpu_milli_per_gpu: int = CPU_MILLI_PER_GPU,
    memory_per_gpu: int = MEMORY_PER_GPU,
) -> tuple[SimReplica, ...]:
    """The replicas of a gang of ``gpus`` GPUs, with CPU and memory in proportion (a CPU-only job gets one GPU's)."""
    return tuple(
        SimReplica(
            gpus=size,
            cpu_milli=max(1, size) * cpu_milli_per_gpu,
            memory=max(1, size) * memory_per_gpu,
        )
        for size in split_gang(gpus, max_per_replica)
    )


def jobs_from_itp(
    records: Sequence[ItpJob],
    *,
    gpu_model: str | None = None,
    max_gpus_per_replica: int = MAX_GPUS_PER_REPLICA,
    cpu_milli_per_gpu: int = CPU_MILLI_PER_GPU,
    memory_per_gpu: int = MEMORY_PER_GPU,
) -> tuple[SimJob, ...]:
    """One ``SimJob`` per ITP row, keyed ``itp/<job_id>``, with submission times as in the trace.

    Args:
        records: the rows of an ITP job list.
        gpu_model: the GPU model every job requires (None: any).
        max_gpus_per_replica: the largest replica; gangs are split with ``split_gang``.
        cpu_milli_per_gpu: CPU per GPU of a replica, in millicores.
        memory_per_gpu: memory per GPU of a replica, in bytes.
    """
    return tuple(
        SimJob(
            key=f"itp/{record.job_id}",
            submit=record.submission_time,
            duration=record.duration,
            replicas=gang_of(
                record.num_gpu,
                max_per_replica=max_gpus_per_replica,
                cpu_milli_per_gpu=cpu_milli_per_gpu,
                memory_per_gpu=memory_per_gpu,
            ),
            gpu_model=gpu_model,
        )
        for record in records
    )


def _choices(rng: np.random.Generator, mix: Mapping[int, float] | Mapping[str, float], count: int) -> list[int]:
    """Indices into ``mix`` drawn with its weights (validated: non-negative, positive sum)."""
    weights = np.array(list(mix.values()), dtype=float)
    if not len(weights) or (weights < 0).any() or weights.sum() <= 0:
        raise ValueError(f"a mix needs non-negative weights with a positive sum, got {dict(mix)}")
    return [int(i) for i in rng.choice(len(weights), size=count, p=weights / weights.sum())]


def mean_gang_size(mix: Mapping[int, float]) -> float:
    """The weighted mean of a gang-size mix."""
    total = sum(mix.values())
    return sum(size * weight for size, weight in mix.items()) / total


def rate_for_load(load: float, *, capacity_gpus: int, mean_gpus: float, mean_duration: float) -> float:
    """Arrivals per hour that offer ``load`` x the capacity: ``load * capacity / (mean GPUs * mean run time)``.

    Raises:
        ValueError: a value is not positive.
    """
    if load <= 0 or capacity_gpus <= 0 or mean_gpus <= 0 or mean_duration <= 0:
        raise ValueError(
            f"load, capacity, mean gang size and mean run time must be positive; got load {load}, "
            f"{capacity_gpus} GPUs, {mean_gpus} GPUs per job, {mean_duration} s"
        )
    return load * capacity_gpus * 3_600.0 / (mean_gpus * mean_duration)


def _arrivals(rng: np.random.Generator, count: int, rate_per_hour: float) -> np.ndarray:
    if rate_per_hour <= 0 or not math.isfinite(rate_per_hour):
        raise ValueError(f"the arrival rate must be a positive number of jobs per hour, got {rate_per_hour}")
    gaps = rng.exponential(3_600.0 / rate_per_hour, size=count)
    return np.round(np.cumsum(gaps), 3)


def poisson_workload(
    count: int,
    *,
    rate_per_hour: float,
    gang_mix: Mapping[int, float] = DEFAULT_GANG_MIX,
    duration: LogNormal = DEFAULT_DURATION,
    gpu_model: str | None = None,
    seed: int = 0,
    max_gpus_per_replica: int = MAX_GPUS_PER_REPLICA,
) -> tuple[SimJob, ...]:
    """``count`` jobs arriving as a Poisson process, keyed ``poisson/job-00000`` onwards.

    Args:
        count: how many jobs, at least 1.
        rate_per_hour: mean arrivals per hour.
        gang_mix: gang size (GPUs) -> weight.
        duration: the run-time distribution.
        gpu_model: the GPU model every job requires (None: any).
        seed: the random seed; equal seeds give equal workloads.
        max_gpus_per_replica: the largest replica; gangs are split with ``split_gang``.

    Raises:
        ValueError: a count, rate or mix that makes no sense.
    """
    if count < 1:
        raise ValueError(f"generate at least one job, got {count}")
    if any(size < 0 for size in gang_mix):
        raise ValueError(f"gang sizes cannot be negative, got {sorted(gang_mix)}")
    rng = np.random.default_rng(seed)
    submits = _arrivals(rng, count, rate_per_hour)
    sizes = list(gang_mix)
    picks = _choices(rng, gang_mix, count)
    durations = duration.draw(rng, count)
    width = max(5, len(str(count - 1)))
    return tuple(
        SimJob(
            key=f"poisson/job-{i:0{width}d}",
            submit=float(submits[i]),
            duration=float(durations[i]),
            replicas=gang_of(sizes[picks[i]], max_per_replica=max_gpus_per_replica),
            gpu_model=gpu_model,
        )
        for i in range(count)
    )


def ffdl_workload(
    count: int,
    *,
    intensity: str,
    gpus_by_model: Mapping[str, int],
    seed: int = 0,
    gpu_mix: Mapping[int, float] = FFDL_GPU_MIX,
    duration: LogNormal = FFDL_DURATION,
    rate_per_hour: float | None = None,
) -> tuple[SimJob, ...]:
    """``count`` FfDL-like jobs: 1-4 one-GPU learners of one GPU model, at a light or heavy load.

    Args:
        count: how many jobs, at least 1.
        intensity: ``light`` (50 % of the GPU capacity offered) or ``heavy`` (120 %).
        gpus_by_model: the cluster's GPUs per model; jobs ask for these models in proportion.
        seed: the random seed; equal seeds give equal workloads.
        gpu_mix: GPUs per job -> weight.
        duration: the run-time distribution.
        rate_per_hour: arrivals per hour instead of the intensity's rate (e.g. a burst of submissions, as in
            FfDL's scale test of hundreds of concurrent jobs).

    Raises:
        ValueError: an unknown intensity, a cluster without GPUs, or a count below 1.
    """
    if intensity not in FFDL_LOADS:
        raise ValueError(f"FfDL intensity {intensity!r} is not one of {', '.join(FFDL_LOADS)}")
    if count < 1:
        raise ValueError(f"generate at least one job, got {count}")
    models = {model: gpus for model, gpus in gpus_by_model.items() if gpus > 0}
    if not models:
        raise ValueError("an FfDL workload needs a cluster with GPUs")
    rng = np.random.default_rng(seed)
    rate = rate_per_hour or rate_for_load(
        FFDL_LOADS[intensity],
        capacity_gpus=sum(models.values()),
        mean_gpus=mean_gang_size(gpu_mix),
        mean_duration=duration.mean,
    )
    submits = _arrivals(rng, count, rate)
    names = list(models)
    model_picks = _choices(rng, {i: float(gpus) for i, gpus in enumerate(models.values())}, count)
    sizes = list(gpu_mix)
    size_picks = _choices(rng, gpu_mix, count)
    durations = duration.draw(rng, count)
    width = max(5, len(str(count - 1)))
    return tuple(
        SimJob(
            key=f"ffdl/{names[model_picks[i]].lower()}-{i:0{width}d}",
            submit=float(submits[i]),
            duration=float(durations[i]),
            replicas=gang_of(sizes[size_picks[i]], max_per_replica=1),
            gpu_model=names[model_picks[i]],
        )
        for i in range(count)
    )
