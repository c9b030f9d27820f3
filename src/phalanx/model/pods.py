"""Pod fields of a replica template: volumes, env sources, node selection, security, extra containers.

What a Kubernetes PodTemplateSpec carries beyond command, image and resources, typed so that a misspelt or
misplaced key is refused with its path, as everywhere in the model (``docs/pod-fields.md``). The shapes and wire
names are Kubernetes' own (``core/v1``), reduced to what is listed here: a field Kubernetes has and this module
does not (an ``nfs`` volume, ``resourceFieldRef``) is an unknown field, refused by name, never dropped.

Where the fields mean something: on Kubernetes every one of them is copied into the replica's Pod
(``adapters.kubernetes.rendering``), and the Phalanx scheduler reads ``nodeSelector``, the required node affinity
and ``tolerations`` (``core.scheduling.node_fit``). The embedded runtime has no Pods: ``EMBEDDED_REFUSALS`` says,
per field, why it cannot be honoured there, and the one validation door refuses a job that sets one, naming the
field's path (``refused_pod_fields``).

Invariants checked here, because the API server would only refuse the Pod later, when the job already runs:
volume names are DNS labels, distinct, and not Phalanx's own; every volume mount names a volume of the template;
no mount path is under the paths Phalanx mounts itself (``RESERVED_MOUNT_ROOTS``); an env source has exactly one
kind; a ``fieldRef`` names a field Kubernetes can expose; container names are distinct.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from phalanx.model.base import ApiModel
from phalanx.model.bounds import MAX_INIT_CONTAINERS, MAX_POD_LIST_ITEMS, MAX_POD_MAP_ENTRIES
from phalanx.model.errors import FieldError
from phalanx.model.names import check_dns_label

if TYPE_CHECKING:
    from phalanx.model.jobs import TrainingJob

#: Volume names Phalanx gives its own volumes in a replica's Pod (``adapters.kubernetes.rendering``).
RESERVED_VOLUME_NAMES = frozenset({"outputs", "hostfile", "samples", "ssh-auth"})
RESERVED_VOLUME_PREFIX = "dataset-"
#: Where Phalanx mounts its own volumes (outputs, the MPI hostfile, dataset and sample caches): no user mount
#: may be at or under these, or the API server refuses the Pod (two mounts at one path) or one hides the other.
RESERVED_MOUNT_ROOTS = ("/phalanx", "/etc/phalanx", "/var/cache/phalanx")
#: The name of the replica's own container: init containers and sidecars need others.
REPLICA_CONTAINER = "replica"

#: The ``fieldRef.fieldPath`` values Kubernetes can put in a container's environment.
_FIELD_PATH = re.compile(
    r"metadata\.(name|namespace|uid)|metadata\.(labels|annotations)\['[^']+'\]"
    r"|spec\.(nodeName|serviceAccountName)|status\.(hostIP|hostIPs|podIP|podIPs)"
)
_QUANTITY = r"^\s*([0-9]+(\.[0-9]*)?|\.[0-9]+)\s*([KMGTP]i|[kKMGTP]|m)?\s*$"


def _items() -> Any:
    """A list field: empty by default, at most ``MAX_POD_LIST_ITEMS`` items."""
    return Field(default_factory=list, max_length=MAX_POD_LIST_ITEMS)


def _dns_label(what: str) -> AfterValidator:
    return AfterValidator(lambda value: check_dns_label(value, what))


def _absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"must be an absolute path (start with '/'), got {value!r}")
    return value


AbsolutePath = Annotated[str, AfterValidator(_absolute)]
Quantity = Annotated[str, Field(pattern=_QUANTITY)]


class LocalObjectReference(ApiModel):
    """An object of the job's namespace, by name (an image pull Secret)."""

    name: Annotated[str, Field(min_length=1, max_length=253)]


# -- environment ---------------------------------------------------------------------------------------------


#: An object's name (a DNS-1123 subdomain) and a Secret's or ConfigMap's key, as Kubernetes allows them; on the
#: embedded runtime both become path components, so nothing else may pass (no '/', no '..').
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]


def _not_dots(value: str) -> str:
    if value in (".", ".."):
        raise ValueError(f"{value!r} is not a key; use letters, digits, '-', '_' and '.'")
    return value


