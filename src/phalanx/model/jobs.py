"""TrainingJob: the object users write. Spec (what to run) and status (what Phalanx observed and decided).

A job names a JobType (``spec.type``) and gives each of that type's roles a replica count and a template.
Resources come from, in order: the template's ``resources``, the template's or the job's T-shirt ``size``,
the JobType role's defaults, then the ``small`` size.

Every number here has a bound (``model.bounds``) and every role name is a DNS-1123 label: a role name becomes part
of a path and of a process name, and an unbounded number would meet an int64 array or ``datetime`` arithmetic.
"""

from __future__ import annotations

import posixpath
import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    JsonValue,
    PlainSerializer,
    StrictBool,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from phalanx.model.base import ApiModel, every_problem
from phalanx.model.bounds import (
    MAX_ARGV_ITEMS,
    MAX_BACKOFF_CAP_SECONDS,
    MAX_BACKOFF_LIMIT,
    MAX_BACKOFF_SECONDS,
    MAX_ENV_ENTRIES,
    MAX_EXIT_CODE,
    MAX_PRIORITY,
    MAX_REPLICA_CPU_MILLI,
    MAX_REPLICA_GPU,
    MAX_REPLICA_MEMORY,
    MAX_REPLICAS,
    MAX_SECONDS,
    MAX_STRING_BYTES,
    MIN_PRIORITY,
    few_roles,
)
from phalanx.model.datasets import DatasetMount
from phalanx.model.meta import ObjectMeta
from phalanx.model.names import check_dns_label, check_dns_subdomain
from phalanx.model.pods import AbsolutePath, EnvVarSource, PodFields, not_phalanx_mount
from phalanx.model.resources import (
    CPU_QUANTITY_PATTERN,
    MEMORY_QUANTITY_PATTERN,
    ResourceVector,
    cpu_at_most,
    format_cpu,
    format_memory,
    memory_at_most,
    parse_cpu,
    parse_memory,
)

# Quantities are held as integers (millicores, bytes) but written as numbers or Kubernetes quantity strings.
# ``json_schema_input_type`` makes the JSON schema say what may be written, not the integer held; the CRD
# schemas are generated from it (int-or-string fields).
MilliCpu = Annotated[
    int,
    BeforeValidator(
        parse_cpu, json_schema_input_type=int | float | Annotated[str, Field(pattern=CPU_QUANTITY_PATTERN)]
    ),
    PlainSerializer(format_cpu, return_type=str),
]
MemoryBytes = Annotated[
    int,
    BeforeValidator(
        parse_memory, json_schema_input_type=int | float | Annotated[str, Field(pattern=MEMORY_QUANTITY_PATTERN)]
    ),
    PlainSerializer(format_memory, return_type=str),
]
TShirtSize = Literal["small", "medium", "large", "xlarge"]
ReplicaCpu = Annotated[MilliCpu, AfterValidator(cpu_at_most(MAX_REPLICA_CPU_MILLI, "per replica"))]
ReplicaMemory = Annotated[MemoryBytes, AfterValidator(memory_at_most(MAX_REPLICA_MEMORY, "per replica"))]


def _role_name(value: str) -> str:
    return check_dns_label(value, "role name")


#: A role's name (a key of ``spec.replicas`` or of a JobType's ``spec.roles``): a DNS-1123 label, because it
#: becomes part of replica, process and Pod names and of the run directory's path.
RoleName = Annotated[str, AfterValidator(_role_name)]


class Phase(StrEnum):
    """Where a job is in its life, in the user's words (DESIGN §3)."""

    PENDING = "Pending"
    QUEUED = "Queued"
    ADMITTED = "Admitted"
    DOWNLOADING = "Downloading"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    STORING = "Storing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PREEMPTED = "Preempted"
    HALTING = "Halting"
    HALTED = "Halted"


#: The phases a job ends in: nothing more happens to it (but a TTL removing it).
TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED})
#: The phases in which none of a job's replicas runs nor will without the user (``resume`` a Halted job).
STOPPED_PHASES = frozenset(TERMINAL_PHASES | {Phase.HALTED})


