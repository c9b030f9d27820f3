"""Rendering a TrainingJob into the Kubernetes objects that run it: Pods, a headless Service, a hostfile ConfigMap.

Pure functions from a validated, defaulted job (``model.validation.validate_job``) and its JobType to plain
dicts, ready to POST; no I/O. The operator (issue 3) decides *when* to create what; this module only decides
*what*.

Decisions:
    - **Names.** A Pod is named like a Replica of the embedded runtime, ``<job>-<role>-<index>``
      (``model.replicas.replica_name``), the same across attempts, so two copies of one replica cannot exist at
      once. The headless Service is named after the job; every Pod sets ``hostname`` (its own name) and
      ``subdomain`` (the Service), so each replica has the stable DNS name ``<pod>.<job>.<namespace>.svc``.
    - **No Service for one replica** (``needs_service``). The Service exists so that replicas find each other;
      a job of a single replica has nobody to find, so it gets none, its Pod sets neither ``hostname`` nor
      ``subdomain``, and its own address in the environment is its Pod's name: the Pod's hostname, which the
      kubelet writes into the Pod's ``/etc/hosts``. That spares the API server the Service and the
      EndpointSlice and Endpoints kube-controller-manager would keep for it, a third of what a one-Pod job
      costs it.
    - **Rendezvous.** The environment comes from ``core.rendezvous.render_replica_env``, the same templates as
      the embedded runtime, with an address book of DNS names and the JobType's port. Every replica of the spec
      is in it: Pods get DNS names before they are placed, so there is no "running subset" as there is for a
      job admitted with ``minAvailable`` on the embedded runtime (``dns_addresses`` is the one place to change
      when the operator learns to start fewer replicas than the spec names).
    - **Node-local values.** Placement is not known at render time, so every replica is rendered as if on a
      node of its own (``node_of`` maps each replica to itself): ``LOCAL_RANK`` is 0, ``LOCAL_WORLD_SIZE`` 1,
      ``GROUP_RANK``/``node_rank`` equals the replica's rank and ``num_nodes`` the world size. That is right for
      one process per Pod with its own GPUs (a container numbers its GPUs from 0), which is how Phalanx runs
      replicas; it is *not* the embedded runtime's "replicas sharing a host" numbering, and a framework that
      uses node rank to group Pods on one machine sees every Pod as its own machine.
    - **Restarts.** ``restartPolicy: Never``: Phalanx's reconciler decides retries (backoff, gang restarts) and
      creates a new Pod, with a new ``phalanx.dev/attempt`` label.
    - **Resources.** Requests are what Phalanx reserved (``resources.cpu``, ``memory``, ``gpu``), limits the
      ceiling (``resources.limits``, else the same amounts: a predictable, Guaranteed-class Pod when every
      resource is set, the only kind given exclusive CPUs): cpu in Kubernetes' form (``"2"``, ``"500m"``),
      memory in bytes, whole GPUs as ``nvidia.com/gpu``, equal in both. A
      share of a GPU (``gpuMilli``) has no extended resource: it is annotated ``phalanx.dev/gpu-milli`` for
      Phalanx's scheduler and node agent.
    - **Placement.** The operator passes the scheduler's placement (``status.placements``): it is copied into
      annotations (``phalanx.dev/node``, ``phalanx.dev/gpus``, ``phalanx.dev/cpus``, ``phalanx.dev/gpu-milli``)
      for the node agent and for people, and not into ``nodeName``: the phalanx-scheduler binds the Pod once its
      whole gang exists. A gang of one has nothing to wait for: the operator asks for its Pod to be created on
      its node (``bind``), which spares the API server the binding, a write per Pod.
    - **Placed by the cluster's scheduler** (``core.delegation``: ``spec.scheduling.schedulerName`` or the
      operator's default names another scheduler than Phalanx's). The Pods name that scheduler and their gang,
      ``spec.schedulingGroup.podGroupName``: the job's PodGroup (``render_pod_group``, ``scheduling.k8s.io/
      v1alpha2``, named after the job, owned by it, ``minCount`` = ``minAvailable`` or every replica), which
      kube-scheduler's alpha gang scheduling reads: it binds none of the group's Pods until ``minCount`` of them
      exist and fit at once. Their placement has no node yet, so they carry no placement annotations and are
      never created bound.
    - **Files.** The MPI hostfile is a ConfigMap (``<job>-hostfile``) mounted read-only at ``/etc/phalanx``
      when the JobType has ``hostfileRoles``. Outputs go to ``/phalanx/<outputs.path>`` (``PHALANX_OUTPUT_DIR``):
      with the operator's artifact store on a PersistentVolumeClaim (``outputs_claim``), a ``subPath`` of that
      claim, ``_outputs/<namespace>/<job>/<job uid>`` (``outputs_sub_path``), one folder every replica and attempt
      of the job shares, as on the embedded runtime, which the operator stores from once the job succeeded
      (``services.kubernetes.outputs``); without one an ``emptyDir`` per Pod, whose files go with the Pod.
    - **SSH keys** (``spec.sshKeys``, an MPIJob's ``sshAuthMountPath``): a key pair in a Secret of type
      ``kubernetes.io/ssh-auth`` (``<job>-ssh-<uid prefix>``, owned by the job, made by the operator with the
      Pods: ``adapters.kubernetes.sshkeys``), mounted read-only in every Pod at ``sshKeys.mountPath`` as
      ``id_rsa``, ``id_rsa.pub`` and ``authorized_keys``, so the launcher's ``mpirun`` logs in to the workers'
      SSH servers. Pods of a JobType whose hostfile is Hydra's (Intel MPI, MPICH) also search the job's Service
      domain, so that a worker resolves the launcher's short host name, which Hydra's proxies call back.
    - **Datasets.** What a replica reads of its datasets (``DatasetVolumes``, decided by the operator from the
      staging plan) is one read-only ``hostPath`` volume per node-cache entry (``dataset-0``, ``dataset-1``…,
      type ``Directory``: the node agent made it before the Pod was created) and the ``PHALANX_DATASET_*``
      variables that point at it. One volume per entry rather than the whole cache directory: a Pod sees
      the data it reads and not the rest of the node's cache, which holds other namespaces' datasets. The
      in-job sample cache (``phalanx.data.SampleCache.for_dataset``) is one writable ``hostPath`` volume,
      ``samples``, of the node agent's sample directory for the job's namespace, at ``/var/cache/phalanx/samples``
      (``PHALANX_SAMPLE_CACHE_DIR``): the replicas of a node share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from phalanx.adapters.kubernetes import dra
from phalanx.adapters.kubernetes.crds import VERSION
from phalanx.core.delegation import CLUSTER_PLACED, gang_min_count
from phalanx.core.rendezvous import Endpoint, RendezvousError, render_hostfile, render_replica_env, replica_names
from phalanx.model.base import API_GROUP, ApiModel
from phalanx.model.jobs import DEFAULT_SSH_MOUNT_PATH, ReplicaPlacement, ReplicaTemplate, SshKeys, TrainingJob
from phalanx.model.jobtypes import JobType, job_ssh_keys
from phalanx.model.meta import check_dns_label
from phalanx.model.pods import Container
from phalanx.model.replicas import replica_name
from phalanx.model.resources import ResourceVector, format_cpu

DEFAULT_SCHEDULER_NAME = "phalanx-scheduler"
#: The PodGroup of kube-scheduler's alpha gang scheduling in the pinned Kubernetes (``api.PODGROUPS``).
POD_GROUP_API_VERSION = "scheduling.k8s.io/v1alpha2"
LABEL_JOB = "phalanx.dev/job"
LABEL_ROLE = "phalanx.dev/role"
LABEL_INDEX = "phalanx.dev/replica-index"
LABEL_ATTEMPT = "phalanx.dev/attempt"
ANNOTATION_JOB_UID = "phalanx.dev/job-uid"
ANNOTATION_RANK = "phalanx.dev/rank"
ANNOTATION_GPU_MILLI = "phalanx.dev/gpu-milli"
ANNOTATION_GPU_MODEL = "phalanx.dev/gpu-model"
ANNOTATION_NODE = "phalanx.dev/node"
ANNOTATION_GPUS = "phalanx.dev/gpus"
ANNOTATION_CPUS = "phalanx.dev/cpus"
GPU_RESOURCE = "nvidia.com/gpu"
CONTAINER_NAME = "replica"
PORT_NAME = "rendezvous"
HOSTFILE_DIR = "/etc/phalanx"
HOSTFILE_KEY = "hostfile"
HOSTFILE_VOLUME = "hostfile"
OUTPUTS_ROOT = "/phalanx"
OUTPUTS_VOLUME = "outputs"
DATASET_VOLUME = "dataset"
#: Where replicas see their datasets' cache entries, and where node agents keep the cache on the host, by default.
DATASET_MOUNT_PATH = "/var/cache/phalanx/datasets"
#: Where replicas see the sample cache their node shares, and where node agents keep sample caches on the host.
SAMPLE_MOUNT_PATH = "/var/cache/phalanx/samples"
SAMPLES_VOLUME = "samples"
SSH_VOLUME = "ssh-auth"
#: The keys of a job's SSH Secret (type ``kubernetes.io/ssh-auth``) and the files they become in the mount.
SSH_PRIVATE_KEY = "ssh-privatekey"
SSH_PUBLIC_KEY = "ssh-publickey"
SSH_FILES = ((SSH_PRIVATE_KEY, "id_rsa"), (SSH_PUBLIC_KEY, "id_rsa.pub"), (SSH_PUBLIC_KEY, "authorized_keys"))
#: The cluster's DNS domain in the search path a Hydra job's Pods get (mpi-operator assumes the same one).
CLUSTER_DOMAIN = "cluster.local"


@dataclass(frozen=True, slots=True)
class DatasetVolumes:
    """What one replica's Pod gets of its datasets.

    Its environment, read-only hostPath volumes as (host path, mount path), and the host directory of the sample
    cache it shares with its node (None: none).
    """

    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[tuple[str, str], ...] = ()
    samples: str | None = None


class RenderError(ValueError):
    """The job cannot be rendered into Kubernetes objects; the message names the field to fix."""


def owned_metadata(job: TrainingJob, name: str) -> dict[str, Any]:
    """The metadata of an object Phalanx makes for ``job`` (a Service, ConfigMap, Secret, PodGroup).

    Named ``name`` in the job's namespace, labelled with the job, and owned by it: deleting the job deletes it.
    """
    return {
        "name": name,
        "namespace": job.metadata.namespace,
        "labels": {LABEL_JOB: job.metadata.name, "app.kubernetes.io/managed-by": "phalanx"},
        "ownerReferences": [job_owner_reference(job)],
    }


def job_owner_reference(job: TrainingJob) -> dict[str, Any]:
    """The ownerReference that makes an object belong to the job: deleting the job garbage-collects it.

    Raises:
        RenderError: the job has no uid (it was not read back from the API server).

    """
    if not job.metadata.uid:
        raise RenderError(
            f"the job {job.metadata.name!r} has no metadata.uid: render objects for a job read from the API server"
        )
    return {
        "apiVersion": f"{API_GROUP}/{VERSION}",
        "kind": "TrainingJob",
        "name": job.metadata.name,
        "uid": job.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def service_name(job: TrainingJob) -> str:
    """The headless Service of a job: named after the job (and the Pods' ``subdomain``)."""
    return job.metadata.name


def hostfile_configmap_name(job: TrainingJob) -> str:
    """The ConfigMap holding a job's MPI hostfile."""
    return f"{job.metadata.name}-hostfile"


def ssh_secret_name(job: TrainingJob) -> str:
    """The Secret with the job's SSH key pair: named after the job and its uid.

    The uid makes a Secret left by an earlier job of the same name (until the garbage collector removes it) a
    different one: the operator only ever creates this Secret, and never needs to read a Secret.

    Raises:
        RenderError: the job has no uid.

    """
    uid = job_owner_reference(job)["uid"]
    return f"{job.metadata.name}-ssh-{uid[:8]}"


def gpu_claim_template(job: TrainingJob, role: str) -> str:
    """The ResourceClaimTemplate of a role's GPUs (``dra.claim_template_name``).

    Raises:
        RenderError: the job has no uid.

    """
    return dra.claim_template_name(job.metadata.name, role, job_owner_reference(job)["uid"])


def claims_gpus(job: TrainingJob, role: str, dra_driver: str | None) -> bool:
    """Whether the role's Pods claim their GPUs through DRA: with a driver, and whole GPUs to claim."""
    return dra_driver is not None and job.spec.replicas[role].template.resources.vector().gpu > 0


def render_gpu_claim_templates(job: TrainingJob, device_class: str) -> list[dict[str, Any]]:
    """One ResourceClaimTemplate per role with whole GPUs, each asking for that role's GPUs; owned by the job.

    Raises:
        RenderError: the job has no uid.

    """
    return [
        dra.render_claim_template(
            owned_metadata(job, gpu_claim_template(job, role)), spec.template.resources.vector().gpu, device_class
        )
        for role, spec in job.spec.replicas.items()
        if spec.template.resources.vector().gpu > 0
    ]


def needs_service(job: TrainingJob) -> bool:
    """Whether the job's Pods need the headless Service: only to find each other, so not for a single replica."""
    return sum(replica.count for replica in job.spec.replicas.values()) > 1


def replica_host(job: TrainingJob, name: str) -> str:
    """Where a replica's Pod is reached: its stable DNS name through the job's headless Service.

    A job without a Service (``needs_service``) has one replica, reached only by itself: its Pod's hostname.
    """
    if not needs_service(job):
        return name
    return f"{name}.{service_name(job)}.{job.metadata.namespace}.svc"


def dns_addresses(job: TrainingJob, jobtype: JobType) -> dict[str, Endpoint]:
    """The address book on Kubernetes: every replica of the spec, by DNS name, on the JobType's port."""
    return {name: Endpoint(replica_host(job, name), jobtype.spec.port) for _, _, name in replica_names(job, jobtype)}


def output_dir(job: TrainingJob) -> str:
    """Where replicas write outputs inside their container (``PHALANX_OUTPUT_DIR``)."""
    return f"{OUTPUTS_ROOT}/{job.spec.outputs.path.strip('/')}"


def outputs_sub_path(job: TrainingJob) -> str:
    """The folder of the artifact store's claim the job's replicas write their outputs to (a ``subPath``).

    Under ``_outputs`` (the store's own folders start with ``_``; a namespace never does), per job uid, so a job
    created again under the same name starts with an empty folder.

    Raises:
        RenderError: the job has no uid.

    """
    uid = job_owner_reference(job)["uid"]
    return f"_outputs/{job.metadata.namespace}/{job.metadata.name}/{uid}"


def render_pod(
    job: TrainingJob,
    jobtype: JobType,
    role: str,
    index: int,
    attempt: int,
    *,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
    image: str | None = None,
    placement: ReplicaPlacement | None = None,
    bind: bool = False,
    datasets: DatasetVolumes | None = None,
    pod_group: str | None = None,
    outputs_claim: str | None = None,
    dra_driver: str | None = None,
    dra_device_class: str = dra.DEFAULT_DEVICE_CLASS,
) -> dict[str, Any]:
    """Render the Pod of one replica, for one attempt.

    Args:
        job: the validated, defaulted job, read from the API server (it has a uid).
        jobtype: its JobType.
        role: the replica's role.
        index: the replica's index within its role.
        attempt: the attempt number (``status.attempt``); labelled, and in ``PHALANX_ATTEMPT``.
        scheduler_name: the scheduler that binds the Pod.
        image: the image for a replica whose template names none (e.g. the operator's default).
        placement: where the scheduler placed the replica (``status.placements``); annotated on the Pod.
        bind: create the Pod on its placement's node (``nodeName``) instead of leaving it to the scheduler to
            bind: only for a gang of one, whose Pod has no other Pod to wait for.
        datasets: the replica's staged datasets: their environment and read-only hostPath volumes.
        pod_group: the PodGroup the Pod belongs to (``spec.schedulingGroup``), for a job placed by the cluster's
            scheduler (``scheduler_name``) as one gang; None: Phalanx's scheduler places it.
        outputs_claim: the PersistentVolumeClaim of the operator's artifact store, whose ``outputs_sub_path``
            the replica writes its outputs to; None: an ``emptyDir``, not collected.
        dra_driver: GPUs through Dynamic Resource Allocation: a replica with whole GPUs gets a claim from its
            role's ResourceClaimTemplate (``gpu_claim_template``) instead of ``nvidia.com/gpu``, whose devices
            phalanx-scheduler allocates from this driver's slices; None: the device plugin's counted GPUs.
        dra_device_class: the DeviceClass the role's claim template asks for (annotated for the scheduler).

    Raises:
        RenderError: no image, no uid, a name that is not a DNS label, or a template that cannot be rendered.

    """
    if role not in job.spec.replicas or not 0 <= index < job.spec.replicas[role].count:
        raise RenderError(f"the job {job.metadata.name!r} has no replica {role}[{index}]")
    if attempt < 0:
        raise RenderError(f"attempt must be >= 0, got {attempt}")
    template = job.spec.replicas[role].template
    chosen_image = template.image or image
    if not chosen_image:
        raise RenderError(
            f"spec.replicas.{role}.template.image: no image for role {role!r}; set it in the job or in the "
            f"JobType {jobtype.metadata.name!r} (roles.{role}.template.image), e.g. image: pytorch/pytorch:2.5.1"
        )
    name = replica_name(job.metadata.name, role, index)
    try:
        check_dns_label(name, f"pod name (<job>-<role>-<index>) {name!r}")
    except ValueError as error:
        raise RenderError(f"{error}; shorten metadata.name or the role name") from None
    owner = job_owner_reference(job)
    addresses = dns_addresses(job, jobtype)
    try:
        env = render_replica_env(
            job,
            jobtype,
            role,
            index,
            addresses,
            node_of={replica: replica for replica in addresses},  # one node per Pod: see the module docstring
            output_dir=output_dir(job),
            hostfile_path=f"{HOSTFILE_DIR}/{HOSTFILE_KEY}",
        )
    except RendezvousError as error:
        raise RenderError(str(error)) from None
    env["PHALANX_ATTEMPT"] = str(attempt)
    resources = template.resources
    # The placement's share is what the scheduler reserved and the node agent enforces.
    gpu_milli = (placement.gpu_milli if placement is not None else 0) or resources.gpu_milli
    if gpu_milli:
        env["PHALANX_GPU_MILLI"] = str(gpu_milli)
    if datasets is not None:
        env.update(datasets.env)

    # The template's own labels and annotations first, so Phalanx's keys (which the operator and the scheduler
    # rely on) always win.
    annotations = {**template.metadata.annotations, ANNOTATION_JOB_UID: owner["uid"]}
    if env.get("PHALANX_RANK"):
        annotations[ANNOTATION_RANK] = env["PHALANX_RANK"]
    if gpu_milli:
        annotations[ANNOTATION_GPU_MILLI] = str(gpu_milli)
    if resources.gpu_model:
        annotations[ANNOTATION_GPU_MODEL] = resources.gpu_model
    if placement is not None and placement.node != CLUSTER_PLACED:
        annotations[ANNOTATION_NODE] = placement.node
        annotations[ANNOTATION_GPUS] = ",".join(str(gpu) for gpu in placement.gpus)
        annotations[ANNOTATION_CPUS] = ",".join(str(cpu) for cpu in placement.cpus)
    claiming = claims_gpus(job, role, dra_driver)
    if claiming:
        annotations[dra.ANNOTATION_DRIVER] = str(dra_driver)
        annotations[dra.ANNOTATION_DEVICE_CLASS] = dra_device_class

    mounts: list[dict[str, Any]] = [{"name": OUTPUTS_VOLUME, "mountPath": output_dir(job)}]
    volumes: list[dict[str, Any]] = [{"name": OUTPUTS_VOLUME, "emptyDir": {}}]
    if outputs_claim is not None:
        mounts[0]["subPath"] = outputs_sub_path(job)
        volumes[0] = {"name": OUTPUTS_VOLUME, "persistentVolumeClaim": {"claimName": outputs_claim}}
    if jobtype.spec.hostfile_roles:
        mounts.append({"name": HOSTFILE_VOLUME, "mountPath": HOSTFILE_DIR, "readOnly": True})
        volumes.append({"name": HOSTFILE_VOLUME, "configMap": {"name": hostfile_configmap_name(job)}})
    ssh_keys = job_ssh_keys(job, jobtype)
    if ssh_keys is not None:
        mounts.append({"name": SSH_VOLUME, "mountPath": ssh_keys.mount_path, "readOnly": True})
        volumes.append({"name": SSH_VOLUME, "secret": _ssh_volume(job, ssh_keys)})
    for position, (host_path, mount_path) in enumerate(datasets.mounts if datasets is not None else ()):
        volume = f"{DATASET_VOLUME}-{position}"
        mounts.append({"name": volume, "mountPath": mount_path, "readOnly": True})
        volumes.append({"name": volume, "hostPath": {"path": host_path, "type": "Directory"}})
    if datasets is not None and datasets.samples is not None:
        env["PHALANX_SAMPLE_CACHE_DIR"] = SAMPLE_MOUNT_PATH
        mounts.append({"name": SAMPLES_VOLUME, "mountPath": SAMPLE_MOUNT_PATH})
        volumes.append({"name": SAMPLES_VOLUME, "hostPath": {"path": datasets.samples, "type": "Directory"}})

    sourced = [{"name": key, "valueFrom": _wire(source)} for key, source in template.env_value_from.items()]
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": chosen_image,
        "env": [{"name": key, "value": value} for key, value in env.items() if key not in template.env_value_from]
        + sourced,
        "ports": [{"name": PORT_NAME, "containerPort": jobtype.spec.port, "protocol": "TCP"}],
        "resources": _resources(job, role, claims_gpus=claiming),
        "volumeMounts": mounts + [_wire(mount) for mount in template.volume_mounts],
        # A program that fails without writing /dev/termination-log leaves the end of its log there instead:
        # the operator reads its last line into the job's failure message (``objects.pod_last_output``).
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if template.env_from:
        container["envFrom"] = [_wire(source) for source in template.env_from]
    if template.container_security_context is not None:
        container["securityContext"] = _wire(template.container_security_context)
    if template.image_pull_policy is not None:
        container["imagePullPolicy"] = template.image_pull_policy
    for wire, probe in (
        ("livenessProbe", template.liveness_probe),
        ("readinessProbe", template.readiness_probe),
        ("startupProbe", template.startup_probe),
    ):
        if probe is not None:
            container[wire] = _wire(probe)
    # No command: the image's entrypoint runs, with the args (as a Pod's container does).
    if template.command:
        container["command"] = list(template.command)
    if template.args:
        container["args"] = list(template.args)
    if template.working_dir:
        container["workingDir"] = template.working_dir

    spec: dict[str, Any] = {"schedulerName": scheduler_name, "restartPolicy": "Never"}
    if claiming:
        spec["resourceClaims"] = [dra.pod_claim_source(gpu_claim_template(job, role))]
        container["resources"]["claims"] = [{"name": dra.CLAIM_NAME}]
    if bind:
        if claiming:
            raise RenderError(f"the pod {name!r} cannot be created bound: its GPU claim is allocated when it is bound")
        if placement is None or placement.node == CLUSTER_PLACED:
            raise RenderError(f"the pod {name!r} cannot be bound: it has no placement on a node")
        spec["nodeName"] = placement.node
    if pod_group is not None:
        spec["schedulingGroup"] = {"podGroupName": pod_group}
    if needs_service(job):
        spec.update(hostname=name, subdomain=service_name(job))
        if jobtype.spec.hostfile_format == "Hydra":
            # Hydra's proxies on the workers call the launcher back by its host name: make the short name resolve.
            domain = f"{service_name(job)}.{job.metadata.namespace}.svc.{CLUSTER_DOMAIN}"
            spec["dnsConfig"] = {"searches": [domain]}
    spec.update(
        enableServiceLinks=False,  # one Service per job: its env variables would only grow every Pod's env
        containers=[container],
        volumes=volumes + [_wire(volume) for volume in template.volumes],
    )
    spec.update(_pod_fields(template, chosen_image))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job.metadata.namespace,
            "labels": {
                **template.metadata.labels,
                LABEL_JOB: job.metadata.name,
                LABEL_ROLE: role,
                LABEL_INDEX: str(index),
                LABEL_ATTEMPT: str(attempt),
                "app.kubernetes.io/managed-by": "phalanx",
            },
            "annotations": annotations,
            "ownerReferences": [owner],
        },
        "spec": spec,
    }


