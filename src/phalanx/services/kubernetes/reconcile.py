"""The operator's reconcile of one job: observe it from the caches, plan with ``core.reconcile.plan``, apply.

- **Observe** from informer caches: the job is validated and defaulted against the cluster's JobTypes
  (``specs.SpecCache``); an invalid spec fails the job (reason InvalidSpec, the field-path errors as message)
  through ``core.lifecycle.transition`` instead of stopping the loop. A job's Pods are the ones whose
  ``phalanx.dev/job-uid`` annotation names its uid, so a job re-created under an old name never adopts the old
  one's Pods.
- **Plan** with ``core.reconcile.plan``: phases, restarts and backoff, gang restarts, halting
  (``spec.runPolicy.suspend``), deadlines, TTL. Outputs are observed as stored: on Kubernetes v1 they stay in
  the Pods' volumes (a Warning event says so when ``outputs.storeTo`` is set).
- **Apply**: the status first (``status_writer``: written, or held to go out with the next move), then events,
  then the actions. Pods from ``rendering.render_pod`` with the scheduler's placement in annotations
  (``schedulerName`` names the phalanx-scheduler, which binds them), the headless Service (for more than one
  replica) and the hostfile ConfigMap alongside them, deletions with the Pod's uid as a precondition, and TTL
  deletion of the job. Every write is idempotent (409 AlreadyExists is success, 404 on delete is success), and
  each is put into the cache at once or remembered (``gc.PodDeletions``), so the next pass does not act on the
  state from before it.
- **Datasets** (with a dataset store; ``services.kubernetes.datasets``): a job that reads datasets is created
  Pods only once every node agent of its plan reports its entries ready (``staged``), fails with reason
  StagingFailed when one cannot be (``staging_error``), and its Pods mount the entries they read (hostPath,
  read-only) with ``PHALANX_DATASET_*`` pointing at them. The versions a job reads are recorded on it
  (annotation ``phalanx.dev/dataset-versions``) when first planned, so that agents and later attempts read the
  same. Without a dataset store, ``spec.datasets`` is not staged and a job that has one gets a Warning event.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.adapters.kubernetes import dra
from phalanx.adapters.kubernetes.api import (
    CONFIGMAPS,
    PODGROUPS,
    PODS,
    RESOURCECLAIMTEMPLATES,
    SECRETS,
    SERVICES,
    TRAININGJOBS,
    ConflictError,
    KubeApiError,
    NotFoundError,
    Resource,
)
from phalanx.adapters.kubernetes.cache_report import DEFAULT_CACHE_DIR
from phalanx.adapters.kubernetes.informer import Informer, object_key
from phalanx.adapters.kubernetes.objects import LABEL_ATTEMPT, job_status, model_metadata
from phalanx.adapters.kubernetes.rendering import (
    DEFAULT_SCHEDULER_NAME,
    RenderError,
    render_gpu_claim_templates,
    render_pod_group,
    render_ssh_secret,
)
from phalanx.adapters.kubernetes.sshkeys import generate_ssh_key_pair
from phalanx.core.lifecycle import can_transition, transition
from phalanx.core.reconcile import (
    CreateReplica,
    DeleteJob,
    DeleteReplica,
    OutputsObservation,
    Plan,
    ReconcileInput,
    StoreOutputs,
    plan,
)
from phalanx.model.jobs import TERMINAL_PHASES, Phase, TrainingJob, TrainingJobStatus
from phalanx.model.jobtypes import JobType, job_ssh_keys
from phalanx.model.meta import ObjectMeta
from phalanx.services.dataset_store import STAGING_PHASES, chosen_versions
from phalanx.services.kubernetes.apply import (
    HeldStatus,
    PodSettings,
    Wiring,
    may_hold,
    observe_job_pods,
    pod_uid,
    render_children,
    render_creates,
)
from phalanx.services.kubernetes.datasets import KubeDatasetManager, KubeStaging, SourcePolicy
from phalanx.services.kubernetes.flows import FlowSettings
from phalanx.services.kubernetes.gc import PodDeletions
from phalanx.services.kubernetes.outputs import NOT_COLLECTED, KubeOutputs, mounts_outputs_claim
from phalanx.services.kubernetes.specs import SpecCache
from phalanx.services.kubernetes.status_writer import StatusWriter, resource_version
from phalanx.services.outputs_storing import is_url

log = logging.getLogger(__name__)
# Phases from which a pass may plan the Storing phase: where the record of stored outputs is worth reading.
_STORING_SOON = frozenset({Phase.RUNNING, Phase.STORING})
# Phases in which a job's Pods run or are about to, so the Service and hostfile they use must exist.
_CHILDREN_PHASES = frozenset({Phase.DOWNLOADING, Phase.RUNNING, Phase.RESTARTING})


@dataclass(frozen=True)
class OperatorSettings:
    """How the operator renders Pods, names itself and paces its work."""

    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    image: str | None = None
    job_scheduler: str | None = None  # the cluster's scheduler for jobs naming none (None: phalanx-scheduler)
    identity: str = "phalanx-operator"
    component: str = "phalanx-operator"
    resync_s: float = 30.0
    retry_s: float = 1.0
    workers: int = 8
    job_workers: int = 8
    seed_jobtypes: bool = True
    hold_s: float = 30.0  # how long Admitted -> Downloading may wait unwritten for the Pods to start
    accept_hold_s: float = 10.0  # how long Pending -> Queued may wait unwritten for the scheduler to write it
    dataset_store: Path | None = None  # where Datasets are materialised (shared with node agents); None: no staging
    dataset_mount_path: str = DEFAULT_CACHE_DIR  # where replicas see the cache entries they read
    dataset_sources: SourcePolicy = field(default_factory=SourcePolicy)  # what Dataset sources it reads
    kubeflow_kinds: bool = False  # run the Kubeflow kinds (PyTorchJob... TrainJob) too: services/kubernetes/kubeflow.py
    flows: FlowSettings | None = None  # run Sweeps and PipelineRuns (services/kubernetes/flows.py); None: not
    history_url: str | None = None  # keep ended jobs in this job history (services/kubernetes/history.py); None: not
    # GPUs through Dynamic Resource Allocation: claims of this DeviceClass, allocated from this driver's slices;
    # None: the device plugin's counted nvidia.com/gpu, where the node picks the devices.
    dra_driver: str | None = None
    dra_device_class: str = dra.DEFAULT_DEVICE_CLASS

    @property
    def pods(self) -> PodSettings:
        """The settings Pods are rendered with."""
        return PodSettings(
            scheduler_name=self.scheduler_name,
            image=self.image,
            dataset_mount_path=self.dataset_mount_path,
            job_scheduler=self.job_scheduler,
            outputs_claim=self.outputs_claim,
            dra_driver=self.dra_driver,
            dra_device_class=self.dra_device_class,
        )

    @property
    def outputs_claim(self) -> str | None:
        """The claim of the artifact store jobs' outputs are collected to (``outputs_store``); None: not collected."""
        return self.flows.artifact_volume_claim if self.flows is not None and self.outputs_store is not None else None

    @property
    def outputs_store(self) -> Path | None:
        """The artifact store's directory on its claim, where jobs' outputs are collected; None: not collected."""
        flows = self.flows
        if flows is None or flows.artifact_volume_claim is None or is_url(flows.artifacts_url):
            return None
        return Path(flows.artifacts_url)


