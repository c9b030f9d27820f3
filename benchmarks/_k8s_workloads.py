"""The Kubernetes benchmarks' workloads (pure): gang jobs, and their Pods, PodGroups and TrainingJobs.

A job is ``pods`` replicas named ``<job>-worker-<i>``, each asking ``gpus_per_pod`` GPUs, 1 CPU and 1 GiB; as raw
Pods for kube-scheduler (labels as Phalanx renders them, ``phalanx.dev/job`` the group label), with a PodGroup
for kube-scheduler's alpha gang scheduling, or as TrainingJobs (type ``generic``) for Phalanx. Every Pod is
annotated ``phalanx.dev/sim-hang: "true"``, so it runs until deleted.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.adapters.kubernetes.api import TRAININGJOBS, Resource
from phalanx.adapters.kubernetes.rendering import (
    CONTAINER_NAME,
    GPU_RESOURCE,
    LABEL_ATTEMPT,
    LABEL_INDEX,
    LABEL_JOB,
    LABEL_ROLE,
)
from phalanx.model.jobs import ReplicaTemplate

SIM_IMAGE = "phalanx.invalid/sim:latest"  # never pulled: kwok runs no containers
ROLE = "worker"
POD_CPU = "1"
POD_MEMORY = str(1024**3)  # bytes, as Phalanx renders memory
SIM_COMMAND = ["sleep", "infinity"]  # never run: kwok simulates the containers
SIM_ANNOTATIONS = {"phalanx.dev/sim-hang": "true"}  # tests/e2e/stages/pods.yaml: the pod never finishes
PODGROUPS = Resource("PodGroup", "podgroups", group="scheduling.k8s.io", version="v1alpha2")
#: kube-scheduler's alpha gang scheduling in Kubernetes 1.35+ (1.36: Pod.spec.schedulingGroup, PodGroup v1alpha2).
GANG_FEATURE_GATES = {"GenericWorkload": True, "GangScheduling": True}
GANG_RUNTIME_CONFIG = {"scheduling.k8s.io/v1alpha2": "true"}


@dataclass(frozen=True)
class GangJob:
    """One job of the benchmark: ``pods`` replicas of ``gpus_per_pod`` GPUs each, all needed to make progress."""

    name: str
    pods: int
    gpus_per_pod: int

    @property
    def gpus(self) -> int:
        """GPUs of the whole gang."""
        return self.pods * self.gpus_per_pod

    def pod_name(self, index: int) -> str:
        """The name Phalanx gives replica ``index`` (``<job>-<role>-<index>``); the raw Pods use it too."""
        return f"{self.name}-{ROLE}-{index}"

    def pod_names(self) -> list[str]:
        """Every replica's Pod name, in index order."""
        return [self.pod_name(i) for i in range(self.pods)]