def _ssh_volume(job: TrainingJob, ssh_keys: SshKeys) -> dict[str, Any]:
    """The Secret volume of the job's SSH keys: ``id_rsa``, ``id_rsa.pub`` and ``authorized_keys``.

    Under ``/root/.ssh`` the files are 0600, as ssh wants a private key; elsewhere (a user's home, for an image
    that runs as that user) they keep the default mode, which that user can read, as mpi-operator does.
    """
    volume: dict[str, Any] = {
        "secretName": ssh_secret_name(job),
        "items": [{"key": key, "path": path} for key, path in SSH_FILES],
    }
    if ssh_keys.mount_path.rstrip("/") == DEFAULT_SSH_MOUNT_PATH:
        volume["defaultMode"] = 0o600
    return volume


def render_ssh_secret(job: TrainingJob, private_pem: str, public_line: str) -> dict[str, Any]:
    """Render the Secret of the job's SSH key pair (``kubernetes.io/ssh-auth``), owned by the job.

    Raises:
        RenderError: the job has no uid.

    """
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/ssh-auth",
        "metadata": owned_metadata(job, ssh_secret_name(job)),
        "stringData": {SSH_PRIVATE_KEY: private_pem, SSH_PUBLIC_KEY: public_line},
    }


def _pod_fields(template: ReplicaTemplate, image: str) -> dict[str, Any]:
    """The template's Pod fields (``model.pods``), as the Pod spec writes them; unset ones left out.

    Sidecars are Kubernetes' native sidecars: init containers with ``restartPolicy: Always``, after the template's
    init containers, so they start once those have finished and stop when the replica's container ends.
    An extra container without an image runs the replica's.
    """
    fields: dict[str, Any] = {}
    if template.node_selector:
        fields["nodeSelector"] = dict(template.node_selector)
    for name, value in (
        ("tolerations", template.tolerations),
        ("imagePullSecrets", template.image_pull_secrets),
    ):
        if value:
            fields[name] = [_wire(item) for item in value]
    if template.affinity is not None:
        fields["affinity"] = _wire(template.affinity)
    if template.security_context is not None:
        fields["securityContext"] = _wire(template.security_context)
    if template.service_account_name:
        fields["serviceAccountName"] = template.service_account_name
    if template.priority_class_name:
        fields["priorityClassName"] = template.priority_class_name
    init = [_container(c, image) for c in template.init_containers]
    init += [{**_container(c, image), "restartPolicy": "Always"} for c in template.sidecars]
    if init:
        fields["initContainers"] = init
    return fields