_GPU_NOT_LIMITED = (
    "GPUs have no ceiling above what is reserved (in Kubernetes too, a GPU's limit equals its request): "
    "set the GPUs with resources.gpu and remove this"
)


class ResourceLimits(ApiModel):
    """The enforced ceiling of a replica's CPU and memory, above what Phalanx reserves for it.

    Kubernetes' ``limits``: the replica is placed (and counted against quotas) by its reserved amount and may use
    up to its ceiling when the node has room. A resource left out here has its reserved amount as its ceiling.
    """

    cpu: ReplicaCpu | None = Field(
        default=None, gt=0, description="CPU the replica may use at most (its CPU quota); default: resources.cpu"
    )
    memory: ReplicaMemory | None = Field(
        default=None,
        gt=0,
        description="memory the replica may use at most before it is killed; default: resources.memory",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_gpu_ceiling(cls, data: Any) -> Any:
        if isinstance(data, dict):
            gpus = [key for key in data if key in ("gpu", "gpuMilli", "gpu_milli", "nvidia.com/gpu")]
            if gpus:
                raise every_problem("ResourceLimits", [((key,), _GPU_NOT_LIMITED) for key in gpus])
        return data


class Resources(ApiModel):
    """What one replica asks for; unset fields are filled by defaulting.

    ``cpu`` and ``memory`` are reserved: the scheduler places the replica by them and quotas count them.
    ``limits`` may lift the enforced ceiling above them (Kubernetes' requests and limits); without it, the
    reserved amount is also the ceiling.
    """

    cpu: ReplicaCpu | None = Field(default=None, gt=0)
    memory: ReplicaMemory | None = Field(default=None, gt=0)
    gpu: int | None = Field(default=None, ge=0, le=MAX_REPLICA_GPU)
    gpu_milli: int | None = Field(default=None, ge=1, le=1000)
    gpu_model: GpuModels | None = None
    limits: ResourceLimits | None = Field(
        default=None,
        description="the enforced ceiling of cpu and memory, at least the reserved amount (Kubernetes' limits); "
        "default: the reserved amount",
    )

    @model_validator(mode="after")
    def _gpu_exclusive_or_shared(self) -> Resources:
        if self.gpu and self.gpu_milli:
            raise ValueError(
                "gpu and gpuMilli are exclusive: ask for whole GPUs (gpu: 2) or a share of one (gpuMilli: 500)"
            )
        return self

    @model_validator(mode="after")
    def _ceiling_at_least_reserved(self) -> Resources:
        if self.limits is None:
            return self
        problems: list[tuple[tuple[str | int, ...], str]] = []
        if self.cpu is not None and self.limits.cpu is not None and self.limits.cpu < self.cpu:
            problems.append(
                (
                    ("limits", "cpu"),
                    f"{format_cpu(self.limits.cpu)} is below the {format_cpu(self.cpu)} CPU reserved (resources.cpu, "
                    "else the size's or job type's): a ceiling is at least what is reserved; raise limits.cpu or "
                    "lower cpu",
                )
            )
        if self.memory is not None and self.limits.memory is not None and self.limits.memory < self.memory:
            problems.append(
                (
                    ("limits", "memory"),
                    f"{format_memory(self.limits.memory)} is below the {format_memory(self.memory)} reserved "
                    "(resources.memory, else the size's or job type's): a ceiling is at least what is reserved; raise "
                    "limits.memory or lower memory",
                )
            )
        if problems:
            raise every_problem("Resources", problems)
        return self

    def vector(self) -> ResourceVector:
        """The reserved amounts as exact integers (unset fields count as zero): what scheduling counts."""
        return ResourceVector(
            cpu_milli=self.cpu or 0,
            memory=self.memory or 0,
            gpu=self.gpu or 0,
            gpu_milli=self.gpu_milli or 0,
        )

    def ceiling(self) -> ResourceVector:
        """The enforced amounts: ``limits`` where given, else the reserved ones (GPUs are never above them)."""
        limits = self.limits or ResourceLimits()
        return ResourceVector(
            cpu_milli=limits.cpu or self.cpu or 0,
            memory=limits.memory or self.memory or 0,
            gpu=self.gpu or 0,
            gpu_milli=self.gpu_milli or 0,
        )


_VALUE_FROM = "a JobType's env takes values only; set valueFrom in the job's replica template"


def _env_from_list(value: Any) -> Any:
    # Kubernetes writes env as [{name, value}]; people write a mapping. Accept both, keep a mapping. A replica
    # template moves valueFrom entries to envValueFrom first (``_split_value_from``); any left here (a JobType's
    # env) is refused by name: dropping it would run the program with an empty secret and no word why.
    if isinstance(value, list):
        env: dict[str, Any] = {}
        for position, item in enumerate(value):
            if not isinstance(item, dict) or "name" not in item:
                raise ValueError(f"item {position} must be a mapping with 'name' and 'value'")
            if "valueFrom" in item:
                raise ValueError(f"[{position}].valueFrom: {_VALUE_FROM}")
            unknown = sorted(str(key) for key in item if key not in ("name", "value"))
            if unknown:
                raise ValueError(f"[{position}]: unknown field {unknown[0]!r}; an entry has 'name' and 'value'")
            env[str(item["name"])] = item.get("value", "")
        return env
    return value


def _stringify_env(value: Any) -> Any:
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict) and "valueFrom" in item:
                raise ValueError(f"{key}.valueFrom: {_VALUE_FROM}")
            if isinstance(item, dict | list):
                raise ValueError(f"{key}: must be a string, a number or true/false, got a {type(item).__name__}")
        return {
            key: (str(item).lower() if isinstance(item, bool) else str(item)) if item is not None else ""
            for key, item in value.items()
        }
    return value


