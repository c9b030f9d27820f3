"""Kubeflow job documents (PyTorchJob, TFJob, XGBoostJob, JAXJob, PaddleJob, MPIJob) turned into TrainingJobs.

A pure function of the document and the JobTypes it may use: ``convert`` returns the TrainingJob document (and,
for an MPIJob whose hostfile differs from the built-in ``mpi`` type's, a JobType document of its own), plus a
map from every TrainingJob path back to the upstream path, so that a problem the TrainingJob's validation finds
is reported where the user wrote it (``spec.pytorchReplicaSpecs.Worker.replicas``, not ``spec.replicas.worker.
count``).

Every field has a meaning here or is refused with its path and why; nothing is dropped. What is taken:
replica specs (type → role, ``replicas`` → count), the PodTemplateSpec's one container (``kubeflow.pods``),
``runPolicy`` (backoffLimit, activeDeadlineSeconds, ttlSecondsAfterFinished, suspend, schedulingPolicy's
minAvailable, queue and priorityClass; cleanPodPolicy: None as Phalanx's None, Running and All as its default
Running), each replica type's restartPolicy (job-wide when they all agree, else per role), ``nprocPerNode``,
``slotsPerWorker``, ``runLauncherAsWorker``, ``mpiImplementation`` (Intel and MPICH: a JobType with Hydra's
hostfile and variables) and ``sshAuthMountPath`` (``spec.sshKeys``). docs/kubeflow.md lists every field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.model.errors import FieldError, SpecError, short
from phalanx.model.jobs import DEFAULT_SSH_MOUNT_PATH
from phalanx.model.jobtypes import JobType
from phalanx.model.kubeflow.kinds import KubeflowKind
from phalanx.model.kubeflow.pods import replica_template, resource_paths

#: The annotation a converted job carries: the kind and API version it was written as.
CONVERTED_FROM = "phalanx.dev/converted-from"

#: Upstream's ExitCode policy: 1-127 are permanent errors, 128-255 (killed by a signal) are retried.
RETRYABLE_EXIT_CODES = list(range(128, 256))

_RESTART_POLICIES = {"Never": "Never", "OnFailure": "OnFailure", "ExitCode": "ExitCode"}
_GANG_FIXED = (
    "Phalanx runs a job as a gang of a fixed size, so it cannot grow or shrink one while it runs; remove it "
    "and give the replica count you want"
)


@dataclass(frozen=True)
class Conversion:
    """What a Kubeflow document becomes, before validation."""

    job: dict[str, Any]
    #: JobType documents the job needs besides the built-in ones (an MPIJob with several slots per worker)
    jobtypes: tuple[dict[str, Any], ...]
    #: (TrainingJob path prefix, upstream path), longest prefix first
    paths: tuple[tuple[str, str], ...]
    #: Roles given upstream's default command for a container that names none (an MPIJob's workers: sshd)
    defaulted_commands: tuple[str, ...] = ()

    def upstream_path(self, path: str) -> str:
        """The path in the upstream document of a TrainingJob path (the longest known prefix is replaced)."""
        for prefix, upstream in self.paths:
            if path == prefix:
                return upstream
            if path.startswith(prefix) and path[len(prefix)] in ".[":
                return upstream + path[len(prefix) :]
        return path


def record_pod_paths(paths: dict[str, str], ours: str, pod_spec: str, template: Any) -> None:
    """Where the pod fields of a replica template (at ``ours``) were written in the PodSpec at ``pod_spec``.

    Pod-level fields keep their names; the container's securityContext is ``containerSecurityContext``; an init
    container with ``restartPolicy: Always`` is a sidecar, numbered among the sidecars.
    """
    for key in ("volumes", "nodeSelector", "tolerations", "affinity", "securityContext", "serviceAccountName"):
        paths[f"{ours}.{key}"] = f"{pod_spec}.{key}"
    for key in ("imagePullSecrets", "priorityClassName"):
        paths[f"{ours}.{key}"] = f"{pod_spec}.{key}"
    paths[f"{ours}.containerSecurityContext"] = f"{pod_spec}.containers[0].securityContext"
    paths[f"{ours}.initContainers"] = paths[f"{ours}.sidecars"] = f"{pod_spec}.initContainers"
    try:
        init = template["spec"]["initContainers"]
    except (KeyError, TypeError):
        return
    counts = {"initContainers": 0, "sidecars": 0}
    for position, container in enumerate(init if isinstance(init, list) else ()):
        kind = "sidecars" if isinstance(container, Mapping) and container.get("restartPolicy") == "Always" else None
        kind = kind or "initContainers"
        paths[f"{ours}.{kind}[{counts[kind]}]"] = f"{pod_spec}.initContainers[{position}]"
        counts[kind] += 1


def convert(document: Mapping[str, Any], kind: KubeflowKind, jobtypes: Mapping[str, JobType]) -> Conversion:
    """The TrainingJob (and any JobType) a Kubeflow document of ``kind`` becomes.

    Args:
        document: the upstream document, as read.
        kind: its entry of ``kubeflow.kinds.KINDS``.
        jobtypes: the JobTypes known (the MPI conversion starts from ``mpi``).

    Raises:
        SpecError: every field that cannot be honoured, each with its upstream path and why.
    """
    converter = _Converter(kind)
    return converter.run(document, jobtypes)


class _Converter:
    def __init__(self, kind: KubeflowKind) -> None:
        self.kind = kind
        self.errors: list[FieldError] = []
        self.paths: dict[str, str] = {}
        self.role_paths: dict[str, str] = {}  # role -> the path of its pod spec in the document
        self.defaulted_commands: list[str] = []

    def refuse(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def run(self, document: Mapping[str, Any], jobtypes: Mapping[str, JobType]) -> Conversion:
        kind = self.kind
        if document.get("apiVersion") != kind.api_version:
            self.refuse(
                "apiVersion",
                f"{kind.kind} is accepted as {kind.api_version}, got {short(document.get('apiVersion'))}; "
                f"write apiVersion: {kind.api_version}",
            )
        for key in document:
            if key not in ("apiVersion", "kind", "metadata", "spec", "status"):
                self.refuse(key, f"unknown field of a {kind.kind}; it has apiVersion, kind, metadata and spec")
        spec = document.get("spec")
        if not isinstance(spec, Mapping):
            self.refuse("spec", f"required: a {kind.kind} spec with {kind.replicas_field}")
            raise SpecError(self.errors)
        metadata = document.get("metadata")
        job_spec: dict[str, Any] = {"type": kind.jobtype}
        job_spec["replicas"], policies = self.replicas(spec)
        restart = self.role_restart_policies(job_spec["replicas"], policies)
        run, scheduling = self.run_policy(spec.get("runPolicy"), restart)
        scheduler = lift_scheduler_name(
            {role: (replica["template"], self.role_paths[role]) for role, replica in job_spec["replicas"].items()},
            self.errors,
        )
        if scheduler is not None:
            scheduling = {**(scheduling or {}), "schedulerName": scheduler[0]}
            self.paths["spec.scheduling.schedulerName"] = scheduler[1]
        job_spec.update({key: value for key, value in (("runPolicy", run), ("scheduling", scheduling)) if value})
        for key in spec:
            if key not in ("runPolicy", kind.replicas_field) and key not in kind.spec_fields:
                self.refuse(f"spec.{key}", f"unknown field of a {kind.kind} spec; remove it")
        extra: list[dict[str, Any]] = []
        if kind.kind == "PyTorchJob":
            self.pytorch(spec, job_spec)
        elif kind.kind == "TFJob":
            self.tensorflow(spec)
        elif kind.kind == "PaddleJob":
            self.paddle(spec, job_spec)
        elif kind.kind == "MPIJob":
            jobtype = self.mpi(spec, job_spec, jobtypes, metadata)
            if jobtype is not None:
                extra.append(jobtype)
        if self.errors:
            raise SpecError(self.errors)
        job = {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "TrainingJob",
            "metadata": _annotated(metadata, {CONVERTED_FROM: f"{kind.kind}.{kind.api_version}"}),
            "spec": job_spec,
        }
        self.paths.update(
            {
                "spec.runPolicy": "spec.runPolicy",
                "spec.scheduling": "spec.runPolicy.schedulingPolicy",
                "spec.replicas": f"spec.{kind.replicas_field}",
                "spec.type": "kind",
            }
        )
        ordered = sorted(self.paths.items(), key=lambda item: len(item[0]), reverse=True)
        return Conversion(
            job=job, jobtypes=tuple(extra), paths=tuple(ordered), defaulted_commands=tuple(self.defaulted_commands)
        )

    # -- replica specs ---------------------------------------------------------------------------------------

    def replicas(self, spec: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        """The roles, and each role's restartPolicy (as written or upstream's default)."""
        kind = self.kind
        field = f"spec.{kind.replicas_field}"
        specs = spec.get(kind.replicas_field)
        if not isinstance(specs, Mapping) or not specs:
            self.refuse(field, f"required: the replica specs, e.g. {kind.replicas_field}: {{Worker: {{...}}}}")
            return {}, {}
        policies = self.restart_policies(specs, field)
        by_role: dict[str, str] = {}
        roles: dict[str, Any] = {}
        taken: dict[str, str] = {}
        for name, replica in specs.items():
            where = f"{field}.{name}"
            role = kind.roles.get(str(name))
            if role is None:
                known = ", ".join(kind.roles)
                self.refuse(where, f"a {kind.kind} has the replica types {known}; {short(name)} is not one")
                continue
            if role in taken:
                self.refuse(where, f"{name} and {taken[role]} are the same replica type; keep one of them")
                continue
            taken[role] = str(name)
            if not isinstance(replica, Mapping):
                self.refuse(where, f"must be a replica spec with replicas and template, got {short(replica)}")
                continue
            for key in replica:
                if key not in ("replicas", "template", "restartPolicy"):
                    self.refuse(
                        f"{where}.{key}", "unknown field of a replica spec; it has replicas, template and restartPolicy"
                    )
            count = replica.get("replicas")
            if count is None:
                count = 1  # upstream's default
            if count == 0:
                continue  # no replica of this type, as upstream: the role is left out
            template, problems = replica_template(
                replica.get("template"), f"{where}.template", restart_policy=policies.get(str(name))
            )
            # A container without a command runs its image's entrypoint with its args, as on upstream's Pods; the
            # TrainingJob's validation and the backend decide (the embedded runtime needs a command or a stand-in).
            self.errors += problems
            roles[role] = {"count": count, "template": template}
            self.role_paths[role] = f"{where}.template.spec"
            if str(name) in policies:
                by_role[role] = policies[str(name)]
            self.record_role_paths(role, where, replica.get("template"))
        return roles, by_role

    def role_restart_policies(self, roles: Mapping[str, Any], policies: Mapping[str, str]) -> str | None:
        """The job-wide restartPolicy when every role's agrees; else each role gets its own (None returned).

        Upstream decides per replica type; Phalanx reads a role's own restartPolicy first, then the job's. One
        job-wide value keeps a converted spec short when they agree.
        """
        agreed = set(policies.values())
        if len(agreed) <= 1:
            return next(iter(agreed), None)
        for role, policy in policies.items():
            roles[role]["restartPolicy"] = _RESTART_POLICIES[policy]
            if policy == "ExitCode":
                roles[role]["retryableExitCodes"] = RETRYABLE_EXIT_CODES
            where = self.paths.get(f"spec.replicas.{role}", f"spec.replicas.{role}")
            self.paths[f"spec.replicas.{role}.restartPolicy"] = f"{where}.restartPolicy"
            self.paths[f"spec.replicas.{role}.retryableExitCodes"] = f"{where}.restartPolicy"
        return None

    def restart_policies(self, specs: Mapping[str, Any], field: str) -> dict[str, str]:
        """Each replica type's restartPolicy, as written or as upstream defaults it; refuses ``Always``."""
        kind = self.kind
        written = {
            str(name): replica["restartPolicy"]
            for name, replica in specs.items()
            if isinstance(replica, Mapping) and "restartPolicy" in replica
        }
        # A replica type that names none gets upstream's default; with no default of its own (an MPIJob's
        # workers) it follows the others, which decide.
        decided = next(iter(written.values()), None)
        policies: dict[str, str] = {}
        for name in specs:
            name = str(name)
            policy = written.get(name) or kind.default_restart.get(name) or kind.default_restart.get("*")
            if policy is None:
                policy = decided or next(iter(kind.default_restart.values()))
            if policy == "Always":
                self.refuse(
                    f"{field}.{name}.restartPolicy",
                    "Always would start a replica again after it succeeded, and a training job ends when its "
                    "replicas do: use OnFailure",
                )
                continue
            if not isinstance(policy, str) or policy not in _RESTART_POLICIES:
                self.refuse(
                    f"{field}.{name}.restartPolicy",
                    f"must be one of OnFailure, Never, ExitCode, got {short(policy)}",
                )
                continue
            policies[name] = str(policy)
        return policies

    def record_role_paths(self, role: str, where: str, template: Any) -> None:
        container = f"{where}.template.spec.containers[0]"
        base = f"spec.replicas.{role}"
        self.paths.update(
            {
                base: where,
                f"{base}.count": f"{where}.replicas",
                f"{base}.template": container,
                f"{base}.template.metadata": f"{where}.template.metadata",
            }
        )
        record_pod_paths(self.paths, f"{base}.template", f"{where}.template.spec", template)
        try:
            raw = template["spec"]["containers"][0]
        except (KeyError, IndexError, TypeError):
            return
        if not isinstance(raw, Mapping):
            return
        # An env variable's problem is reported at its entry of the container's env list...
        entries = raw.get("env")
        if isinstance(entries, list):
            for position, entry in enumerate(entries):
                if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                    self.paths[f"{base}.template.env.{entry['name']}"] = f"{container}.env[{position}]"
        # ...and an amount's at the requests or limits it was taken from.
        resource_paths(self.paths, f"{base}.template.resources", f"{container}.resources", raw.get("resources"))

    # -- runPolicy -------------------------------------------------------------------------------------------

    def run_policy(self, policy: Any, restart: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Phalanx's runPolicy and scheduling from upstream's runPolicy and the agreed restartPolicy."""
        run: dict[str, Any] = {}
        scheduling: dict[str, Any] = {}
        if restart is not None:
            run["restartPolicy"] = _RESTART_POLICIES[restart]
            if restart == "ExitCode":
                run["retryableExitCodes"] = RETRYABLE_EXIT_CODES
        if policy is None:
            return run, scheduling
        if not isinstance(policy, Mapping):
            self.refuse("spec.runPolicy", f"must be a mapping, got {short(policy)}")
            return run, scheduling
        for key, value in policy.items():
            where = f"spec.runPolicy.{key}"
            if key in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished", "suspend"):
                run[key] = value
            elif key == "cleanPodPolicy":
                if self.clean_pod_policy(value, where):
                    run["cleanPodPolicy"] = "None"
            elif key == "managedBy":
                if value != self.kind.controller:
                    self.refuse(
                        where,
                        f"{short(value)} would hand the job to another controller; Phalanx runs it itself: remove "
                        "managedBy",
                    )
            elif key == "schedulingPolicy":
                scheduling = self.scheduling_policy(value, where)
            else:
                self.refuse(where, "unknown field of a runPolicy; remove it")
        return run, scheduling

    def clean_pod_policy(self, value: Any, where: str) -> bool:
        """True for None: the replicas still running when the job ends keep running (Phalanx's own None).

        Running and All are Phalanx's default, Running: replicas still running are stopped and release their
        resources, while a finished replica's logs stay until the job is deleted (on Kubernetes its exited Pod
        stays, as under Running). All would delete exited Pods too: that frees nothing (they hold no resources)
        and would lose the logs, so All is taken as Running.
        """
        if value in ("Running", "All"):
            return False
        if value == "None":
            return True
        self.refuse(where, f"must be Running, All or None, got {short(value)}")
        return False

    def scheduling_policy(self, policy: Any, path: str) -> dict[str, Any]:
        if not isinstance(policy, Mapping):
            self.refuse(path, f"must be a mapping, got {short(policy)}")
            return {}
        scheduling: dict[str, Any] = {}
        for key, value in policy.items():
            where = f"{path}.{key}"
            if key == "minAvailable":
                scheduling["minAvailable"] = value
            elif key == "queue":
                if value not in ("", None):
                    scheduling["queue"] = value
            elif key == "priorityClass":
                if value not in ("", None):
                    scheduling["priorityClass"] = value
            elif key == "minResources":
                self.refuse(
                    where,
                    "Phalanx adds up the gang's resources from its replicas (minAvailable of them); remove it",
                )
            elif key == "scheduleTimeoutSeconds":
                self.refuse(
                    where,
                    "Phalanx keeps a gang queued until all of it fits, with no timeout; bound the whole job with "
                    "runPolicy.activeDeadlineSeconds instead",
                )
            else:
                self.refuse(where, "unknown field of a schedulingPolicy; remove it")
        return scheduling

    # -- kind-specific fields --------------------------------------------------------------------------------

    def add_env(
        self,
        job_spec: Mapping[str, Any],
        env: Mapping[str, str],
        *,
        upstream: str | None,
        roles: frozenset[str] | None = None,
    ) -> None:
        """Set ``env`` in every role's template (or only in ``roles``).

        Args:
            job_spec: the TrainingJob spec being built.
            env: the variables.
            upstream: the field they come from (they override the container's own), or None for what the
                upstream operator sets by itself (the container's own value wins).
            roles: the roles to set them in; None: all.
        """
        for role, replica in job_spec["replicas"].items():
            if roles is not None and role not in roles:
                continue
            template = replica["template"]
            own = template.get("env", {})
            template["env"] = {**own, **env} if upstream is not None else {**env, **own}
            if upstream is not None:
                for key in env:
                    self.paths[f"spec.replicas.{role}.template.env.{key}"] = upstream

    def pytorch(self, spec: Mapping[str, Any], job_spec: dict[str, Any]) -> None:
        if "elasticPolicy" in spec:
            self.refuse("spec.elasticPolicy", f"elastic PyTorch is not supported: {_GANG_FIXED}")
        self.kind_env(job_spec)
        nproc = spec.get("nprocPerNode")
        if nproc is None:
            return
        text = str(nproc)
        if text not in ("auto", "cpu", "gpu") and not (text.isdigit() and int(text) >= 1):
            self.refuse("spec.nprocPerNode", f"must be auto, cpu, gpu or a whole number >= 1, got {short(nproc)}")
            return
        # torchrun reads PET_NPROC_PER_NODE, as it does on upstream's Pods: each replica starts that many workers.
        self.add_env(job_spec, {"PET_NPROC_PER_NODE": text}, upstream="spec.nprocPerNode")

    def kind_env(self, job_spec: Mapping[str, Any]) -> None:
        # What the upstream operator sets besides the rendezvous; the user's own value wins.
        if self.kind.extra_env:
            self.add_env(job_spec, self.kind.extra_env, upstream=None)

    def tensorflow(self, spec: Mapping[str, Any]) -> None:
        policy = spec.get("successPolicy")
        if policy not in (None, "", "AllWorkers"):
            self.refuse("spec.successPolicy", f"must be AllWorkers or empty, got {short(policy)}")
        if spec.get("enableDynamicWorker") not in (None, False):
            self.refuse("spec.enableDynamicWorker", f"dynamic workers are not supported: {_GANG_FIXED}")

    def paddle(self, spec: Mapping[str, Any], job_spec: dict[str, Any]) -> None:
        if "elasticPolicy" in spec:
            self.refuse("spec.elasticPolicy", f"elastic Paddle is not supported: {_GANG_FIXED}")
        self.kind_env(job_spec)
        if "master" in job_spec["replicas"]:
            # With a master, upstream runs parameter-server mode and tells each worker it is one trainer.
            where = f"spec.{self.kind.replicas_field}.Worker"
            self.add_env(job_spec, {"PADDLE_TRAINER_NUM": "1"}, upstream=where, roles=frozenset({"worker"}))

    def mpi(
        self,
        spec: Mapping[str, Any],
        job_spec: dict[str, Any],
        jobtypes: Mapping[str, JobType],
        metadata: Any,
    ) -> dict[str, Any] | None:
        """Check the MPIJob fields; a JobType document when the hostfile differs from ``mpi``'s.

        A worker container with neither command nor args runs ``/usr/sbin/sshd -De``, as mpi-operator starts it:
        the launcher's mpirun logs in to the workers over SSH.
        """
        worker = job_spec["replicas"].get("worker")
        if isinstance(worker, dict) and not worker["template"].get("command") and not worker["template"].get("args"):
            worker["template"]["command"] = list(WORKER_SSHD)
            self.defaulted_commands.append("worker")
        implementation = spec.get("mpiImplementation", "OpenMPI")
        if implementation not in MPI_IMPLEMENTATIONS:
            self.refuse(
                "spec.mpiImplementation",
                f"must be OpenMPI, Intel or MPICH, got {short(implementation)}",
            )
            implementation = "OpenMPI"
        policy = spec.get("launcherCreationPolicy", "AtStartup")
        if policy != "AtStartup":
            self.refuse(
                "spec.launcherCreationPolicy",
                f"Phalanx starts the launcher with the workers, as a gang; {short(policy)} is not supported: "
                "remove it and let the launcher retry (restartPolicy OnFailure)",
            )
        self.mpi_ssh_keys(spec, job_spec)
        slots = spec.get("slotsPerWorker", 1)
        launcher_works = spec.get("runLauncherAsWorker", False)
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
            self.refuse("spec.slotsPerWorker", f"must be a whole number >= 1, got {short(slots)}")
            return None
        if not isinstance(launcher_works, bool):
            self.refuse("spec.runLauncherAsWorker", f"must be true or false, got {short(launcher_works)}")
            return None
        if not needs_own_mpi_jobtype(slots, launcher_works, implementation):
            return None
        base = jobtypes.get("mpi")
        if base is None:
            self.refuse("kind", "no JobType mpi is known to start an MPIJob from")
            return None
        return self.mpi_jobtype(base, slots, launcher_works, implementation, job_spec, metadata)

    def mpi_ssh_keys(self, spec: Mapping[str, Any], job_spec: dict[str, Any]) -> None:
        # mpi-operator makes every MPIJob a key pair and mounts it at sshAuthMountPath (default root's).
        path = spec.get("sshAuthMountPath", DEFAULT_SSH_MOUNT_PATH)
        if not isinstance(path, str):
            self.refuse("spec.sshAuthMountPath", f"must be a directory path, got {short(path)}")
            return
        job_spec["sshKeys"] = {"mountPath": path}
        self.paths["spec.sshKeys.mountPath"] = self.paths["spec.sshKeys"] = "spec.sshAuthMountPath"

    def mpi_jobtype(
        self,
        base: JobType,
        slots: int,
        launcher_works: bool,
        implementation: str,
        job_spec: dict[str, Any],
        metadata: Any,
    ) -> dict[str, Any]:
        namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
        document = mpi_jobtype_document(
            base,
            slots=slots,
            launcher_works=launcher_works,
            implementation=implementation,
            namespace=namespace,
        )
        job_spec["type"] = document["metadata"]["name"]
        self.paths["spec.slotsPerHost"] = "spec.slotsPerWorker"
        return document


def needs_own_mpi_jobtype(slots: int, launcher_works: bool, implementation: str) -> bool:
    """Whether an MPI job's hostfile differs from the built-in ``mpi`` JobType's (one slot, workers only, Open MPI)."""
    return slots != 1 or launcher_works or implementation != "OpenMPI"


def mpi_jobtype_document(
    base: JobType,
    *,
    slots: int,
    launcher_works: bool,
    implementation: str,
    namespace: str | None,
) -> dict[str, Any]:
    """The JobType document of an MPI job whose hostfile differs from ``base``'s (the ``mpi`` JobType).

    The hostfile is the JobType's: a type of its own, named by what differs (``mpi-intel-slots-4-launcher-as-
    worker``), so jobs alike share it. Used by MPIJobs and by TrainJobs on an ``mlPolicy.mpi`` runtime.

    Args:
        base: the ``mpi`` JobType.
        slots: the slots per host in the hostfile.
        launcher_works: the launcher is listed first in the hostfile, a worker too.
        implementation: OpenMPI, Intel or MPICH (the last two: Hydra's hostfile and variables).
        namespace: the job's namespace, for the JobType's.
    """
    name = "mpi" + ("" if implementation == "OpenMPI" else f"-{implementation.lower()}")
    if slots != 1:
        name += f"-slots-{slots}"
    if launcher_works:
        name += "-launcher-as-worker"
    document = base.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    spec = document["spec"]
    spec["slotsPerHost"] = slots
    spec["description"] = (
        f"The mpi JobType with {slots} slot(s) per host in the hostfile"
        + (", the launcher listed first as a worker too" if launcher_works else "")
        + (f", for {implementation} MPI's Hydra (host:slots lines)" if implementation != "OpenMPI" else "")
        + ", made for the MPI jobs of this shape (MPIJobs, and TrainJobs on an mlPolicy.mpi runtime)."
    )
    if launcher_works:
        spec["hostfileRoles"] = ["launcher", *[r for r in spec.get("hostfileRoles", []) if r != "launcher"]]
        spec["rankRoles"] = ["launcher", *[r for r in spec.get("rankRoles", []) if r != "launcher"]]
        if "worker" in spec["roles"]:
            spec["roles"]["worker"]["minCount"] = 0
    if implementation != "OpenMPI":
        spec["hostfileFormat"] = "Hydra"
        spec["env"] = {**_without_open_mpi(spec.get("env", {})), **hydra_env(implementation, slots)}
    document["metadata"] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "JobType", **document}


#: What an MPIJob worker without a command or args runs, as mpi-operator starts it.
WORKER_SSHD = ("/usr/sbin/sshd", "-De")

#: mpi-operator's ``mpiImplementation`` values.
MPI_IMPLEMENTATIONS = ("OpenMPI", "Intel", "MPICH")


def hydra_env(implementation: str, slots: int) -> dict[str, str]:
    """What mpi-operator sets for the Hydra ``mpiexec`` of Intel MPI or MPICH (the launcher's env upstream).

    The hostfile's path, ssh's retries while a worker's SSH server starts, and for Intel MPI the processes per
    host (``I_MPI_PERHOST``: the slots). Every replica gets them here, as it gets the Open MPI ones of ``mpi``.
    """
    if implementation == "Intel":
        return {
            "I_MPI_HYDRA_HOST_FILE": "{{ hostfile }}",
            "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": "-o ConnectionAttempts=10",
            "I_MPI_PERHOST": str(slots),
        }
    return {"HYDRA_HOST_FILE": "{{ hostfile }}", "HYDRA_LAUNCH_EXTRA_ARGS": "-o ConnectionAttempts=10"}


def _without_open_mpi(env: Mapping[str, str]) -> dict[str, str]:
    """The ``mpi`` JobType's env less Open MPI's own variables (``OMPI_MCA_*``, ``PRTE_MCA_*``)."""
    return {key: value for key, value in env.items() if not key.startswith(("OMPI_MCA_", "PRTE_MCA_"))}


def lift_scheduler_name(
    templates: Mapping[str, tuple[dict[str, Any], str]], errors: list[FieldError]
) -> tuple[str, str] | None:
    """The one ``schedulerName`` the pod templates name (and where it is written), taken out of the templates.

    Phalanx places a job's replicas as one gang, by one scheduler (``spec.scheduling.schedulerName``); templates
    that name different schedulers, or some none, are refused at the path of the odd one out.

    Args:
        templates: by role, the converted replica template and the path of its pod spec in the document.
        errors: where a refusal is added.
    """
    named = {role: (template.pop("schedulerName"), path) for role, (template, path) in templates.items()
             if "schedulerName" in template}  # fmt: skip
    if not named:
        return None
    first, first_path = next(iter(named.values()))
    for role, (_, path) in templates.items():
        name = named.get(role, (None, ""))[0]
        if name != first:
            errors.append(
                FieldError(
                    f"{path}.schedulerName",
                    f"{short(name) if name is not None else 'no scheduler'} differs from {short(first)} at "
                    f"{first_path}.schedulerName: Phalanx places a job's replicas together, by one scheduler; name "
                    "the same one in every replica type's template",
                )
            )
    return first, f"{first_path}.schedulerName"


def _annotated(metadata: Any, annotations: Mapping[str, str]) -> Any:
    if not isinstance(metadata, Mapping):
        return metadata  # validation names what is wrong with it
    existing = metadata.get("annotations")
    if existing is not None and not isinstance(existing, Mapping):
        return metadata
    return {**metadata, "annotations": {**(existing or {}), **annotations}}
