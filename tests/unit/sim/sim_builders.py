"""Small builders for the simulator's unit tests: jobs and clusters in one line, and the trace directory."""

from __future__ import annotations

from pathlib import Path

from phalanx.core.scheduling import ClusterSnapshot
from phalanx.sim.clusters import synthetic_cluster
from phalanx.sim.engine import JobOutcome, SimResult
from phalanx.sim.workloads import SimJob, SimReplica

ROOT = Path(__file__).resolve().parents[3]
TRACES = ROOT.parent / "shared" / "data" / "traces"


def job(key: str, submit: float, duration: float, *gpus: int, model: str | None = None) -> SimJob:
    """A job ``default/<key>`` whose replicas ask for ``gpus`` GPUs each (one replica of 1 GPU by default)."""
    replicas = tuple(SimReplica(gpus=count, cpu_milli=1000, memory=2**30) for count in (gpus or (1,)))
    return SimJob(key=f"default/{key}", submit=submit, duration=duration, replicas=replicas, gpu_model=model)


def cluster(nodes: int, gpus: int) -> ClusterSnapshot:
    """``nodes`` synthetic V100 nodes of ``gpus`` GPUs each."""
    return synthetic_cluster(nodes, gpus)


def outcome(result: SimResult, key: str) -> JobOutcome:
    """The outcome of job ``default/<key>``."""
    (found,) = [o for o in result.jobs if o.job.key == f"default/{key}"]
    return found