def _bounded_env(env: dict[str, str]) -> dict[str, str]:
    if len(env) > MAX_ENV_ENTRIES:
        raise ValueError(f"at most {MAX_ENV_ENTRIES} entries, got {len(env)}; pass bulk data in a file instead")
    for key, value in env.items():
        if len(value.encode()) > MAX_STRING_BYTES:
            raise ValueError(f"{key}: at most 128 KiB, got {len(value.encode())} bytes; pass bulk data in a file")
    return env


GPU_MODEL_PATTERN = r"^[A-Za-z0-9._-]+( *[|] *[A-Za-z0-9._-]+)*$"


def _gpu_models(value: str) -> str:
    alternatives = [part.strip() for part in value.split("|")]
    if not value.strip() or not all(alternatives) or not re.fullmatch(GPU_MODEL_PATTERN, value.strip()):
        raise ValueError(
            f"{value!r} is not a GPU model list: write one model name (NVIDIA-A100-SXM4-80GB) or alternatives "
            "separated by '|' (V100M16|V100M32), letters, digits, '.', '_' and '-' only"
        )
    return "|".join(alternatives)


GpuModels = Annotated[
    str,
    AfterValidator(_gpu_models),
    WithJsonSchema({"type": "string", "pattern": GPU_MODEL_PATTERN}),
]

EnvMap = Annotated[
    dict[str, str],
    AfterValidator(_bounded_env),
    BeforeValidator(_stringify_env),
    BeforeValidator(_env_from_list),
]


class TemplateMetadata(ApiModel):
    """Labels and annotations for the replica's Pod on Kubernetes (what a PodTemplateSpec's metadata holds).

    The embedded runtime has no Pods and ignores them; on Kubernetes, Phalanx's own ``phalanx.dev/`` keys win
    over these.
    """

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


