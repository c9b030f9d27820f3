"""The job controller: for every job, observe → core.reconcile.plan → apply the plan.

Applying is idempotent: creating a replica that exists, deleting one already going, storing outputs already
stored are all no-ops, so replaying a plan after a crash is safe. Rendezvous endpoints (one loopback port per
replica) are chosen once per job and kept in ``status.endpoints``, so restarted replicas find each other where
the others expect them.

A job whose reconciling raises what nobody expected is quarantined (``services.embedded.quarantine``): the others are
reconciled as usual, and it is left alone until it changes or its retry time comes.
"""

from __future__ import annotations

import logging
import socket
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.store import (
    AlreadyExistsError,
    ConflictError,
    NotFoundError,
    SqliteStore,
)
from phalanx.core.gpu_health import SickGpus, sick_gpus
from phalanx.core.lifecycle import transition
from phalanx.core.reconcile import plan
from phalanx.core.reconcile.types import (
    CreateReplica,
    DeleteJob,
    DeleteReplica,
    ObservedReplica,
    OutputsObservation,
    Plan,
    ReconcileInput,
    StoreOutputs,
)
from phalanx.core.rendezvous import (
    Endpoint,
    RendezvousError,
    expand_references,
    render_hostfile,
    render_replica_env,
)
from phalanx.core.stand_ins import played
from phalanx.model.jobs import TERMINAL_PHASES, Phase, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.meta import ObjectMeta
from phalanx.model.nodes import Node
from phalanx.model.pods import field_ref_env
from phalanx.model.replicas import Replica, ReplicaObjectSpec, ReplicaPhase, replica_name
from phalanx.services.embedded.datasets import DatasetManager, StagingObservation
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SqliteStatus
from phalanx.services.embedded.quarantine import CONTROLLER_ERROR, Quarantine, guarded_step
from phalanx.services.embedded.storing import observe_outputs, store_outputs

log = logging.getLogger(__name__)
LOOPBACK = "127.0.0.1"
HOSTFILE = "hostfile"


def allocate_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on loopback (bound together so they cannot collide)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def observe(replica: Replica) -> ObservedReplica:
    """The planner's view of a Replica object."""
    return ObservedReplica(
        name=replica.metadata.name,
        role=replica.spec.role,
        index=replica.spec.index,
        attempt=replica.spec.attempt,
        phase=ReplicaPhase(replica.status.phase),
        exit_code=replica.status.exit_code,
        deleting=replica.metadata.deletion_timestamp is not None,
        start_time=replica.status.start_time,
        finish_time=replica.status.finish_time,
        message=replica.status.message,
        last_output=replica.status.last_output,
    )