def _container(container: Container, image: str) -> dict[str, Any]:
    rendered = _wire(container)
    rendered.setdefault("image", image)
    return rendered


def _wire(model: ApiModel) -> dict[str, Any]:
    """The model's wire form without empty lists (the API server drops them; ``emptyDir: {}`` must stay)."""
    return cast(dict[str, Any], _without_empty_lists(model.to_dict()))


def _without_empty_lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_empty_lists(item) for key, item in value.items() if item != []}
    if isinstance(value, list):
        return [_without_empty_lists(item) for item in value]
    return value


def _quantities(amounts: ResourceVector, *, gpus: bool = True) -> dict[str, str]:
    quantities: dict[str, str] = {}
    if amounts.cpu_milli:
        quantities["cpu"] = format_cpu(amounts.cpu_milli)
    if amounts.memory:
        quantities["memory"] = str(amounts.memory)
    if amounts.gpu and gpus:
        quantities[GPU_RESOURCE] = str(amounts.gpu)
    return quantities


def _resources(job: TrainingJob, role: str, *, claims_gpus: bool = False) -> dict[str, Any]:
    # Requests are what the scheduler reserved; limits the ceiling the kubelet enforces (the reserved amount
    # unless the template lifts it with resources.limits). Equal ones make the Pod Guaranteed, as the scheduler
    # assumed when it gave it exclusive CPUs (core.scheduling.demands.pins_cpus).
    resources = job.spec.replicas[role].template.resources
    # GPUs claimed through DRA are devices of the Pod's claim, not a counted resource.
    requests = _quantities(resources.vector(), gpus=not claims_gpus)
    if not requests:
        return {}
    return {"requests": requests, "limits": _quantities(resources.ceiling(), gpus=not claims_gpus)}