def _split_value_from(data: Any) -> Any:
    """Move env entries with ``valueFrom`` (list or mapping form) to ``envValueFrom``, validated at their own path.

    ``env`` stays a mapping of strings, which the rendezvous templates and both runtimes build on; the sources
    are kept beside it and rendered after it. An entry with both ``value`` and ``valueFrom`` is refused, as
    Kubernetes does.
    """
    if not isinstance(data, dict):
        return data
    env = data.get("env")
    sources: dict[str, Any] = {}
    problems: list[tuple[tuple[str | int, ...], str]] = []
    kept: Any = env
    if isinstance(env, list):
        kept = []
        for position, item in enumerate(env):
            if isinstance(item, dict) and "valueFrom" in item:
                where: tuple[str | int, ...] = ("env", position)
                if not isinstance(item.get("name"), str):
                    problems.append(((*where, "name"), "the variable's name is required"))
                    continue
                if item.get("value") not in (None, ""):
                    problems.append(((*where, "valueFrom"), "give either value or valueFrom, not both"))
                extra = sorted(str(k) for k in item if k not in ("name", "value", "valueFrom"))
                if extra:
                    problems.append(((*where, extra[0]), "unknown field; an entry has name and value or valueFrom"))
                sources[str(item.get("name"))] = (where, item["valueFrom"])
            else:
                kept.append(item)
    elif isinstance(env, dict):
        kept = {}
        for name, item in env.items():
            if isinstance(item, dict) and "valueFrom" in item:
                extra = sorted(str(k) for k in item if k != "valueFrom")
                if extra:
                    problems.append((("env", name, extra[0]), "unknown field; write NAME: {valueFrom: {...}}"))
                sources[str(name)] = (("env", name), item["valueFrom"])
            else:
                kept[name] = item
    if not sources and not problems:
        return data
    given = data.get("envValueFrom", data.get("env_value_from")) or {}
    parsed: dict[str, Any] = dict(given) if isinstance(given, dict) else {}
    for name, (where, raw) in sources.items():
        if name in parsed or (isinstance(kept, dict) and name in kept):
            problems.append(((*where, "name"), f"{name} is set twice; set it once"))
            continue
        try:
            parsed[name] = EnvVarSource.model_validate(raw)
        except ValidationError as error:
            problems.extend(
                (
                    (*where, "valueFrom", *item["loc"]),
                    "unknown field; a source is secretKeyRef, configMapKeyRef or fieldRef"
                    if item["type"] == "extra_forbidden"
                    else item["msg"].removeprefix("Value error, "),
                )
                for item in error.errors(include_url=False)
            )
    if problems:
        raise every_problem("ReplicaTemplate", problems)
    rest = {k: v for k, v in data.items() if k not in ("env_value_from", "envValueFrom")}
    return {**rest, "env": kept, "envValueFrom": parsed}


class ReplicaTemplate(PodFields):
    """How to run one replica of a role, and what its Pod carries on Kubernetes (``model.pods``)."""

    metadata: TemplateMetadata = Field(default_factory=TemplateMetadata)
    image: str | None = None
    command: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    env: EnvMap = Field(default_factory=dict)
    working_dir: str | None = None
    size: TShirtSize | None = None
    resources: Resources = Field(default_factory=Resources)

    _value_from = model_validator(mode="before")(_split_value_from)

    @model_validator(mode="after")
    def _runnable(self) -> ReplicaTemplate:
        # Checked here rather than at launch: a bad argv fails execve, and the replica then looks killed.
        if len(self.command) + len(self.args) > MAX_ARGV_ITEMS:
            raise ValueError(
                f"command and args hold {len(self.command) + len(self.args)} items; at most {MAX_ARGV_ITEMS} are "
                "allowed: pass long lists in a file"
            )
        if self.command and not self.command[0].strip():
            raise ValueError("command[0]: the program name is empty; name the program to run, e.g. [python, train.py]")
        strings = [("image", self.image), ("workingDir", self.working_dir)]
        strings += [(f"command[{i}]", item) for i, item in enumerate(self.command)]
        strings += [(f"args[{i}]", item) for i, item in enumerate(self.args)]
        for where, text in strings:
            if text is not None and len(text.encode()) > MAX_STRING_BYTES:
                raise ValueError(f"{where}: at most 128 KiB, got {len(text.encode())} bytes; pass bulk data in a file")
        return self


def _no_schema_default(schema: dict[str, JsonValue]) -> None:
    # For fields whose absence means something (ReplicaSpec.count: "take the JobType's defaultCount"): a schema
    # default, which a Kubernetes API server would write into every stored object, must not hide it.
    schema.pop("default", None)


class RestartPolicy(StrEnum):
    """When a failed replica is restarted."""

    NEVER = "Never"
    ON_FAILURE = "OnFailure"
    EXIT_CODE = "ExitCode"


ExitCodes = list[Annotated[int, Field(ge=0, le=MAX_EXIT_CODE)]]


