"""Jobs placed by the cluster's own scheduler: who places a job, what Phalanx still decides, what it cannot honour.

On Kubernetes a job may leave the placement of its Pods to the cluster's scheduler (``spec.scheduling.
schedulerName``, or the operator's cluster-wide default), e.g. kube-scheduler with its alpha gang scheduling.
Decisions, all pure:

- **Who places it** (``placing_scheduler``): the job's ``schedulerName``, else the cluster-wide default, else
  Phalanx's own scheduler; naming Phalanx's scheduler is the same as naming none. The operator and
  phalanx-scheduler ask the same question with the same settings, so exactly one of them admits the job.
- **Admission** (``core.reconcile``): such a job goes through the one lifecycle like every other (Pending ->
  Queued -> Admitted -> Downloading -> Running ...), but Phalanx's scheduling cycle does not admit it: the
  planner admits it as soon as it is queued, with one placement per replica whose node is ``CLUSTER_PLACED``
  (empty: the cluster's scheduler picks it when it binds the Pod). Queues, quotas, priorities, preemption and
  Phalanx's placement policies therefore do not apply to it, and ``conflicts`` refuses the fields that would
  ask for them, each with its path, rather than dropping them. phalanx-scheduler leaves the job alone and
  counts its bound Pods like any other Pod on a node.
- **The gang** (``gang_min_count``): all of the job's replicas, or ``minAvailable`` of them, must be placed
  together; on Kubernetes that is the PodGroup's ``minCount``, which kube-scheduler's gang scheduling enforces:
  it binds no Pod of the group until that many can be placed at once.
"""

from __future__ import annotations

from phalanx.core.rendezvous import replica_names
from phalanx.model.errors import FieldError
from phalanx.model.jobs import Placement, ReplicaPlacement, TrainingJob
from phalanx.model.jobtypes import JobType

#: The node of a placement the cluster's scheduler makes: not known to Phalanx when it admits the job.
CLUSTER_PLACED = ""
_FIELD = "spec.scheduling.schedulerName"


def placing_scheduler(job: TrainingJob, *, own: str, default: str | None = None) -> str | None:
    """The cluster's scheduler that places the job's Pods, or None when Phalanx's own scheduler does.

    Args:
        job: the job.
        own: the name of Phalanx's scheduler (phalanx-scheduler's ``--scheduler-name``).
        default: the cluster-wide scheduler for jobs that name none (None: Phalanx's own).

    """
    name = job.spec.scheduling.scheduler_name or default
    return None if not name or name == own else name


def gang_min_count(job: TrainingJob) -> int:
    """How many of the job's Pods must be placed together: ``minAvailable``, else all of them."""
    total = job.spec.total_replicas()
    wanted = job.spec.scheduling.min_available
    return min(wanted, total) if wanted else total


def cluster_placements(job: TrainingJob, jobtype: JobType | None) -> dict[str, ReplicaPlacement]:
    """One placement per replica, on no node yet: the cluster's scheduler picks the node when it binds the Pod."""
    return {name: ReplicaPlacement(node=CLUSTER_PLACED) for _, _, name in replica_names(job, jobtype)}


def conflicts(job: TrainingJob, scheduler: str) -> list[FieldError]:
    """The fields only Phalanx's scheduler honours, set on a job that ``scheduler`` places; empty when none.

    Each names its path and what to do instead: the job is refused rather than run without them.
    """
    where = f"the job's Pods are placed by {scheduler!r} ({_FIELD}), not by phalanx-scheduler"
    found: list[FieldError] = []
    scheduling = job.spec.scheduling
    if scheduling.queue != "default":
        found.append(
            FieldError(
                "spec.scheduling.queue",
                f"{where}: Phalanx's queues and quotas do not admit it; "
                "remove the queue, or leave schedulerName unset to queue it",
            )
        )
    if scheduling.priority_class is not None or scheduling.priority:
        path = "spec.scheduling.priorityClass" if scheduling.priority_class is not None else "spec.scheduling.priority"
        found.append(
            FieldError(
                path,
                f"{where}: Phalanx's priorities do not order it; remove it (a Kubernetes "
                "PriorityClass goes in the Pod template)",
            )
        )
    if scheduling.placement != Placement.AUTO:
        found.append(FieldError("spec.scheduling.placement", f"{where}: it scores nodes its own way; remove it"))
    if scheduling.topology == "required":
        found.append(FieldError("spec.scheduling.topology", f"{where}: it knows no GPU topology; remove it"))
    if scheduling.gpu_model is not None:
        found.append(
            FieldError(
                "spec.scheduling.gpuModel",
                f"{where}: select the GPU model with a node label instead, or leave schedulerName unset",
            )
        )
    for role, replica in job.spec.replicas.items():
        resources = replica.template.resources
        prefix = f"spec.replicas.{role}.template.resources"
        if resources.gpu_milli:
            found.append(
                FieldError(f"{prefix}.gpuMilli", f"{where}: a share of a GPU is Phalanx's; ask for whole GPUs (gpu: 1)")
            )
        if resources.gpu_model is not None and scheduling.gpu_model is None:  # (the job's is copied here)
            found.append(
                FieldError(
                    f"{prefix}.gpuModel",
                    f"{where}: select the GPU model with a node label instead, or leave schedulerName unset",
                )
            )
    if job.spec.datasets:
        found.append(
            FieldError(
                "spec.datasets",
                f"{where}: datasets are staged on the nodes Phalanx places the job "
                "on; leave schedulerName unset to use them",
            )
        )
    return found