def gang_mix(
    count: int, seed: int, *, min_gpus: int = 4, max_gpus: int = 16, max_gpus_per_pod: int = 8, prefix: str = "gang"
) -> list[GangJob]:
    """A deterministic mix of ``count`` multi-pod jobs of ``min_gpus``..``max_gpus`` GPUs each.

    A job's total is a multiple of 4 in the range (any value in it if there is no such multiple); its shape is a
    power-of-two GPUs per pod, at most ``max_gpus_per_pod``, with at least two pods (a one-pod job cannot be a
    partial gang), e.g. 16 GPUs as 2x8, 4x4, 8x2 or 16x1. Same seed, same mix.
    """
    if count < 0 or min_gpus < 2 or max_gpus < min_gpus or max_gpus_per_pod < 1:
        raise ValueError("need count >= 0, 2 <= min_gpus <= max_gpus and max_gpus_per_pod >= 1")
    rng = random.Random(seed)
    totals = [t for t in range(min_gpus, max_gpus + 1) if t % 4 == 0] or list(range(min_gpus, max_gpus + 1))
    width = len(str(max(count - 1, 0)))
    jobs = []
    for i in range(count):
        total = rng.choice(totals)
        shapes = [g for g in (1, 2, 4, 8, 16, 32) if g <= max_gpus_per_pod and total % g == 0 and total // g >= 2]
        per_pod = rng.choice(shapes) if shapes else 1
        jobs.append(GangJob(f"{prefix}-{i:0{width}d}", total // per_pod, per_pod))
    return jobs


def uniform_jobs(count: int, pods: int, gpus_per_pod: int, prefix: str) -> list[GangJob]:
    """``count`` identical jobs (one-pod jobs, or gangs of ``pods``)."""
    width = len(str(max(count - 1, 0)))
    return [GangJob(f"{prefix}-{i:0{width}d}", pods, gpus_per_pod) for i in range(count)]


def interleaved(jobs: Sequence[GangJob]) -> list[tuple[GangJob, int]]:
    """Every (job, replica index) with the jobs' replicas interleaved: replica 0 of each job, then replica 1...

    How Pods of jobs "submitted at once" reach the API when every job has its own controller creating its Pods.
    """
    order: list[tuple[GangJob, int]] = []
    for index in range(max((job.pods for job in jobs), default=0)):
        order.extend((job, index) for job in jobs if index < job.pods)
    return order


def _resources(gpus: int) -> dict[str, Any]:
    quantities = {"cpu": POD_CPU, "memory": POD_MEMORY, GPU_RESOURCE: str(gpus)}
    return {"requests": dict(quantities), "limits": dict(quantities)}


def pod_manifest(job: GangJob, index: int, namespace: str, *, pod_group: bool = False) -> dict[str, Any]:
    """A raw Pod for kube-scheduler: the replica as Phalanx would render it, minus what only Phalanx reads.

    With ``pod_group`` it joins the job's PodGroup (``spec.schedulingGroup``) for the alpha gang scheduling.
    """
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "enableServiceLinks": False,
        "containers": [
            {
                "name": CONTAINER_NAME,
                "image": SIM_IMAGE,
                "command": list(SIM_COMMAND),
                "resources": _resources(job.gpus_per_pod),
            }
        ],
    }
    if pod_group:
        spec["schedulingGroup"] = {"podGroupName": job.name}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": job.pod_name(index),
            "namespace": namespace,
            "labels": {LABEL_JOB: job.name, LABEL_ROLE: ROLE, LABEL_INDEX: str(index), LABEL_ATTEMPT: "0"},
            "annotations": dict(SIM_ANNOTATIONS),
        },
        "spec": spec,
    }


def pod_group_manifest(job: GangJob, namespace: str) -> dict[str, Any]:
    """The job's PodGroup for kube-scheduler's alpha gang scheduling: all of its Pods or none."""
    return {
        "apiVersion": PODGROUPS.api_version,
        "kind": "PodGroup",
        "metadata": {"name": job.name, "namespace": namespace, "labels": {LABEL_JOB: job.name}},
        "spec": {"schedulingPolicy": {"gang": {"minCount": job.pods}}},
    }


def training_job_manifest(job: GangJob, namespace: str) -> dict[str, Any]:
    """The same job as a Phalanx TrainingJob (type ``generic``, one role); its Pods are annotated to hang."""
    template: dict[str, Any] = {
        "image": SIM_IMAGE,
        "command": list(SIM_COMMAND),
        "resources": {"cpu": POD_CPU, "memory": POD_MEMORY, "gpu": job.gpus_per_pod},
    }
    if "metadata" in ReplicaTemplate.model_fields:  # Pod annotations from the template, where the model has them
        template["metadata"] = {"annotations": dict(SIM_ANNOTATIONS)}
    return {
        "apiVersion": TRAININGJOBS.api_version,
        "kind": "TrainingJob",
        "metadata": {"name": job.name, "namespace": namespace},
        "spec": {
            "type": "generic",
            "replicas": {
                ROLE: {"count": job.pods, "template": template},
            },
        },
    }