@dataclass
class Outcome:
    """What reconciling one job asks of the loop: look again after ``requeue_after`` seconds (None: no timer)."""

    requeue_after: float | None = None


@dataclass(frozen=True)
class Caches:
    """The informer caches a reconcile reads and updates."""

    jobs: Informer
    pods: Informer
    services: Informer
    configmaps: Informer


@dataclass
class JobReconciler:
    """Reconciles one job at a time (from any number of threads): plan from the caches, then apply the plan."""

    wiring: Wiring
    settings: OperatorSettings
    caches: Caches
    specs: SpecCache
    data: KubeDatasetManager | None
    writer: StatusWriter
    deletions: PodDeletions
    unhealthy_gpus: Callable[[], dict[str, dict[int, str]]]  # node -> unhealthy GPU index -> why (node agents')
    outputs: KubeOutputs | None = None  # the jobs' outputs on the artifact store's claim; None: not collected
    # (job uid, template) of the ResourceClaimTemplates made (a set's add and lookup are atomic under the GIL)
    _claim_templates: set[tuple[str, str]] = field(default_factory=set)

    def reconcile(self, obj: dict[str, Any], jobtypes: dict[str, JobType], pods: list[dict[str, Any]]) -> Outcome:
        """Plan the job (as cached, with its cached ``pods``) and apply the plan; when to look at it again."""
        parsed = self.specs.parse(obj, jobtypes)
        if parsed.job is None:
            self.writer.take_held(obj)
            return self._fail(obj, "InvalidSpec", parsed.error, pods)
        stored = job_status(obj)
        staging = self._staging(obj, parsed.job, jobtypes.get(parsed.job.spec.type), stored)
        if isinstance(staging, Outcome):
            return staging  # its versions were recorded (or not, for now): plan again from the new version
        held = self.writer.take_held(obj)
        # A held status is where the job already is, as far as this operator is concerned: plan on from it.
        job = parsed.job.model_copy(
            update={
                "metadata": ObjectMeta.model_validate(model_metadata(obj)),
                "status": held.status if held is not None else stored,
            }
        )
        jobtype = jobtypes.get(job.spec.type)
        deleting = self.deletions.snapshot()
        outputs = self._outputs(job, stored, pods)
        decided = plan(
            ReconcileInput(
                job=job,
                jobtype=jobtype,
                replicas=observe_job_pods(pods, deleting),
                now=self.wiring.clock.now(),
                outputs=outputs,
                staged=staging.staged,
                staging_error=staging.error,
                unhealthy_gpus=self.unhealthy_gpus(),
                placed_by=self.settings.pods.placing_scheduler(job),
            )
        )
        waits = Phase(decided.status.phase) == Phase.DOWNLOADING and staging.waiting
        if waits and self.writer.first_time(obj, f"StagingWaits:{staging.waiting}"):
            self.writer.event(obj, "StagingWaits", str(staging.waiting))
        return self._apply(obj, job, jobtype, decided, pods, stored=stored, held=held, staging=staging, outputs=outputs)

    def _outputs(self, job: TrainingJob, stored: TrainingJobStatus, pods: list[dict[str, Any]]) -> OutputsObservation:
        """What storing the job's outputs recorded: read only where the plan may enter or be in Storing.

        Outputs are collected where the job's Pods write them to the claim: its Pods as created say so (the claim
        may have come or gone since); a job without Pods left, as its namespace has the claim now.
        """
        if self.outputs is None:
            return NOT_COLLECTED
        if Phase(stored.phase) not in _STORING_SOON:
            return OutputsObservation()
        mounted = [mounts_outputs_claim(pod, self.outputs.claim) for pod in pods]
        if not (all(mounted) if mounted else self.outputs.claim_in(job.metadata.namespace)):
            return self.outputs.no_claim_in(job.metadata.namespace)
        return self.outputs.observe(job)

    def _pod_settings(self, job: TrainingJob) -> PodSettings:
        """How the job's Pods are rendered: writing outputs to the claim only where its namespace has one."""
        pods = self.settings.pods
        if self.outputs is not None and not self.outputs.claim_in(job.metadata.namespace):
            return dataclasses.replace(pods, outputs_claim=None)
        return pods

    def _staging(
        self, obj: dict[str, Any], job: TrainingJob, jobtype: JobType | None, stored: TrainingJobStatus
    ) -> KubeStaging | Outcome:
        """The job's staging as node agents report it; an outcome instead when its versions had to be recorded.

        Without a dataset store nothing is staged: a job that reads datasets is told so once, and runs without.
        """
        if not job.spec.datasets:
            return KubeStaging()
        if self.data is None:
            if Phase(stored.phase) in STAGING_PHASES and self.writer.first_time(obj, "DatasetsNotStaged"):
                self.writer.event(
                    obj,
                    "DatasetsNotStaged",
                    "phalanx-operator runs without --dataset-store, so spec.datasets is not staged: the replicas get "
                    "no PHALANX_DATASET_* variables; give the operator and the node agents a dataset store "
                    "(docs/datasets.md#kubernetes)",
                    warning=True,
                )
            return KubeStaging()
        current = job.model_copy(update={"metadata": ObjectMeta.model_validate(model_metadata(obj)), "status": stored})
        staging = self.data.staging(current, jobtype)
        if staging.versions and dict(staging.versions) != chosen_versions(current):
            recorded = self.writer.record_versions(obj, dict(staging.versions))
            return Outcome(requeue_after=0.0 if recorded else self.settings.retry_s)
        return staging

    def _apply(
        self,
        obj: dict[str, Any],
        job: TrainingJob,
        jobtype: JobType | None,
        decided: Plan,
        pods: list[dict[str, Any]],
        *,
        stored: TrainingJobStatus,
        held: HeldStatus | None,
        staging: KubeStaging | None = None,
        outputs: OutputsObservation | None = None,
    ) -> Outcome:
        staging = staging or KubeStaging()
        creates: list[dict[str, Any]] = []
        if jobtype is not None and any(isinstance(action, CreateReplica) for action in decided.actions):
            try:
                creates = render_creates(job, jobtype, decided, self._pod_settings(job), staging.pods)
            except RenderError as error:
                return self._fail(obj, "InvalidSpec", str(error), pods)
        outcome = Outcome(requeue_after=decided.requeue_after)
        events = (held.events if held is not None else ()) + decided.events
        if decided.status != stored:
            now = self.wiring.clock.monotonic()
            hold = self.settings.accept_hold_s if Phase(stored.phase) == Phase.PENDING else self.settings.hold_s
            due = held.due if held is not None else now + hold
            gated = self.data is not None and bool(job.spec.datasets)
            if may_hold(stored, decided.status, staging=gated) and now < due:
                # No write checks the resourceVersion the plan was made on, so check it before creating Pods:
                # a plan made on a stale cache (the job halted or deleted meanwhile) creates nothing.
                if creates and not self.writer.still_current(obj):
                    return Outcome(requeue_after=self.settings.retry_s)
                self.writer.hold(obj, HeldStatus(resource_version(obj), decided.status, events, due))
                events = ()  # they go out with the status
                waits = [due - now] + ([decided.requeue_after] if decided.requeue_after is not None else [])
                outcome.requeue_after = min(waits)
            else:
                written = self.writer.write_status(obj, decided.status)
                if written is None:
                    return Outcome(requeue_after=self.settings.retry_s)
                obj = written
        for event in events:
            self.writer.event(obj, event.reason, event.message, warning=event.type == "Warning")
            log.info("job %s: %s: %s", job.key, event.reason, event.message)
        before, after = Phase(stored.phase), Phase(decided.status.phase)
        entered_storing = after in (Phase.STORING, Phase.SUCCEEDED) and before not in (Phase.STORING, Phase.SUCCEEDED)
        if any(isinstance(action, StoreOutputs) for action in decided.actions) and self.outputs is not None:
            # A copy to an object store may take a while; the next pass reads the record it left.
            stored_outputs = self.outputs.store_outputs(job)
            log.info("job %s: outputs %s", job.key, stored_outputs.location or stored_outputs.error)
            outcome.requeue_after = 0.0
        elif entered_storing or any(isinstance(action, StoreOutputs) for action in decided.actions):
            self._warn_outputs_not_collected(obj, job, outputs.not_collected if outputs else None)
        tasks: list[Callable[[], bool]] = []
        if jobtype is not None and after in _CHILDREN_PHASES:
            # The Service and hostfile are created alongside the Pods, not before: a Pod only needs them once
            # its containers start, long after its create call returns.
            tasks.extend(functools.partial(self._ensure_child, job, body) for body in render_children(job, jobtype))
        by_name = {str(pod["metadata"].get("name")): pod for pod in pods}
        if creates and self.settings.pods.placing_scheduler(job) is not None:
            # The PodGroup first, so that a cluster which does not serve it fails the job before any Pod exists:
            # a Pod whose group the API server does not know would be scheduled alone, a partial gang.
            refused = self._ensure_pod_group(obj, job)
            if refused is not None:
                return self._fail(obj, "PodGroupUnavailable", refused, pods)
        if self.outputs is not None and any(mounts_outputs_claim(body, self.outputs.claim) for body in creates):
            # Before the Pods, which mount it: a folder the kubelet made for them would be root's alone.
            try:
                self.outputs.prepare(job)
            except OSError as error:
                log.warning("job %s: cannot make its outputs folder, trying again: %s", job.key, error)
                return Outcome(requeue_after=self.settings.retry_s * 5)
        if creates and job_ssh_keys(job, jobtype) is not None:
            # Before the Pods, which mount it: a Pod whose Secret is missing waits in ContainerCreating.
            refused = self._ensure_ssh_keys(job)
            if refused is not None:
                return self._fail(obj, "SSHKeysUnavailable", refused, pods)
        if any(dra.pod_gets_claim(body) for body in creates):
            # Before the Pods: kube-controller-manager makes each Pod's claim from its role's template.
            refused = self._ensure_claim_templates(job)
            if refused is not None:
                return self._fail(obj, "ResourceClaimsUnavailable", refused, pods)
        tasks.extend(functools.partial(self._create_pod, obj, body) for body in creates)
        for action in decided.actions:
            if isinstance(action, DeleteReplica) and action.name in by_name:
                pod = by_name[action.name]
                if after in TERMINAL_PHASES and _exited(pod):
                    # A finished job's exited Pods hold nothing (the kubelet has freed their resources) and keep
                    # their logs readable (`phalanx logs`, `kubectl logs`); they go with the job (owner reference).
                    continue
                tasks.append(functools.partial(self.delete_pod, pod, action.reason))
        if not all(list(self.wiring.pool.map(lambda task: task(), tasks))):
            outcome.requeue_after = self.settings.retry_s * 5  # a create the API refused: try again later
        for action in decided.actions:
            if isinstance(action, DeleteJob):
                self._delete_job(obj, action.reason)
        return outcome

    def _fail(self, obj: dict[str, Any], reason: str, message: str, pods: list[dict[str, Any]]) -> Outcome:
        """Fail a job the planner cannot plan (its spec is invalid) and stop its Pods, as Failed does."""
        namespace, name = object_key(obj)
        status = job_status(obj)
        phase = Phase(status.phase)
        outcome = Outcome()
        if phase not in TERMINAL_PHASES:
            if can_transition(phase, Phase.FAILED):
                failed = transition(status, Phase.FAILED, reason=reason, message=message, now=self.wiring.clock.now())
                generation = int((obj.get("metadata") or {}).get("generation") or 0)
                written = self.writer.write_status(obj, failed.model_copy(update={"observed_generation": generation}))
                if written is None:
                    return Outcome(requeue_after=self.settings.retry_s)
                self.writer.event(written, reason, message, warning=True)
                log.warning("job %s/%s failed: %s: %s", namespace, name, reason, message)
            elif self.writer.first_time(obj, f"{reason}:{message}"):
                # Halting and Preempted only wait for Pods to stop: stop them; the job waits for a valid spec.
                log.warning("job %s/%s (%s) cannot be planned: %s", namespace, name, phase, message)
                self.writer.event(obj, reason, f"{message}; stopping every replica", warning=True)
        deleting = self.deletions.snapshot()
        live = [pod for pod in pods if not pod["metadata"].get("deletionTimestamp") and pod_uid(pod) not in deleting]
        list(self.wiring.pool.map(lambda pod: self.delete_pod(pod, reason), live))
        return outcome

    def _create_pod(self, job: dict[str, Any], body: dict[str, Any]) -> bool:
        meta = body["metadata"]
        try:
            created = self.wiring.api.create(PODS, body)
        except ConflictError as error:
            if error.already_exists:
                return True  # created before (a pass replayed after a restart); the cache will show it
            raise
        except KubeApiError as error:
            if error.status in (0, 500, 503, 504, 429):
                raise
            # Refused for good (invalid, forbidden, over a ResourceQuota): say so once; retried on later passes.
            if self.writer.first_time(job, f"CreatePodFailed:{meta['name']}:{error.message}"):
                self.writer.event(job, "CreatePodFailed", f"cannot create pod {meta['name']}: {error}", warning=True)
            log.warning("cannot create pod %s/%s: %s", meta["namespace"], meta["name"], error)
            return False
        self.caches.pods.observe(created)
        self.wiring.counters.add("pods_created")
        log.debug("created pod %s/%s (attempt %s)", meta["namespace"], meta["name"], meta["labels"][LABEL_ATTEMPT])
        return True

    def delete_pod(self, pod: Mapping[str, Any], reason: str) -> bool:
        """Delete the Pod with its uid as precondition and remember the deletion (gone or replaced is success)."""
        meta = pod.get("metadata") or {}
        uid = pod_uid(pod)
        # 404: already gone; 409: the name now belongs to a newer Pod, which is not this deletion's to remove.
        with contextlib.suppress(NotFoundError, ConflictError):
            self.wiring.api.delete(PODS, str(meta.get("name")), str(meta.get("namespace")), uid=uid or None)
        self.deletions.add(uid)
        self.wiring.counters.add("pods_deleted")
        log.debug("deleted pod %s/%s: %s", meta.get("namespace"), meta.get("name"), reason)
        return True

    def _ensure_child(self, job: TrainingJob, body: dict[str, Any]) -> bool:
        """Create the headless Service or hostfile ConfigMap if the cache lacks it (409 is success)."""
        informer = self.caches.services if body["kind"] == "Service" else self.caches.configmaps
        resource = SERVICES if informer is self.caches.services else CONFIGMAPS
        meta = body["metadata"]
        current = informer.get(meta["namespace"], meta["name"])
        if current is not None:
            owners = {ref.get("uid") for ref in (current.get("metadata") or {}).get("ownerReferences") or []}
            if job.metadata.uid in owners or current["metadata"].get("deletionTimestamp"):
                return True
            # Left by an earlier job of the same name, awaiting garbage collection: replace it now.
            with contextlib.suppress(NotFoundError, ConflictError):
                self.wiring.api.delete(resource, meta["name"], meta["namespace"], uid=current["metadata"].get("uid"))
            informer.forget(meta["namespace"], meta["name"])
        try:
            informer.observe(self.wiring.api.create(resource, body))
            self.wiring.counters.add("children_created")
        except ConflictError as error:
            if not error.already_exists:
                raise
        return True

    def _ensure_ssh_keys(self, job: TrainingJob) -> str | None:
        """Create the Secret of the job's SSH key pair (409: made before, for this job); why not, None when made.

        Its name carries the job's uid (``rendering.ssh_secret_name``), so one that exists is this job's: the
        operator creates Secrets and never reads one.
        """
        keys = generate_ssh_key_pair()
        body = render_ssh_secret(job, keys.private_pem, keys.public_line)
        refused = self._create_owned(SECRETS, body)
        if refused is not None:
            return (
                f"spec.sshKeys: cannot create the Secret {body['metadata']['name']} with the job's SSH keys: "
                f"{refused}; "
                "give phalanx-operator the right to create secrets (phalanx install --print has it) or remove sshKeys"
            )
        return None

    def _create_owned(self, resource: Resource, body: dict[str, Any]) -> KubeApiError | None:
        """Create an object named for its job only (409 is success); the refusal for good, None when it exists.

        Raises:
            KubeApiError: a refusal worth retrying (the API server unreachable, overloaded or failing).

        """
        try:
            self.wiring.api.create(resource, body)
            self.wiring.counters.add("children_created")
        except ConflictError as error:
            if not error.already_exists:
                raise
        except KubeApiError as error:
            if error.status in (0, 500, 503, 504, 429):
                raise
            return error
        return None

    def _ensure_claim_templates(self, job: TrainingJob) -> str | None:
        """Create the job's ResourceClaimTemplates (409: made before); why they cannot be, None when made.

        Their names carry the job's uid (``rendering.gpu_claim_template``), so one that exists is this job's; the
        ones made are remembered, so a restart of the job's Pods does not ask again.
        """
        for body in render_gpu_claim_templates(job, self.settings.dra_device_class):
            key = (str(job.metadata.uid), str(body["metadata"]["name"]))
            if key in self._claim_templates:
                continue
            refused = self._create_owned(RESOURCECLAIMTEMPLATES, body)
            if refused is not None:
                return (
                    f"cannot create the ResourceClaimTemplate {body['metadata']['name']} for the job's GPUs: "
                    f"{refused}; "
                    "the cluster must serve resource.k8s.io/v1 (Kubernetes 1.34 or later) and phalanx-operator needs "
                    "the right to create resourceclaimtemplates (phalanx install --print has it), or run the "
                    "operator without --gpu-allocation dra"
                )
            self._claim_templates.add(key)
        return None

    def _ensure_pod_group(self, obj: dict[str, Any], job: TrainingJob) -> str | None:
        """Create the job's PodGroup (409 is success); why the cluster cannot have it, None when it has it.

        A PodGroup of the same name owned by an earlier job of that name is deleted, and this pass fails with a
        retryable error: the next one creates the job's own.
        """
        body = render_pod_group(job)
        meta = body["metadata"]
        try:
            self.wiring.api.create(PODGROUPS, body)
            self.wiring.counters.add("children_created")
            return None
        except NotFoundError:
            cluster = self.settings.pods.placing_scheduler(job)
            return (
                f"spec.scheduling.schedulerName: the job's Pods are left to {cluster!r} as one gang, but the API "
                f"server does not serve {PODGROUPS.api_version} PodGroups: enable kube-scheduler's gang scheduling "
                "(feature gates GenericWorkload and GangScheduling on every component, kube-apiserver "
                f"--runtime-config={PODGROUPS.api_version}=true) or leave schedulerName unset"
            )
        except ConflictError as error:
            if not error.already_exists:
                raise
        current = self.wiring.api.get(PODGROUPS, meta["name"], meta["namespace"])
        owners = {ref.get("uid") for ref in (current.get("metadata") or {}).get("ownerReferences") or []}
        if job.metadata.uid in owners:
            return None
        # Left by an earlier job of the same name, awaiting garbage collection: remove it, create ours next pass.
        with contextlib.suppress(NotFoundError, ConflictError):
            self.wiring.api.delete(PODGROUPS, meta["name"], meta["namespace"], uid=current["metadata"].get("uid"))
        raise KubeApiError(
            409, "Conflict", f"PodGroup {meta['namespace']}/{meta['name']} belongs to an earlier job of that name"
        )

    def _delete_job(self, obj: dict[str, Any], reason: str) -> None:
        namespace, name = object_key(obj)
        with contextlib.suppress(NotFoundError, ConflictError):
            self.wiring.api.delete(TRAININGJOBS, name, namespace, uid=obj["metadata"].get("uid"))
        self.caches.jobs.forget(namespace, name)
        log.info("deleted job %s/%s: %s", namespace, name, reason)

    def _warn_outputs_not_collected(self, obj: dict[str, Any], job: TrainingJob, why: str | None) -> None:
        store_to = job.spec.outputs.store_to
        if store_to and self.writer.first_time(obj, "OutputsNotCollected"):
            self.writer.event(
                obj,
                "OutputsNotCollected",
                f"outputs.storeTo ({store_to}) is not stored: {why or NOT_COLLECTED.not_collected}",
                warning=True,
            )


def _exited(pod: Mapping[str, Any]) -> bool:
    """Whether the Pod's containers have ended for good (phase Succeeded or Failed)."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