DataKey = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$"), AfterValidator(_not_dots)]


class KeySelector(ApiModel):
    """One key of a Secret or ConfigMap of the job's namespace."""

    name: ObjectName
    key: DataKey
    optional: bool | None = None


class ObjectFieldSelector(ApiModel):
    """A field of the replica's own Pod (its name, namespace, labels, node...)."""

    field_path: str
    api_version: str | None = None

    @field_validator("field_path")
    @classmethod
    def _known(cls, value: str) -> str:
        if not _FIELD_PATH.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a field Kubernetes puts in the environment; use metadata.name, "
                "metadata.namespace, metadata.uid, metadata.labels['KEY'], metadata.annotations['KEY'], "
                "spec.nodeName, spec.serviceAccountName, status.hostIP or status.podIP"
            )
        return value


class EnvVarSource(ApiModel):
    """Where an environment variable's value comes from: exactly one of a Secret, a ConfigMap or the Pod."""

    secret_key_ref: KeySelector | None = None
    config_map_key_ref: KeySelector | None = None
    field_ref: ObjectFieldSelector | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvVarSource:
        given = [name for name, value in self.kind_items() if value is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of secretKeyRef, configMapKeyRef or fieldRef, got {', '.join(given) or 'none'}"
            )
        return self

    @property
    def kind(self) -> str:
        """The wire name of the source's kind (``secretKeyRef``...)."""
        return next(name for name, value in self.kind_items() if value is not None)

    def kind_items(self) -> Iterator[tuple[str, object]]:
        """(wire name, value) of each kind of source."""
        yield "secretKeyRef", self.secret_key_ref
        yield "configMapKeyRef", self.config_map_key_ref
        yield "fieldRef", self.field_ref


class NamedReference(ApiModel):
    """A whole Secret or ConfigMap, by name."""

    name: ObjectName
    optional: bool | None = None


class EnvFromSource(ApiModel):
    """Every key of a ConfigMap or Secret as an environment variable, each name prefixed with ``prefix``."""

    prefix: str | None = None
    config_map_ref: NamedReference | None = None
    secret_ref: NamedReference | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvFromSource:
        if (self.config_map_ref is None) == (self.secret_ref is None):
            raise ValueError("give exactly one of configMapRef or secretRef")
        return self


class EnvVar(ApiModel):
    """An environment variable of an init container or sidecar, as Kubernetes writes it."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    value: str | None = None
    value_from: EnvVarSource | None = None

    @model_validator(mode="after")
    def _value_or_source(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError("valueFrom: give either value or valueFrom, not both")
        return self


# -- volumes -------------------------------------------------------------------------------------------------


class KeyToPath(ApiModel):
    """One key of a ConfigMap or Secret volume, as a file at ``path`` inside the volume."""

    key: Annotated[str, Field(min_length=1)]
    path: str
    mode: int | None = Field(default=None, ge=0, le=0o777)

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        _check_relative(value)
        return value


class PersistentVolumeClaimSource(ApiModel):
    """A PersistentVolumeClaim of the job's namespace."""

    claim_name: Annotated[str, Field(min_length=1, max_length=253)]
    read_only: bool | None = None