@dataclass
class JobController:
    """Reconciles every job in the store."""

    store: SqliteStore
    layout: StateLayout
    clock: Clock = field(default_factory=SystemClock)
    identity: str = "controller"
    data: DatasetManager | None = None
    #: Called with a job just before this controller removes it itself (its TTL), as it was last written: the
    #: history recorder's ``removing``, since a job finished and removed in one pass is never seen finished.
    on_removing: Callable[[TrainingJob], None] | None = None
    quarantine: Quarantine = field(init=False)
    port: SqliteStatus = field(init=False)  # events about the jobs

    def __post_init__(self) -> None:
        self.quarantine = Quarantine(self.store, self.clock)
        self.port = SqliteStatus(self.store, clock=self.clock)

    def sync(self) -> tuple[bool, float | None]:
        """Reconcile every job once. Returns (something changed, seconds until a timer needs a look)."""
        # The jobs before their JobTypes: a submit creates a job's JobType before the job, so a job this pass sees
        # has its JobType in the read after it. Read the other way round, a job submitted with its JobType between
        # the two reads (`phalanx run` of a file holding both) was failed for a JobType that did exist.
        jobs = self.store.list(TrainingJob)
        jobtypes = {jt.metadata.name: jt for jt in self.store.list(JobType)}
        by_job: dict[str, list[Replica]] = defaultdict(list)
        for replica in self.store.list(Replica):
            by_job[replica.spec.job_uid].append(replica)
        sick = sick_gpus(self.store.list(Node))
        changed = False
        wake: float | None = None
        held = self.quarantine.held("TrainingJob")
        for job in jobs:
            if held.skips(job):
                continue

            def step(job: TrainingJob = job) -> bool:
                nonlocal wake
                try:
                    job_changed, job_wake = self._sync_job(job, jobtypes, by_job.get(job.metadata.uid or "", []), sick)
                except RendezvousError as err:
                    self._fail(job, "InvalidEnvironment", f"cannot render the replicas' environment: {err}")
                    return True
                if job_wake is not None:
                    wake = job_wake if wake is None else min(wake, job_wake)
                return job_changed

            stepped = guarded_step(self.quarantine, job, held, step, reason=CONTROLLER_ERROR, doing="reconciling job")
            if stepped is None:  # a store fault: not the job's, so it is tried again soon
                wake = 1.0 if wake is None else min(wake, 1.0)
            changed |= bool(stepped)
        return changed, wake

    def _sync_job(
        self, job: TrainingJob, jobtypes: dict[str, JobType], replicas: list[Replica], sick: SickGpus
    ) -> tuple[bool, float | None]:
        if job.metadata.deletion_timestamp is not None:
            return self._finalize_deletion(job, replicas), None
        outputs = (
            observe_outputs(job, self.layout) if Phase(job.status.phase) == Phase.STORING else OutputsObservation()
        )
        staging = self.data.staging(job) if self.data is not None else StagingObservation()
        decided = plan(
            ReconcileInput(
                job=job,
                jobtype=jobtypes.get(job.spec.type),
                replicas=tuple(observe(r) for r in replicas),
                now=self.clock.now(),
                outputs=outputs,
                staged=staging.staged,
                staging_error=staging.error,
                unhealthy_gpus=sick,
            )
        )
        return self._apply(job, jobtypes.get(job.spec.type), decided, staging), decided.requeue_after

    def _apply(self, job: TrainingJob, jobtype: JobType | None, decided: Plan, staging: StagingObservation) -> bool:
        changed = False
        status = decided.status
        creates = [a for a in decided.actions if isinstance(a, CreateReplica)]
        if creates and not status.endpoints:
            # Only placed replicas run, so only they get an address; rendezvous counts exactly these.
            names = sorted(status.placements)
            ports = allocate_ports(len(names))
            status = status.model_copy(
                update={"endpoints": {n: f"{LOOPBACK}:{p}" for n, p in zip(names, ports, strict=True)}}
            )
        if status != job.status:
            job = self.store.update_status(job.model_copy(update={"status": status}))
            changed = True
        for event in decided.events:
            self._event(job, event.reason, event.message, warning=event.type == "Warning")
            log.info("job %s: %s: %s", job.key, event.reason, event.message)
            if event.reason == "Staging":
                self._warn_ignored_fields(job)
        for action in decided.actions:
            if isinstance(action, CreateReplica):
                assert jobtype is not None
                changed |= self._create_replica(job, jobtype, action, staging)
            elif isinstance(action, DeleteReplica):
                changed |= self._delete_replica(job.metadata.namespace, action.name)
            elif isinstance(action, StoreOutputs):
                store_outputs(job, self.layout)
                changed = True
            elif isinstance(action, DeleteJob):
                log.info("deleting job %s: %s", job.key, action.reason)
                # Events outlive the job: they say what became of it to whoever looks after (`phalanx run`).
                self._event(job, "Deleted", f"{action.reason}; the job had {job.status.phase}")
                if self.on_removing is not None:
                    self.on_removing(job)
                self.store.delete(TrainingJob, job.metadata.namespace, job.metadata.name)
                self.layout.remove_job_files(job.metadata.namespace, job.metadata.name, job.metadata.uid)
                changed = True
        return changed

    def _create_replica(
        self, job: TrainingJob, jobtype: JobType, action: CreateReplica, staging: StagingObservation
    ) -> bool:
        name = replica_name(job.metadata.name, action.role, action.index)
        assert job.metadata.uid is not None
        endpoints = {
            replica: Endpoint(host, int(port))
            for replica, address in job.status.endpoints.items()
            for host, _, port in [address.rpartition(":")]
        }
        node_of = {replica: placement.node for replica, placement in job.status.placements.items()}
        # Made by the node runtime with the run directory (a full disk defers that launch; see node_runtime).
        outputs = self.layout.job_outputs(
            job.metadata.namespace, job.metadata.name, job.metadata.uid, job.spec.outputs.path
        )
        run_dir = self.layout.replica_run_dir(
            job.metadata.namespace, job.metadata.name, job.metadata.uid, name, action.attempt
        )
        env = render_replica_env(
            job,
            jobtype,
            action.role,
            action.index,
            endpoints,
            node_of=node_of,
            output_dir=str(outputs),
            hostfile_path=str(run_dir / HOSTFILE),
        )
        env["PHALANX_ATTEMPT"] = str(action.attempt)
        # GPU indices are the driver's (NVML, PCI order); make CUDA number them the same way.
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        placement = action.placement
        gpus = ",".join(str(g) for g in placement.gpus)
        env["CUDA_VISIBLE_DEVICES"] = gpus
        env["NVIDIA_VISIBLE_DEVICES"] = gpus or "void"
        if placement.gpu_milli:
            env["PHALANX_GPU_MILLI"] = str(placement.gpu_milli)
        env["PHALANX_SAMPLE_CACHE_DIR"] = str(self.layout.sample_cache_dir(placement.node))
        env.update(staging.env.get(name, {}))
        template = job.spec.replicas[action.role].template
        # env valueFrom fieldRef: the replica's own metadata, as its Pod's on Kubernetes (labels: the template's,
        # then Phalanx's). Other sources were refused at submission (model.pods.EMBEDDED_REFUSALS).
        own_labels = {
            "phalanx.dev/job": job.metadata.name,
            "phalanx.dev/role": action.role,
            "phalanx.dev/replica-index": str(action.index),
            "phalanx.dev/attempt": str(action.attempt),
        }
        env.update(
            field_ref_env(
                template.env_value_from,
                name=name,
                namespace=job.metadata.namespace,
                node=placement.node,
                labels={**template.metadata.labels, **own_labels},
                annotations=template.metadata.annotations,
            )
        )
        files = {}
        if jobtype.spec.hostfile_roles:
            files[HOSTFILE] = render_hostfile(job, jobtype, endpoints)
        replica = Replica(
            metadata=ObjectMeta(
                name=name,
                namespace=job.metadata.namespace,
                labels={"phalanx.dev/job": job.metadata.name, "phalanx.dev/role": action.role},
            ),
            spec=ReplicaObjectSpec(
                job_name=job.metadata.name,
                job_uid=job.metadata.uid,
                role=action.role,
                index=action.index,
                attempt=action.attempt,
                # $(NAME) expanded from the replica's env, as the kubelet does on Kubernetes.
                command=[expand_references(part, env) for part in [*template.command, *template.args]],
                env=env,
                working_dir=template.working_dir,
                placement=placement,
                cpu_milli=template.resources.cpu or 0,
                memory=template.resources.memory or 0,
                cpu_limit_milli=template.resources.ceiling().cpu_milli,
                memory_limit=template.resources.ceiling().memory,
                files=files,
                # Read at launch, so that a secret's value is never stored (node_runtime).
                env_sources={k: v for k, v in template.env_value_from.items() if v.field_ref is None},
                env_from=list(template.env_from),
            ),
        )
        try:
            self.store.create(replica)
        except AlreadyExistsError:
            return False
        return True

    def _delete_replica(self, namespace: str, name: str) -> bool:
        try:
            existing = self.store.get(Replica, namespace, name)
        except NotFoundError:
            return False
        if existing.metadata.deletion_timestamp is not None:
            return False
        self.store.mark_deleting(Replica, namespace, name)
        return True

    def _warn_ignored_fields(self, job: TrainingJob) -> None:
        stand_ins = played(job)
        for image, program in sorted(stand_ins.items()):
            roles = sorted(role for role, r in job.spec.replicas.items() if r.template.image == image)
            self._event(
                job,
                "StandIn",
                f"image {image} is played by the stand-in {program} (phalanx.dev/stand-ins): replicas of "
                f"{', '.join(roles)} run it with their container's command and args as arguments",
            )
        images = sorted(
            {
                r.template.image
                for r in job.spec.replicas.values()
                if r.template.image and r.template.image not in stand_ins
            }
        )
        if images:
            self._event(
                job,
                "ImageIgnored",
                f"image {', '.join(images)} is not used (nor its pull policy or pull secrets): the embedded "
                "runtime runs replicas as local processes in this machine's environment",
                warning=True,
            )

        if job.spec.ssh_keys is not None:
            self._event(
                job,
                "SSHKeysNotMade",
                f"spec.sshKeys: no key pair is made and nothing is mounted at {job.spec.ssh_keys.mount_path}: the "
                "replicas run on this machine, where mpirun starts every rank itself, without SSH",
            )

    def _fail(self, job: TrainingJob, reason: str, message: str) -> None:
        """Move a job to Failed outside the planner, for errors only a backend can meet (bad rendering)."""
        if Phase(job.status.phase) in TERMINAL_PHASES:
            return
        try:
            status = transition(job.status, Phase.FAILED, reason=reason, message=message, now=self.clock.now())
            self.store.update_status(job.model_copy(update={"status": status}))
        except (ConflictError, NotFoundError):
            return
        self._event(job, reason, message, warning=True)
        log.warning("job %s failed: %s", job.key, message)

    def _event(self, job: TrainingJob, reason: str, message: str, *, warning: bool = False) -> None:
        self.port.record(job, reason, message, warning=warning)

    def _finalize_deletion(self, job: TrainingJob, replicas: list[Replica]) -> bool:
        changed = False
        for replica in replicas:
            changed |= self._delete_replica(replica.metadata.namespace, replica.metadata.name)
        if not replicas:
            self.store.delete(TrainingJob, job.metadata.namespace, job.metadata.name)
            self.layout.remove_job_files(job.metadata.namespace, job.metadata.name, job.metadata.uid)
            log.info("deleted job %s", job.key)
            return True
        return changed