def render_headless_service(job: TrainingJob, jobtype: JobType) -> dict[str, Any]:
    """Render the job's headless Service: stable DNS names for its Pods, ready or not (see ``needs_service``).

    ``publishNotReadyAddresses`` publishes a Pod's name as soon as it has an IP, so replicas can rendezvous
    before any readiness probe passes (they have none).

    Raises:
        RenderError: the job has no uid.

    """
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owned_metadata(job, service_name(job)),
        "spec": {
            "clusterIP": "None",
            "selector": {LABEL_JOB: job.metadata.name},
            "publishNotReadyAddresses": True,
            "ports": [
                {"name": PORT_NAME, "port": jobtype.spec.port, "targetPort": jobtype.spec.port, "protocol": "TCP"}
            ],
        },
    }


def pod_group_name(job: TrainingJob) -> str:
    """The PodGroup of a job placed by the cluster's scheduler: named after the job."""
    return job.metadata.name


def render_pod_group(job: TrainingJob) -> dict[str, Any]:
    """Render the job's PodGroup for kube-scheduler's gang scheduling: ``minCount`` Pods placed together or none.

    Standalone (no Workload object); owned by the job, so it goes with it.

    Raises:
        RenderError: the job has no uid.

    """
    return {
        "apiVersion": POD_GROUP_API_VERSION,
        "kind": "PodGroup",
        "metadata": owned_metadata(job, pod_group_name(job)),
        "spec": {"schedulingPolicy": {"gang": {"minCount": gang_min_count(job)}}},
    }


def render_hostfile_configmap(job: TrainingJob, jobtype: JobType) -> dict[str, Any] | None:
    """Render the ConfigMap with the MPI hostfile, or None when the JobType has no ``hostfileRoles``.

    Every replica of the ``hostfileRoles`` is listed by its DNS name, ``slotsPerHost`` slots each.

    Raises:
        RenderError: the job has no uid.

    """
    if not jobtype.spec.hostfile_roles:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owned_metadata(job, hostfile_configmap_name(job)),
        "data": {HOSTFILE_KEY: render_hostfile(job, jobtype, dns_addresses(job, jobtype))},
    }


def render_pods(
    job: TrainingJob,
    jobtype: JobType,
    attempt: int,
    *,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
    image: str | None = None,
) -> list[dict[str, Any]]:
    """Render the Pods of every replica of the job, in rank order (ranked roles first)."""
    return [
        render_pod(job, jobtype, role, index, attempt, scheduler_name=scheduler_name, image=image)
        for role, index, _ in replica_names(job, jobtype)
    ]