class HostPathSource(ApiModel):
    """A directory or file of the node."""

    path: AbsolutePath
    type: (
        Literal["", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice"]
        | None
    ) = None


class EmptyDirSource(ApiModel):
    """A directory that lives as long as the replica; ``medium: Memory`` keeps it in RAM (``/dev/shm``)."""

    medium: Literal["", "Memory"] | None = None
    size_limit: Quantity | None = None


class ConfigMapSource(ApiModel):
    """A ConfigMap's keys as files."""

    name: Annotated[str, Field(min_length=1, max_length=253)]
    items: list[KeyToPath] = _items()
    default_mode: int | None = Field(default=None, ge=0, le=0o777)
    optional: bool | None = None


class SecretSource(ApiModel):
    """A Secret's keys as files."""

    secret_name: Annotated[str, Field(min_length=1, max_length=253)]
    items: list[KeyToPath] = _items()
    default_mode: int | None = Field(default=None, ge=0, le=0o777)
    optional: bool | None = None


class Volume(ApiModel):
    """A volume the replica's containers may mount: exactly one source."""

    name: Annotated[str, _dns_label("volume name")]
    persistent_volume_claim: PersistentVolumeClaimSource | None = None
    host_path: HostPathSource | None = None
    empty_dir: EmptyDirSource | None = None
    config_map: ConfigMapSource | None = None
    secret: SecretSource | None = None

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_VOLUME_NAMES or value.startswith(RESERVED_VOLUME_PREFIX):
            raise ValueError(
                f"{value!r} is the name of one of Phalanx's own volumes (outputs, hostfile, samples, ssh-auth, "
                "dataset-N); choose another"
            )
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> Volume:
        given = [wire for wire, value in self.sources() if value is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of persistentVolumeClaim, hostPath, emptyDir, configMap or secret, got "
                f"{', '.join(given) or 'none'}"
            )
        return self

    def sources(self) -> Iterator[tuple[str, ApiModel | None]]:
        """(wire name, value) of each kind of source."""
        yield "persistentVolumeClaim", self.persistent_volume_claim
        yield "hostPath", self.host_path
        yield "emptyDir", self.empty_dir
        yield "configMap", self.config_map
        yield "secret", self.secret

    @property
    def source(self) -> str:
        """The wire name of the volume's source (``hostPath``...)."""
        return next(wire for wire, value in self.sources() if value is not None)


def _check_relative(value: str) -> None:
    if not value or value.startswith("/") or ".." in value.split("/"):
        raise ValueError(f"must be a relative path without '..', got {value!r}")


def not_phalanx_mount(value: str) -> str:
    """Refuse a mount path at or under one of ``RESERVED_MOUNT_ROOTS``.

    Raises:
        ValueError: naming the root and where to mount instead.

    """
    normal = posixpath.normpath(value)
    for root in RESERVED_MOUNT_ROOTS:
        if normal == root or normal.startswith(root + "/"):
            raise ValueError(
                f"{value!r} is under {root}, where Phalanx mounts its own volumes (outputs, MPI hostfile, "
                "dataset caches); mount elsewhere, e.g. /data"
            )
    return value


class VolumeMount(ApiModel):
    """Where a volume of the template appears in a container."""

    name: str
    mount_path: AbsolutePath
    read_only: bool | None = None
    sub_path: str | None = None

    @field_validator("mount_path")
    @classmethod
    def _not_phalanx(cls, value: str) -> str:
        return not_phalanx_mount(value)

    @field_validator("sub_path")
    @classmethod
    def _relative(cls, value: str | None) -> str | None:
        if value is not None:
            _check_relative(value)
        return value


# -- node selection ------------------------------------------------------------------------------------------


class Toleration(ApiModel):
    """A taint the replica tolerates (Kubernetes' rules: ``Exists`` has no value; an empty key needs ``Exists``)."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, ge=0, le=10**9)

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("value: must be empty when operator is Exists")
        if not self.key and self.operator != "Exists":
            raise ValueError("operator: must be Exists when key is empty (tolerate every taint)")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds: only with effect NoExecute")
        return self


class NodeSelectorRequirement(ApiModel):
    """A node label (or field) compared with values."""

    key: Annotated[str, Field(min_length=1)]
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = _items()


class NodeSelectorTerm(ApiModel):
    """Requirements that must all hold."""

    match_expressions: list[NodeSelectorRequirement] = _items()
    match_fields: list[NodeSelectorRequirement] = _items()


class NodeSelector(ApiModel):
    """Terms of which one must hold."""

    node_selector_terms: list[NodeSelectorTerm] = Field(min_length=1, max_length=MAX_POD_LIST_ITEMS)


class PreferredSchedulingTerm(ApiModel):
    """A term the scheduler prefers, with a weight."""

    weight: int = Field(ge=1, le=100)
    preference: NodeSelectorTerm


class NodeAffinity(ApiModel):
    """Which nodes the replica must or should run on."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = _items()


class LabelSelectorRequirement(ApiModel):
    """A label compared with values."""

    key: Annotated[str, Field(min_length=1)]
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = _items()


class LabelSelector(ApiModel):
    """Labels that must match."""

    match_labels: dict[str, str] = Field(default_factory=dict, max_length=MAX_POD_MAP_ENTRIES)
    match_expressions: list[LabelSelectorRequirement] = _items()


class PodAffinityTerm(ApiModel):
    """Pods matching ``labelSelector`` in the same ``topologyKey`` domain."""

    label_selector: LabelSelector | None = None
    namespaces: list[str] = _items()
    namespace_selector: LabelSelector | None = None
    topology_key: Annotated[str, Field(min_length=1)]


class WeightedPodAffinityTerm(ApiModel):
    """A pod affinity term the scheduler prefers, with a weight."""

    weight: int = Field(ge=1, le=100)
    pod_affinity_term: PodAffinityTerm


class PodAffinity(ApiModel):
    """Near (affinity) or away from (anti-affinity) other Pods."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = _items()
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = _items()


class Affinity(ApiModel):
    """Node affinity, pod affinity and pod anti-affinity."""

    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


# -- security ------------------------------------------------------------------------------------------------

UserId = Annotated[int, Field(ge=0, le=2**31 - 1)]


class SeccompProfile(ApiModel):
    """The seccomp profile of a container or Pod."""

    type: Literal["RuntimeDefault", "Unconfined", "Localhost"]
    localhost_profile: str | None = None


class Capabilities(ApiModel):
    """Linux capabilities added and dropped."""

    add: list[str] = _items()
    drop: list[str] = _items()


class PodSecurityContext(ApiModel):
    """The Pod's security settings (``spec.securityContext``)."""

    run_as_user: UserId | None = None
    run_as_group: UserId | None = None
    run_as_non_root: bool | None = None
    fs_group: UserId | None = None
    supplemental_groups: list[UserId] = _items()
    seccomp_profile: SeccompProfile | None = None


class SecurityContext(ApiModel):
    """A container's security settings (``containers[].securityContext``)."""

    run_as_user: UserId | None = None
    run_as_group: UserId | None = None
    run_as_non_root: bool | None = None
    privileged: bool | None = None
    allow_privilege_escalation: bool | None = None
    read_only_root_filesystem: bool | None = None
    capabilities: Capabilities | None = None
    seccomp_profile: SeccompProfile | None = None


# -- probes and image pulls ----------------------------------------------------------------------------------

#: When the kubelet pulls the replica's image (Kubernetes' own values; its default depends on the image's tag).
ImagePullPolicy = Literal["Always", "IfNotPresent", "Never"]
#: A port, by number or by the name of a container port.
PortRef = Annotated[int, Field(ge=1, le=65535)] | Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]


