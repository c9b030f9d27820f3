"""Translating between Kubernetes objects (API dicts) and Phalanx's models, in both directions.

- **Jobs and JobTypes.** Kubernetes metadata has keys the models do not know (``managedFields``,
  ``ownerReferences``, ``finalizers``…) and the models refuse unknown keys, so metadata is reduced to the
  fields ``ObjectMeta`` has before a document is validated; the spec is validated exactly as the embedded
  runtime validates it (``model.validation``), so a bad spec fails with the same field-path error in both.
- **Pods as replicas.** A Pod of a job is the planner's ``ObservedReplica``: its role, index and attempt come
  from labels the renderer set, its phase and exit code from the Pod's status.
- **Objects users submit.** ``object_body`` is a validated object as it is POSTed (no status, only the metadata a
  user may set); ``queue_from_object`` and the others read them back with the status the controllers wrote
  (``sweep_from_object``, ``pipeline_from_object`` and ``pipeline_run_from_object`` for issue 17's kinds, whose
  documents are shape-checked as the embedded store reads them; a status that no longer reads is a new one's).
- **Pods and Events for users.** ``replica_from_pod`` shows a job's Pod as the embedded runtime's ``Replica``, and
  ``event_from_object`` a core/v1 Event as the model's ``Event``, so ``describe`` shows both backends alike.
- **Nodes.** A Kubernetes Node becomes a ``model.nodes.Node`` for ``core.scheduling``: allocatable CPUs,
  memory and ``nvidia.com/gpu``; the GPU model from ``nvidia.com/gpu.product``; NUMA and NVLink from the
  ``phalanx.dev/gpu-topology`` annotation (written by the node agent, or by hand for fake nodes); GPUs the
  node agent found unhealthy from ``phalanx.dev/unhealthy-gpus``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from phalanx.adapters.kubernetes import dra
from phalanx.adapters.kubernetes.kubelet_config import CPU_POLICY_ANNOTATION, parse_cpu_policy_annotation
from phalanx.adapters.kubernetes.rendering import CONTAINER_NAME
from phalanx.core.cpu_policy import kubelet_alignment
from phalanx.core.reconcile.types import ObservedReplica
from phalanx.model.base import ApiModel
from phalanx.model.datasets import Dataset, DatasetStatus
from phalanx.model.events import Event
from phalanx.model.jobs import ReplicaPlacement, TrainingJob, TrainingJobStatus
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import parse_dataset, parse_jobtype, parse_queue
from phalanx.model.meta import ObjectMeta
from phalanx.model.nodes import CpuInfo, CpuPolicy, GpuInfo, Node, NodeSpec, NodeStatus, NodeTaint
from phalanx.model.pipelines import Pipeline, PipelineRun, PipelineRunStatus, parse_pipeline, parse_pipeline_run
from phalanx.model.queues import Queue, QueueStatus
from phalanx.model.replicas import Replica, ReplicaObjectSpec, ReplicaObjectStatus, ReplicaPhase, last_output_of
from phalanx.model.resources import QuantityError, parse_cpu, parse_memory
from phalanx.model.sweeps import Sweep, SweepStatus, parse_sweep
from phalanx.model.validation import validate_job

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_TOPOLOGY_ANNOTATION = "phalanx.dev/gpu-topology"
UNHEALTHY_GPUS_ANNOTATION = "phalanx.dev/unhealthy-gpus"
GPU_PROBLEMS_ANNOTATION = "phalanx.dev/gpu-problems"  # why, per unhealthy GPU: {"1": "XID 79 ..."}
LABEL_JOB = "phalanx.dev/job"
LABEL_ROLE = "phalanx.dev/role"
LABEL_INDEX = "phalanx.dev/replica-index"
LABEL_ATTEMPT = "phalanx.dev/attempt"
_META_KEYS = {
    "name": "name",
    "namespace": "namespace",
    "labels": "labels",
    "annotations": "annotations",
    "uid": "uid",
    "resourceVersion": "resourceVersion",
    "generation": "generation",
    "creationTimestamp": "creationTimestamp",
    "deletionTimestamp": "deletionTimestamp",
}
_POD_PHASES = {
    "Pending": ReplicaPhase.PENDING,
    "Running": ReplicaPhase.RUNNING,
    "Succeeded": ReplicaPhase.SUCCEEDED,
    "Failed": ReplicaPhase.FAILED,
}


def model_metadata(obj: Mapping[str, Any], *, cluster_scoped: bool = False) -> dict[str, Any]:
    """The object's metadata reduced to what ``ObjectMeta`` holds."""
    meta = obj.get("metadata") or {}
    reduced = {ours: meta[theirs] for theirs, ours in _META_KEYS.items() if meta.get(theirs) is not None}
    if cluster_scoped:
        reduced.pop("namespace", None)
    return reduced