class ReplicaSpec(ApiModel):
    """A role of the job: how many replicas, how each runs, and how its failures are handled.

    ``restartPolicy`` and ``retryableExitCodes`` override the job's ``runPolicy`` for this role only (a Kubeflow
    job's per-replica-type restartPolicy); ``backoffLimit``, the backoff and ``gangRestart`` stay job-wide.
    """

    count: int = Field(
        default=1,
        ge=1,
        le=MAX_REPLICAS,
        description="replicas of this role; default: the JobType role's defaultCount",
        json_schema_extra=_no_schema_default,
    )
    template: ReplicaTemplate = Field(default_factory=ReplicaTemplate)
    restart_policy: RestartPolicy | None = Field(
        default=None,
        description="what a failure of this role's replicas leads to; default: runPolicy.restartPolicy",
    )
    retryable_exit_codes: ExitCodes | None = Field(
        default=None,
        max_length=MAX_EXIT_CODE + 1,
        description="with this role's restartPolicy ExitCode: the exit codes retried; default: "
        "runPolicy.retryableExitCodes",
    )


class CleanPodPolicy(StrEnum):
    """What becomes of the replicas still running when the job finishes (Kubeflow's ``cleanPodPolicy``)."""

    #: they are stopped and their resources released; finished replicas keep their logs
    RUNNING = "Running"
    #: they keep running, holding their resources, until they exit or the job is deleted
    NONE = "None"


class RunPolicy(ApiModel):
    """Failure handling, deadlines and cleanup."""

    restart_policy: RestartPolicy = RestartPolicy.NEVER
    retryable_exit_codes: ExitCodes = Field(
        default_factory=lambda: [130, 137, 143],
        max_length=MAX_EXIT_CODE + 1,
        description="with restartPolicy ExitCode: exit codes that are retried (default: killed by a signal)",
    )
    backoff_limit: int = Field(default=3, ge=0, le=MAX_BACKOFF_LIMIT)
    backoff_seconds: float = Field(
        default=1.0,
        ge=0,
        le=MAX_BACKOFF_SECONDS,
        allow_inf_nan=False,
        description="first retry delay; doubles per retry",
    )
    max_backoff_seconds: float = Field(default=300.0, ge=0, le=MAX_BACKOFF_CAP_SECONDS, allow_inf_nan=False)
    gang_restart: StrictBool = False
    active_deadline_seconds: int | None = Field(default=None, gt=0, le=MAX_SECONDS)
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0, le=MAX_SECONDS)
    suspend: StrictBool = False
    clean_pod_policy: CleanPodPolicy = Field(
        default=CleanPodPolicy.RUNNING,
        description="Running: replicas still running when the job succeeds or fails are stopped. None: they keep "
        "running (a parameter server after its workers succeed) until they exit or the job is deleted; a job "
        "failed by activeDeadlineSeconds or backoffLimit still stops them",
    )


class Placement(StrEnum):
    """How replicas are spread over nodes."""

    PACK = "pack"
    SPREAD = "spread"
    BINPACK = "binpack"
    AUTO = "auto"


PRIORITY_CLASSES: dict[str, int] = {"low": -100, "normal": 0, "high": 100, "critical": 1000}


def _scheduler_name(value: str) -> str:
    return check_dns_subdomain(value, "scheduler name")


#: A Kubernetes scheduler's name (a Pod's ``spec.schedulerName``): a DNS-1123 subdomain.
SchedulerName = Annotated[str, AfterValidator(_scheduler_name)]


def _queue_name(value: str) -> str:
    return check_dns_label(value, "queue name")


#: The name of a Queue (whose ``metadata.name`` is a DNS-1123 label): a job naming another could never run.
QueueName = Annotated[str, AfterValidator(_queue_name)]