class ExecAction(ApiModel):
    """A command run in the container; exit 0 is success."""

    command: list[str] = Field(min_length=1, max_length=MAX_POD_LIST_ITEMS)


class HttpHeader(ApiModel):
    """A header of an HTTP probe."""

    name: Annotated[str, Field(min_length=1)]
    value: str


class HttpGetAction(ApiModel):
    """An HTTP GET on the container; a status from 200 to 399 is success."""

    path: str | None = None
    port: PortRef
    host: str | None = None
    scheme: Literal["HTTP", "HTTPS"] | None = None
    http_headers: list[HttpHeader] = _items()


class TcpSocketAction(ApiModel):
    """A TCP connection to the container; an open port is success."""

    port: PortRef
    host: str | None = None


class GrpcAction(ApiModel):
    """A gRPC health check on the container."""

    port: Annotated[int, Field(ge=1, le=65535)]
    service: str | None = None


class Probe(ApiModel):
    """A check the kubelet runs on the replica's container (liveness, readiness or startup): exactly one action."""

    exec: ExecAction | None = None
    http_get: HttpGetAction | None = None
    tcp_socket: TcpSocketAction | None = None
    grpc: GrpcAction | None = None
    initial_delay_seconds: int | None = Field(default=None, ge=0, le=10**9)
    timeout_seconds: int | None = Field(default=None, ge=1, le=10**9)
    period_seconds: int | None = Field(default=None, ge=1, le=10**9)
    success_threshold: int | None = Field(default=None, ge=1, le=10**9)
    failure_threshold: int | None = Field(default=None, ge=1, le=10**9)
    termination_grace_period_seconds: int | None = Field(default=None, ge=1, le=10**9)

    @model_validator(mode="after")
    def _exactly_one(self) -> Probe:
        actions = {"exec": self.exec, "httpGet": self.http_get, "tcpSocket": self.tcp_socket, "grpc": self.grpc}
        given = [name for name, value in actions.items() if value is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of exec, httpGet, tcpSocket or grpc, got {', '.join(given) or 'none'}")
        return self


# -- extra containers ----------------------------------------------------------------------------------------


class ContainerResources(ApiModel):
    """Requests and limits of an init container or sidecar, in Kubernetes' quantities (``cpu: 100m``)."""

    requests: dict[str, Quantity] = Field(default_factory=dict, max_length=MAX_POD_MAP_ENTRIES)
    limits: dict[str, Quantity] = Field(default_factory=dict, max_length=MAX_POD_MAP_ENTRIES)


class Container(ApiModel):
    """An init container or a sidecar: runs in the replica's Pod beside the replica's own container."""

    name: Annotated[str, _dns_label("container name")]
    image: str | None = Field(default=None, description="default: the replica's image")
    image_pull_policy: ImagePullPolicy | None = None
    command: list[str] = _items()
    args: list[str] = _items()
    working_dir: str | None = None
    env: list[EnvVar] = _items()
    env_from: list[EnvFromSource] = _items()
    volume_mounts: list[VolumeMount] = _items()
    resources: ContainerResources | None = None
    security_context: SecurityContext | None = None

    @field_validator("name")
    @classmethod
    def _not_replica(cls, value: str) -> str:
        if value == REPLICA_CONTAINER:
            raise ValueError(f"{REPLICA_CONTAINER!r} is the replica's own container; choose another name")
        return value


class PodFields(ApiModel):
    """The Pod fields of a replica template (mixed into ``ReplicaTemplate``); all empty by default."""

    volumes: list[Volume] = _items()
    volume_mounts: list[VolumeMount] = _items()
    env_value_from: dict[str, EnvVarSource] = Field(
        default_factory=dict,
        max_length=MAX_POD_MAP_ENTRIES,
        description="env variables whose value comes from a Secret, a ConfigMap or the Pod; written as env "
        "entries with valueFrom, kept here",
    )
    env_from: list[EnvFromSource] = _items()
    node_selector: dict[str, str] = Field(default_factory=dict, max_length=MAX_POD_MAP_ENTRIES)
    tolerations: list[Toleration] = _items()
    affinity: Affinity | None = None
    security_context: PodSecurityContext | None = None
    container_security_context: SecurityContext | None = None
    image_pull_policy: ImagePullPolicy | None = Field(
        default=None, description="when Kubernetes pulls the replica's image; the embedded runtime uses no image"
    )
    liveness_probe: Probe | None = None
    readiness_probe: Probe | None = None
    startup_probe: Probe | None = None
    service_account_name: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    image_pull_secrets: list[LocalObjectReference] = _items()
    priority_class_name: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    init_containers: list[Container] = Field(default_factory=list, max_length=MAX_INIT_CONTAINERS)
    sidecars: list[Container] = Field(
        default_factory=list,
        max_length=MAX_INIT_CONTAINERS,
        description="containers that run beside the replica and stop when it ends (Kubernetes native sidecars)",
    )

    @model_serializer(mode="wrap")
    def _without_empty_pod_fields(self, handler: SerializerFunctionWrapHandler) -> Any:
        # An unset pod field is empty: leave it out, so a template that sets none is written as it always was.
        data = handler(self)
        if isinstance(data, dict):
            for name, info in PodFields.model_fields.items():
                for key in (name, info.alias):
                    if key in data and data[key] in ([], {}):
                        del data[key]
        return data

    @model_validator(mode="after")
    def _consistent(self) -> PodFields:
        names = [volume.name for volume in self.volumes]
        problems: list[str] = []
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            problems.append(f"volumes: volume {repeated[0]!r} is listed twice; give each volume its own name")
        mounts = [("volumeMounts", self.volume_mounts)]
        mounts += [(f"initContainers[{i}].volumeMounts", c.volume_mounts) for i, c in enumerate(self.init_containers)]
        mounts += [(f"sidecars[{i}].volumeMounts", c.volume_mounts) for i, c in enumerate(self.sidecars)]
        for where, items in mounts:
            for position, mount in enumerate(items):
                if mount.name not in names:
                    known = ", ".join(names) or "none"
                    problems.append(
                        f"{where}[{position}].name: no volume {mount.name!r} in this template's volumes ({known}); "
                        "add it to volumes or fix the name"
                    )
            paths = [posixpath.normpath(mount.mount_path) for mount in items]
            twice = sorted({path for path in paths if paths.count(path) > 1})
            if twice:
                problems.append(f"{where}: two mounts at {twice[0]}; give each its own mountPath")
        containers = [c.name for c in (*self.init_containers, *self.sidecars)]
        twice = sorted({name for name in containers if containers.count(name) > 1})
        if twice:
            problems.append(f"initContainers: container {twice[0]!r} is named twice; give each its own name")
        if problems:
            raise ValueError(problems[0])
        return self


#: Why each pod field cannot be honoured by the embedded runtime, which runs replicas as processes of the host.
#: ``nodeSelector`` and ``tolerations`` are not here: the scheduler reads them against the labels and taints of
#: the runtime's nodes (``core.scheduling.node_fit``; an inventory's nodes may have both).
EMBEDDED_REFUSALS: dict[str, str] = {
    # Volumes: a mount is kept only where the host already shows the volume at its mountPath (``_on_the_host``).
    "volumeMounts.host": "the embedded runtime runs replicas as host processes without a mount namespace, so a "
    "volume appears only where the host has it: a hostPath mounted at its own path, or emptyDir medium Memory at "
    "/dev/shm; read other host directories by their own path, or use a Dataset",
    # env valueFrom: by kind of source (and, for fieldRef, by field). Secrets and ConfigMaps are files of the state
    # directory (services.embedded.layout), a replica's own metadata is known: only these have no meaning here.
    "envValueFrom.fieldRef.metadata.uid": "an embedded replica has no Pod uid; use PHALANX_JOB_UID",
    "envValueFrom.fieldRef.spec.serviceAccountName": "the embedded runtime has no service accounts; remove it",
    "affinity": "the embedded runtime has no Pods for pod affinity and reads node labels through nodeSelector; "
    "use nodeSelector",
    "securityContext": "the embedded runtime runs replicas as the user of the control plane; remove it",
    "containerSecurityContext": "the embedded runtime runs replicas as the user of the control plane; remove it",
    "serviceAccountName": "the embedded runtime has no service accounts; remove it",
    "priorityClassName": "the embedded runtime has no PriorityClasses; use spec.scheduling.priorityClass",
    "initContainers": "the embedded runtime runs one process per replica; run setup steps in its command",
    "sidecars": "the embedded runtime runs one process per replica; start helpers from its command",
    "livenessProbe": "the embedded runtime has no kubelet to probe a replica; remove it (it applies on Kubernetes)",
    "readinessProbe": "the embedded runtime has no kubelet to probe a replica, and nothing waits for a replica to "
    "be ready; remove it (it applies on Kubernetes)",
    "startupProbe": "the embedded runtime has no kubelet to probe a replica; remove it (it applies on Kubernetes)",
    # Not a pod field: a replica without a command runs its image's entrypoint, and the embedded runtime runs no
    # images. ``{image}`` is the replica's image.
    "command": "no command: on Kubernetes the image's entrypoint runs, and the embedded runtime runs no images; "
    "give the container a command, or play {image} with a local program: phalanx run --stand-in "
    "{image}=PROGRAM FILE (docs/kubeflow.md#running-upstream-examples-on-your-machine)",
}


def set_pod_fields(fields: PodFields) -> list[str]:
    """The wire names of the pod fields ``fields`` sets (not empty, not None), in declaration order."""
    found = []
    for name, info in PodFields.model_fields.items():
        value = getattr(fields, name)
        if value not in (None, [], {}):
            found.append(info.alias or name)
    return found


def refused_pod_fields(job: TrainingJob, refusals: Mapping[str, str]) -> list[FieldError]:
    """One error per pod field a replica template of ``job`` sets and the backend refuses (``refusals``: why).

    Also for a field the job's JobType gave the template: the job cannot run as written on this backend either way.
    """
    errors: list[FieldError] = []
    for role, replica in job.spec.replicas.items():
        path = f"spec.replicas.{role}.template"
        if "command" in refusals and not replica.template.command:
            image = replica.template.image or "IMAGE"
            errors.append(FieldError(f"{path}.command", refusals["command"].format(image=image)))
        for wire in set_pod_fields(replica.template):
            if wire in refusals:
                errors.append(FieldError(f"{path}.{wire}", refusals[wire]))
        if "volumeMounts.host" in refusals:
            volumes = {volume.name: volume for volume in replica.template.volumes}
            for position, mount in enumerate(replica.template.volume_mounts):
                problem = _on_the_host(volumes[mount.name], mount)
                if problem:
                    where = f"{path}.volumeMounts[{position}]"
                    errors.append(FieldError(where, f"{problem}: {refusals['volumeMounts.host']}"))
        for name, source in replica.template.env_value_from.items():
            why = refusals.get(f"envValueFrom.{source.kind}")
            if source.field_ref is not None:
                why = why or refusals.get(f"envValueFrom.fieldRef.{source.field_ref.field_path}")
            if why:  # written as an env entry: named as written
                errors.append(FieldError(f"{path}.env.{name}.valueFrom.{source.kind}", why))
    return errors


def _on_the_host(volume: Volume, mount: VolumeMount) -> str | None:
    """Why a host process would not see ``volume`` at ``mount`` as a Pod would, or None when it does.

    A hostPath mounted at its own path is the host's directory, where the process finds it anyway. An emptyDir of
    medium Memory at /dev/shm is the host's shared memory (shared by the machine's processes, not emptied per
    replica). Nothing else can be honoured, nor what would need enforcing: readOnly, subPath, a hostPath type
    check, a sizeLimit.
    """
    target = posixpath.normpath(mount.mount_path)
    if mount.read_only:
        return "readOnly cannot be enforced on a host process"
    if mount.sub_path is not None:
        return "subPath cannot be mounted"
    if volume.host_path is not None:
        if volume.host_path.type:
            return f"hostPath type {volume.host_path.type} is not checked"
        if posixpath.normpath(volume.host_path.path) != target:
            return f"hostPath {volume.host_path.path} cannot appear at {mount.mount_path} (mount it at its own path)"
        return None
    if volume.empty_dir is not None and volume.empty_dir.medium == "Memory" and target == "/dev/shm":  # nosec B108  # a mount path compared, not a file written
        return "sizeLimit cannot be enforced" if volume.empty_dir.size_limit else None
    return f"a {volume.source} volume cannot appear at {mount.mount_path}"


#: What an embedded replica's ``fieldRef`` reads: its own name and namespace, labels and annotations (the
#: template's, then Phalanx's own, as on its Pod), its node, and its address (every embedded address is local).
LOCAL_ADDRESS = "127.0.0.1"
_LABEL_OR_ANNOTATION = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


def field_ref_env(
    sources: Mapping[str, EnvVarSource],
    *,
    name: str,
    namespace: str,
    node: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
) -> dict[str, str]:
    """The values of the ``fieldRef`` sources among ``sources``, for a replica run outside Kubernetes.

    A label or annotation the replica does not have is the empty string, as Kubernetes gives it. Sources of
    another kind, and fields ``EMBEDDED_REFUSALS`` names, are not here: the validation door refused them.
    """
    plain = {
        "metadata.name": name,
        "metadata.namespace": namespace,
        "spec.nodeName": node,
        "status.hostIP": LOCAL_ADDRESS,
        "status.hostIPs": LOCAL_ADDRESS,
        "status.podIP": LOCAL_ADDRESS,
        "status.podIPs": LOCAL_ADDRESS,
    }
    values = {}
    for variable, source in sources.items():
        if source.field_ref is None:
            continue
        path = source.field_ref.field_path
        found = _LABEL_OR_ANNOTATION.fullmatch(path)
        if found:
            values[variable] = (labels if found.group(1) == "labels" else annotations).get(found.group(2), "")
        elif path in plain:
            values[variable] = plain[path]
    return values