def job_document(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The TrainingJob as a document ``model.validation`` accepts (status left out: it is ours, not the user's)."""
    return {
        "apiVersion": obj.get("apiVersion", "phalanx.dev/v1alpha1"),
        "kind": obj.get("kind", "TrainingJob"),
        "metadata": model_metadata(obj),
        "spec": obj.get("spec") or {},
    }


def job_status(obj: Mapping[str, Any]) -> TrainingJobStatus:
    """The job's stored status; an empty or unreadable one is a new job's (Pending)."""
    raw = obj.get("status")
    if not raw:
        return TrainingJobStatus()
    try:
        return TrainingJobStatus.model_validate(raw)
    except ValueError:
        return TrainingJobStatus()


def job_from_object(obj: Mapping[str, Any], jobtypes: Mapping[str, JobType]) -> TrainingJob:
    """The validated, defaulted job with its stored status.

    Raises:
        SpecError: the spec is invalid (field paths as the embedded runtime reports them).
    """
    job = validate_job(job_document(obj), jobtypes, source=f"trainingjob/{(obj.get('metadata') or {}).get('name')}")
    return job.model_copy(update={"status": job_status(obj)})


def status_body(obj: Mapping[str, Any], status: ApiModel) -> dict[str, Any]:
    """The body of a PUT to ``trainingjobs/<name>/status`` (or a Dataset's): its identity as read, the new status.

    The object's resourceVersion rides along, so a write against a job that changed since it was read (or was
    deleted and created again under its name) fails with 409 instead of overwriting the newer version.
    Nothing else of the object is sent: an update of a custom resource's status subresource takes only the status
    from the body and keeps the stored spec and metadata (managed fields included), so sending them would only
    make the API server decode them on every status write.
    """
    meta = obj.get("metadata") or {}
    identity = {key: meta[key] for key in ("name", "namespace", "resourceVersion") if meta.get(key)}
    return {
        "apiVersion": obj.get("apiVersion", "phalanx.dev/v1alpha1"),
        "kind": obj.get("kind", "TrainingJob"),
        "metadata": identity,
        "status": status.to_dict(),
    }


def dataset_from_object(obj: Mapping[str, Any]) -> Dataset:
    """A Dataset read from the API server, with its status.

    Raises:
        SpecError: the Dataset is invalid.
    """
    metadata = model_metadata(obj)
    document = {
        "apiVersion": obj.get("apiVersion"),
        "kind": "Dataset",
        "metadata": metadata,
        "spec": obj.get("spec") or {},
    }
    dataset = parse_dataset(document, source=f"dataset/{metadata.get('name')}")
    try:
        status = DatasetStatus.model_validate(obj.get("status") or {})
    except ValueError:
        status = DatasetStatus()
    return dataset.model_copy(update={"status": status})


def _document(obj: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """A stored object as the document its parser reads: its metadata reduced, no status."""
    return {
        "apiVersion": obj.get("apiVersion", "phalanx.dev/v1alpha1"),
        "kind": kind,
        "metadata": model_metadata(obj),
        "spec": obj.get("spec") or {},
    }


def _source(obj: Mapping[str, Any], kind: str) -> str:
    return f"{kind.lower()}/{(obj.get('metadata') or {}).get('name')}"


def sweep_from_object(obj: Mapping[str, Any]) -> Sweep:
    """A Sweep read from the API server, with the status the sweep controller wrote (unreadable: a new one's).

    Raises:
        SpecError: its spec is not a valid Sweep (written with kubectl past the schema).
    """
    sweep = parse_sweep(_document(obj, "Sweep"), source=_source(obj, "Sweep"))
    with contextlib.suppress(ValueError):
        sweep = sweep.model_copy(update={"status": SweepStatus.model_validate(obj.get("status") or {})})
    return sweep


def pipeline_from_object(obj: Mapping[str, Any]) -> Pipeline:
    """A Pipeline read from the API server (it has no status).

    Raises:
        SpecError: its spec is not a valid Pipeline.
    """
    return parse_pipeline(_document(obj, "Pipeline"), source=_source(obj, "Pipeline"))


def pipeline_run_from_object(obj: Mapping[str, Any]) -> PipelineRun:
    """A PipelineRun read from the API server, with the status the pipeline controller wrote.

    Raises:
        SpecError: its spec is not a valid PipelineRun.
    """
    run = parse_pipeline_run(_document(obj, "PipelineRun"), source=_source(obj, "PipelineRun"))
    with contextlib.suppress(ValueError):
        run = run.model_copy(update={"status": PipelineRunStatus.model_validate(obj.get("status") or {})})
    return run


def object_body(
    obj: TrainingJob | JobType | Queue | Dataset | Sweep | Pipeline | PipelineRun, *, namespaced: bool
) -> dict[str, Any]:
    """The object to POST: no status (the controllers'), only the metadata a user may set.

    That is its name, namespace (``namespaced`` kinds only), labels and annotations; for a job, the validated,
    defaulted spec.
    """
    data = obj.to_dict()
    data.pop("status", None)
    meta = obj.metadata
    metadata: dict[str, Any] = {"name": meta.name}
    if namespaced:
        metadata["namespace"] = meta.namespace
    if meta.labels:
        metadata["labels"] = dict(meta.labels)
    if meta.annotations:
        metadata["annotations"] = dict(meta.annotations)
    data["metadata"] = metadata
    return data


def job_body(job: TrainingJob) -> dict[str, Any]:
    """The TrainingJob to POST: the validated, defaulted spec; metadata the user may set; no status."""
    return object_body(job, namespaced=True)


def queue_from_object(obj: Mapping[str, Any]) -> Queue:
    """A stored Queue as the model's, with the status the scheduler wrote (an unreadable status is empty).

    Raises:
        SpecError: its spec is not a valid Queue (written with kubectl past the schema).
    """
    meta = obj.get("metadata") or {}
    document = {
        "apiVersion": obj.get("apiVersion", "phalanx.dev/v1alpha1"),
        "kind": "Queue",
        "metadata": model_metadata(obj, cluster_scoped=True),
        "spec": obj.get("spec") or {},
    }
    queue = parse_queue(document, source=f"queue/{meta.get('name')}")
    with contextlib.suppress(ValueError):
        queue = queue.model_copy(update={"status": QueueStatus.model_validate(obj.get("status") or {})})
    return queue


def jobtype_from_object(obj: Mapping[str, Any]) -> JobType:
    """A JobType read from the API server.

    Raises:
        SpecError: the JobType is invalid.
    """
    metadata = model_metadata(obj, cluster_scoped=True)
    document = {
        "apiVersion": obj.get("apiVersion"),
        "kind": "JobType",
        "metadata": metadata,
        "spec": obj.get("spec") or {},
    }
    return parse_jobtype(document, source=f"jobtype/{metadata.get('name')}")


# -- pods ----------------------------------------------------------------------------------------------------------


def _timestamp(value: Any) -> datetime | None:
    """An RFC 3339 time of the API; None when absent or not a time."""
    if not value:
        return None
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return None


def pod_exit(pod: Mapping[str, Any]) -> tuple[int | None, datetime | None, str]:
    """The first terminated container's exit code, finish time and reason; ``(None, None, '')`` while running."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            return (
                int(terminated.get("exitCode", 0)),
                _timestamp(terminated.get("finishedAt")),
                str(terminated.get("reason") or ""),
            )
    return None, None, ""


def pod_last_output(pod: Mapping[str, Any]) -> str:
    """A failed container's last line of output: its termination message's last line; "" when it did not fail.

    The replica container's ``terminationMessagePolicy: FallbackToLogsOnError`` (``rendering``) makes the kubelet
    put the end of the log there when the program wrote no message, as the embedded runtime reads the log's end.
    """
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated and int(terminated.get("exitCode", 0)) != 0:
            return last_output_of(str(terminated.get("message") or ""))
    return ""


def observe_pod(pod: Mapping[str, Any]) -> ObservedReplica | None:
    """The planner's view of a job's Pod; None for a Pod without the labels the operator renders."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        role = labels[LABEL_ROLE]
        index = int(labels[LABEL_INDEX])
        attempt = int(labels.get(LABEL_ATTEMPT, 0))
    except (KeyError, ValueError):
        return None
    status = pod.get("status") or {}
    phase = _POD_PHASES.get(str(status.get("phase") or "Pending"), ReplicaPhase.PENDING)
    exit_code, finished, reason = pod_exit(pod)
    if phase in (ReplicaPhase.SUCCEEDED, ReplicaPhase.FAILED) and exit_code is None:
        exit_code = 0 if phase == ReplicaPhase.SUCCEEDED else 1
    message = str(status.get("message") or reason or "")
    return ObservedReplica(
        name=str(meta.get("name")),
        role=role,
        index=index,
        attempt=attempt,
        phase=phase,
        exit_code=exit_code,
        deleting=meta.get("deletionTimestamp") is not None,
        start_time=_timestamp(status.get("startTime")),
        finish_time=finished,
        message=message,
        last_output=pod_last_output(pod),
    )


def replica_from_pod(pod: Mapping[str, Any], job: TrainingJob) -> Replica:
    """A job's Pod as a ``Replica``, the embedded runtime's object, so ``describe`` shows both alike."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    name = str(meta.get("name"))
    containers = spec.get("containers") or [{}]
    container = next((c for c in containers if c.get("name") == CONTAINER_NAME), containers[0])
    planned = job.status.placements.get(name)
    node = str(spec.get("nodeName") or "")
    placement = (
        planned.model_copy(update={"node": node or planned.node})
        if planned is not None
        else ReplicaPlacement(node=node or "-")
    )
    exit_code, finished, reason = pod_exit(pod)
    claim = dra.pod_claim_name(pod) or ""
    return Replica(
        metadata=ObjectMeta(
            name=name,
            namespace=str(meta.get("namespace") or job.metadata.namespace),
            uid=meta.get("uid"),
            creation_timestamp=_timestamp(meta.get("creationTimestamp")),
            deletion_timestamp=_timestamp(meta.get("deletionTimestamp")),
        ),
        spec=ReplicaObjectSpec(
            job_name=job.metadata.name,
            job_uid=job.metadata.uid or "",
            role=str(labels.get(LABEL_ROLE, "")),
            index=max(0, _count(labels.get(LABEL_INDEX))),
            attempt=max(0, _count(labels.get(LABEL_ATTEMPT))),
            command=[*(container.get("command") or []), *(container.get("args") or [])],
            placement=placement,
        ),
        status=ReplicaObjectStatus(
            phase=_POD_PHASES.get(str(status.get("phase") or "Pending"), ReplicaPhase.PENDING),
            exit_code=exit_code,
            start_time=_timestamp(status.get("startTime")),
            finish_time=finished,
            message=str(status.get("message") or reason or ""),
            last_output=pod_last_output(pod),
            gpu_claim=claim,
            # phalanx-scheduler binds a Pod that claims GPUs only once its claim holds its placement's devices.
            gpu_claim_allocated=bool(node and claim),
            bound=bool(node),
        ),
    )


def event_from_object(obj: Mapping[str, Any]) -> Event:
    """A core/v1 Event about an object as the model's ``Event`` (``(xN)`` when it happened N times)."""
    involved = obj.get("involvedObject") or {}
    meta = obj.get("metadata") or {}
    when = (
        _timestamp(obj.get("lastTimestamp"))
        or _timestamp(obj.get("eventTime"))
        or _timestamp(obj.get("firstTimestamp"))
        or _timestamp(meta.get("creationTimestamp"))
        or datetime.now(UTC)
    )
    count = _count(obj.get("count"), 1)
    message = str(obj.get("message") or "")
    return Event(
        object_kind=str(involved.get("kind") or "TrainingJob"),
        object_name=str(involved.get("name") or ""),
        namespace=str(involved.get("namespace") or meta.get("namespace") or "default"),
        type="Warning" if obj.get("type") == "Warning" else "Normal",
        reason=str(obj.get("reason") or ""),
        message=f"{message} (x{count})" if count > 1 else message,
        time=when,
    )


def pod_is_bound(pod: Mapping[str, Any]) -> bool:
    """True once a scheduler bound the Pod to a node."""
    return bool((pod.get("spec") or {}).get("nodeName"))


def pod_holds_resources(pod: Mapping[str, Any]) -> bool:
    """True while a bound Pod's containers may still run (kubelet frees a finished Pod's resources)."""
    phase = (pod.get("status") or {}).get("phase")
    return pod_is_bound(pod) and phase not in ("Succeeded", "Failed")


# -- nodes ---------------------------------------------------------------------------------------------------------


def _count(value: Any, default: int = 0) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def unhealthy_gpus(obj: Mapping[str, Any]) -> set[int]:
    """GPU indices the node agent marked unhealthy (annotation ``phalanx.dev/unhealthy-gpus``: '1,3')."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(UNHEALTHY_GPUS_ANNOTATION, "")
    return {int(part) for part in str(raw).split(",") if part.strip().isdigit()}


def gpu_problems(obj: Mapping[str, Any]) -> dict[int, str]:
    """Why each unhealthy GPU is unhealthy, as the node agent wrote it (``phalanx.dev/gpu-problems``); {} if unsaid."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(GPU_PROBLEMS_ANNOTATION)
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {int(key): str(why)[:1000] for key, why in value.items() if str(key).isdigit()}


def _topology(obj: Mapping[str, Any]) -> dict[str, Any]:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(GPU_TOPOLOGY_ANNOTATION)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _cpu_list(value: Any) -> list[int]:
    """'0-3,8' or [0, 1] -> ids."""
    if isinstance(value, list):
        return [int(v) for v in value]
    ids: list[int] = []
    for part in str(value or "").split(","):
        part = part.strip()
        if not part:
            continue
        start, _, end = part.partition("-")
        ids.extend(range(int(start), int(end or start) + 1))
    return ids


def node_from_object(obj: Mapping[str, Any]) -> Node:
    """The scheduler's view of a Kubernetes Node (allocatable resources, GPU topology, health)."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    allocatable = status.get("allocatable") or {}
    capacity = status.get("capacity") or {}
    try:
        cpu_count = parse_cpu(allocatable.get("cpu", "0")) // 1000
        memory = parse_memory(allocatable.get("memory", "0"))
    except QuantityError:
        cpu_count, memory = 0, 0
    topology = _topology(obj)
    numa_nodes = [entry for entry in topology.get("numaNodes") or [] if isinstance(entry, dict)]
    numa_of_gpu: dict[int, int] = {}
    numa_of_cpu: dict[int, int] = {}
    for entry in numa_nodes:
        numa = _count(entry.get("id"))
        for gpu in entry.get("gpus") or []:
            numa_of_gpu[int(gpu)] = numa
        for cpu in _cpu_list(entry.get("cpus")):
            numa_of_cpu[cpu] = numa
    per_numa = max(1, -(-cpu_count // max(1, len(numa_nodes))))
    numa_count = max(1, len(numa_nodes))
    cpus = []
    for cpu_id in range(cpu_count):
        numa = numa_of_cpu.get(cpu_id, min(cpu_id // per_numa, numa_count - 1))
        cpus.append(CpuInfo(id=cpu_id, socket=numa, numa=numa))
    gpu_count = _count(capacity.get(GPU_RESOURCE, allocatable.get(GPU_RESOURCE, 0)))
    sick = unhealthy_gpus(obj)
    # A GPU gone from allocatable without an annotation (e.g. a device plugin's health check) is unhealthy too;
    # the highest indices are assumed lost, since the API does not say which one went.
    missing = max(0, gpu_count - len(sick) - _count(allocatable.get(GPU_RESOURCE, gpu_count)))
    healthy_left = [index for index in range(gpu_count) if index not in sick]
    sick |= set(healthy_left[len(healthy_left) - missing :]) if missing else set()
    links: dict[int, dict[int, int]] = {index: {} for index in range(gpu_count)}
    for pair in (topology.get("nvlink") or {}).get("pairs") or []:
        a, b = int(pair[0]), int(pair[1])
        if a in links and b in links:
            links[a][b] = links[b][a] = 1
    model = str((meta.get("labels") or {}).get(GPU_PRODUCT_LABEL, "unknown"))
    why = gpu_problems(obj)
    listed = topology.get("uuids")
    uuids = [uuid if isinstance(uuid, str) else "" for uuid in listed] if isinstance(listed, list) else []
    gpus = [
        GpuInfo(
            index=index,
            uuid=uuids[index] if index < len(uuids) else "",
            model=model,
            numa=numa_of_gpu.get(index, 0),
            healthy=index not in sick,
            problem=(why.get(index) or "not allocatable") if index in sick else "",
            nvlinks=links[index],
        )
        for index in range(gpu_count)
    ]
    return Node(
        metadata=ObjectMeta(name=str(meta.get("name")), namespace="default", labels=dict(meta.get("labels") or {})),
        spec=NodeSpec(
            unschedulable=bool((obj.get("spec") or {}).get("unschedulable")) or not node_ready(obj),
            taints=_taints(obj),
        ),
        status=NodeStatus(
            cpus=cpus,
            memory=memory,
            gpus=gpus,
            source="kubernetes",
            cpu_policy=_cpu_policy(meta),
        ),
    )


def _cpu_policy(meta: Mapping[str, Any]) -> CpuPolicy:
    """What the node's kubelet enforces, as its node agent reported it (not enforced when it reported nothing)."""
    cpu, topology, unknown = parse_cpu_policy_annotation((meta.get("annotations") or {}).get(CPU_POLICY_ANNOTATION))
    return kubelet_alignment(cpu, topology, unknown=unknown)


def _taints(obj: Mapping[str, Any]) -> list[NodeTaint]:
    """The node's taints; a malformed one (no key, an unknown effect) is skipped, as it cannot be matched."""
    taints = []
    for taint in (obj.get("spec") or {}).get("taints") or []:
        try:
            fields = {key: taint.get(key) for key in ("key", "value", "effect") if taint.get(key)}
            taints.append(NodeTaint.model_validate(fields))
        except (ValidationError, AttributeError):
            continue
    return taints


def node_ready(obj: Mapping[str, Any]) -> bool:
    """True unless the node's Ready condition says otherwise (a node with no conditions yet counts as ready)."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return True