class SchedulingPolicy(ApiModel):
    """Queue, priority and placement wishes."""

    queue: QueueName = "default"
    priority_class: str | None = None
    priority: int = Field(default=0, ge=MIN_PRIORITY, le=MAX_PRIORITY)
    min_available: int | None = Field(default=None, ge=1, le=MAX_REPLICAS)
    placement: Placement = Placement.AUTO
    topology: Literal["none", "preferred", "required"] = "preferred"
    gpu_model: GpuModels | None = None
    scheduler_name: SchedulerName | None = Field(
        default=None,
        description="Kubernetes only: the cluster's scheduler that places the job's Pods as one gang "
        "(e.g. default-scheduler, kube-scheduler's gang scheduling); default: the operator's "
        "--default-job-scheduler, else phalanx-scheduler (docs/kubernetes.md#gang-scheduling-by-kube-scheduler)",
    )

    def effective_priority(self) -> int:
        """The priority class's value when a class is named, else ``priority``."""
        return PRIORITY_CLASSES.get(self.priority_class or "", self.priority)


def _output_subdirectory(value: str) -> str:
    # "." (or "") would store the whole run directory: launch.json with the job's env, logs, exit codes.
    if not value.strip() or posixpath.normpath(value) == ".":
        raise ValueError(f"must name a subdirectory of the replica's working directory, e.g. 'outputs', got {value!r}")
    return value


class Outputs(ApiModel):
    """Where replicas write results, and where Phalanx stores them when the job has run."""

    path: Annotated[str, AfterValidator(_output_subdirectory)] = "outputs"
    store_to: str | None = None


#: Where a job's SSH key pair is mounted unless it says otherwise: root's, as mpi-operator does.
DEFAULT_SSH_MOUNT_PATH = "/root/.ssh"


class SshKeys(ApiModel):
    """A key pair Phalanx makes for the job and mounts in every replica.

    So that the launcher's ``mpirun`` logs in to the workers' SSH servers, on Kubernetes; on one machine
    ``mpirun`` starts the ranks itself and no key is made.
    """

    mount_path: Annotated[AbsolutePath, AfterValidator(not_phalanx_mount)] = Field(
        default=DEFAULT_SSH_MOUNT_PATH,
        description="the directory of id_rsa, id_rsa.pub and authorized_keys in every replica's container",
    )


class TrainingJobSpec(ApiModel):
    """What to run."""

    type: str = "generic"
    size: TShirtSize | None = None
    replicas: dict[RoleName, ReplicaSpec]
    # ``default: {}`` in the schema: a job applied with kubectl without these gets them, and so the defaults
    # inside them (queue, restartPolicy, backoffLimit...), from the API server, as the models give them here.
    run_policy: RunPolicy = Field(default_factory=RunPolicy, json_schema_extra={"default": {}})
    scheduling: SchedulingPolicy = Field(default_factory=SchedulingPolicy, json_schema_extra={"default": {}})
    outputs: Outputs = Field(default_factory=Outputs, json_schema_extra={"default": {}})
    datasets: list[DatasetMount] = Field(
        default_factory=list, description="datasets the replicas read (docs/datasets.md); none by default"
    )
    ssh_keys: SshKeys | None = Field(
        default=None, description="a key pair made for the job, mounted in every replica (docs/kubeflow.md, MPIJob)"
    )

    @field_validator("datasets")
    @classmethod
    def _distinct_dataset_names(cls, value: list[DatasetMount]) -> list[DatasetMount]:
        names = [mount.name for mount in value]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(
                f"dataset name {', '.join(repeated)} is listed twice; give each mount its own name "
                "(it becomes PHALANX_DATASET_<NAME>_PATH) and point both at the Dataset with 'dataset:'"
            )
        return value

    @field_validator("replicas", mode="before")
    @classmethod
    def _few_roles(cls, value: Any) -> Any:
        return few_roles(value, "a job")

    @field_validator("replicas")
    @classmethod
    def _at_least_one_role(cls, value: dict[str, ReplicaSpec]) -> dict[str, ReplicaSpec]:
        if not value:
            raise ValueError("at least one role is needed, e.g. replicas: {worker: {count: 2, template: ...}}")
        total = sum(replica.count for replica in value.values())
        if total > MAX_REPLICAS:
            raise ValueError(f"at most {MAX_REPLICAS} replicas per job (all roles together), got {total}")
        return value

    @model_validator(mode="after")
    def _exit_codes_need_exit_code(self) -> TrainingJobSpec:
        # Codes that no ExitCode policy reads would be dropped without a word.
        problems: list[tuple[tuple[str | int, ...], str]] = [
            (
                ("replicas", role, "retryableExitCodes"),
                f"the role's restartPolicy is {self.restart_policy_of(role)}, which reads no exit codes: set "
                "restartPolicy: ExitCode for the role or remove retryableExitCodes",
            )
            for role, replica in self.replicas.items()
            if replica.retryable_exit_codes is not None and self.restart_policy_of(role) != RestartPolicy.EXIT_CODE
        ]
        if problems:
            raise every_problem("TrainingJobSpec", problems)
        return self

    @model_validator(mode="after")
    def _ssh_keys_have_their_own_directory(self) -> TrainingJobSpec:
        if self.ssh_keys is None:
            return self
        ours = posixpath.normpath(self.ssh_keys.mount_path)
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for role, replica in self.replicas.items():
            for position, mount in enumerate(replica.template.volume_mounts):
                if posixpath.normpath(mount.mount_path) == ours:
                    problems.append(
                        (
                            ("replicas", role, "template", "volumeMounts", position, "mountPath"),
                            f"{mount.mount_path!r} is where the job's SSH keys are mounted (sshKeys.mountPath); "
                            "mount this volume elsewhere or move the keys",
                        )
                    )
        if problems:
            raise every_problem("TrainingJobSpec", problems)
        return self

    def restart_policy_of(self, role: str) -> RestartPolicy:
        """The restartPolicy of ``role``'s replicas: the role's own, else the job's."""
        replica = self.replicas.get(role)
        own = replica.restart_policy if replica is not None else None
        return RestartPolicy(own or self.run_policy.restart_policy)

    def retryable_exit_codes_of(self, role: str) -> list[int]:
        """The exit codes retried for ``role`` under ExitCode: the role's own, else the job's."""
        replica = self.replicas.get(role)
        own = replica.retryable_exit_codes if replica is not None else None
        return list(own if own is not None else self.run_policy.retryable_exit_codes)

    def total_replicas(self) -> int:
        """How many replicas the job runs in all."""
        return sum(role.count for role in self.replicas.values())


class Condition(ApiModel):
    """One observation about the job, Kubernetes style."""

    nul_bytes_allowed = True  # observed free text: it may quote a program's output

    type: str
    status: Literal["True", "False", "Unknown"] = "True"
    reason: str = ""
    message: str = ""
    last_transition_time: datetime


class ReplicaPlacement(ApiModel):
    """Where one replica was placed and which devices it holds."""

    node: str
    cpus: list[int] = Field(default_factory=list, description="exclusive CPU ids; empty for shared CPU")
    gpus: list[int] = Field(default_factory=list)
    gpu_milli: int = 0


class RoleStatus(ApiModel):
    """Counts per role."""

    active: int = 0
    succeeded: int = 0
    failed: int = 0


class TrainingJobStatus(ApiModel):
    """What Phalanx observed and decided about the job."""

    nul_bytes_allowed = True  # observed free text: it may quote a program's output

    phase: Phase = Phase.PENDING
    reason: str = ""
    message: str = ""
    conditions: list[Condition] = Field(default_factory=list)
    replica_statuses: dict[str, RoleStatus] = Field(default_factory=dict)
    placements: dict[str, ReplicaPlacement] = Field(default_factory=dict)
    restarts: int = 0
    attempt: int = 0
    next_retry_time: datetime | None = None
    admitted_time: datetime | None = None
    start_time: datetime | None = None
    completion_time: datetime | None = None
    observed_generation: int = 0
    metrics: dict[str, float] = Field(default_factory=dict)
    artifacts: str | None = None
    endpoints: dict[str, str] = Field(
        default_factory=dict, description="replica name -> host:port for rendezvous (embedded runtime)"
    )


class TrainingJob(ApiModel):
    """A distributed training job."""

    api_version: Literal["phalanx.dev/v1alpha1"] = "phalanx.dev/v1alpha1"
    kind: Literal["TrainingJob"] = "TrainingJob"
    metadata: ObjectMeta
    spec: TrainingJobSpec
    status: TrainingJobStatus = Field(default_factory=TrainingJobStatus)

    @property
    def key(self) -> str:
        """``namespace/name``, unique among jobs."""
        return f"{self.metadata.namespace}/{self.metadata.name}"
