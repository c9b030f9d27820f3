"""Kubeflow Trainer v2: a TrainJob and the (Cluster)TrainingRuntime it names, turned into a TrainingJob.

A TrainJob (``trainer.kubeflow.org/v1alpha1``) names a runtime (``spec.runtimeRef``): a ClusterTrainingRuntime
(the default kind) or a TrainingRuntime of its namespace, from the same file or, for ClusterTrainingRuntimes,
one Phalanx ships (``runtimes/``: torch-, jax-, xgboost-, deepspeed- and mlx-distributed). The runtime says what
kind of job it is (``mlPolicy``: ``torch`` → the ``pytorch`` JobType; ``jax``, ``xgboost``; ``mpi`` → an ``mpi``
JobType; none → ``generic``) and holds the node's pod template (the replicated job named ``node``); the
TrainJob's ``trainer`` replaces its image, command, args and resources, adds to its env, and sets the node count
(``numNodes``) and processes per node (``numProcPerNode``, given to torchrun as ``PET_NPROC_PER_NODE``).

An MPI runtime (``mlPolicy.mpi``) also has the replicated job ``launcher``, which runs mpirun: it becomes the
launcher role and takes the trainer's image, command and args, while ``node`` becomes the workers, as upstream's
MPI plugin decides (``runLauncherAsNode``: the launcher is a host too and one of numNodes; ``numProcPerNode``:
the slots per host). The JobType for the hostfile is made as for an MPIJob (``convert.mpi_jobtype_document``).

As for the v1 kinds (``kubeflow.convert``), every field is mapped or refused with its path; a problem in the
runtime's part is named at the runtime's path, with the runtime's kind and name in the message.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from phalanx.model.errors import FieldError, SpecError, short
from phalanx.model.jobs import DEFAULT_SSH_MOUNT_PATH
from phalanx.model.jobtypes import JobType
from phalanx.model.kubeflow.convert import (
    CONVERTED_FROM,
    MPI_IMPLEMENTATIONS,
    Conversion,
    lift_scheduler_name,
    mpi_jobtype_document,
    needs_own_mpi_jobtype,
    record_pod_paths,
)
from phalanx.model.kubeflow.pods import container_env, container_resources, replica_template, resource_paths
from phalanx.model.kubeflow.runtime_patches import Patched, apply_runtime_patches
from phalanx.model.loading import parse_documents

TRAINER_V1ALPHA1 = "trainer.kubeflow.org/v1alpha1"
TRAINJOB = "TrainJob"
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
TRAINJOB_CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
#: The replicated job of a runtime that runs the training nodes (the one the TrainJob's trainer overrides).
NODE = "node"
#: The replicated job of an MPI runtime that runs mpirun (the one the trainer overrides there).
LAUNCHER = "launcher"
#: Each replicated job's role in the TrainingJob.
_ROLES = {NODE: "worker", LAUNCHER: "launcher"}
#: The label that marks the replicated job the TrainJob's trainer overrides, and its value.
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
#: Variables the MPI runtime sets for mpirun (the hostfile, its slots, ssh's retries): upstream refuses them in
#: a trainer's env, as here, where the mpi JobType sets them.
MPI_RESERVED_ENV = (
    "OMPI_MCA_orte_default_hostfile",
    "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_set_default_slots",
    "OMPI_MCA_plm_rsh_args",
)
#: An mlPolicy.mpi's options and upstream's defaults.
_MPI_DEFAULTS = {
    "numProcPerNode": 1,
    "mpiImplementation": "OpenMPI",
    "sshAuthMountPath": DEFAULT_SSH_MOUNT_PATH,
    "runLauncherAsNode": False,
}
#: mlPolicy entries with no options, and the JobType each becomes.
_PLAIN_POLICIES = {"jax": "jax", "xgboost": "xgboost"}
#: Gang schedulers a runtime's podGroupPolicy may name: Phalanx schedules every job as a gang itself, so each
#: means what Phalanx does anyway.
_GANG_POLICIES = ("coscheduling", "volcano")


@dataclass(frozen=True)
class RuntimeKey:
    """How a TrainJob finds its runtime: kind, namespace (None for a ClusterTrainingRuntime) and name."""

    kind: str
    namespace: str | None
    name: str


def is_runtime(document: Mapping[str, Any]) -> bool:
    """Whether a document is a (Cluster)TrainingRuntime."""
    return document.get("kind") in RUNTIME_KINDS


def runtime_key(document: Mapping[str, Any]) -> RuntimeKey | None:
    """The key a runtime document is found by, or None when it has no usable name."""
    metadata = document.get("metadata")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        return None
    kind = str(document.get("kind"))
    namespace = None if kind == "ClusterTrainingRuntime" else str(metadata.get("namespace") or "default")
    return RuntimeKey(kind, namespace, metadata["name"])


def check_runtime(document: Mapping[str, Any]) -> list[FieldError]:
    """What is wrong with a runtime document as a whole (its parts are checked when a TrainJob uses it)."""
    errors = []
    if document.get("apiVersion") != TRAINER_V1ALPHA1:
        errors.append(
            FieldError(
                "apiVersion", f"a {document.get('kind')} is {TRAINER_V1ALPHA1}, got {short(document.get('apiVersion'))}"
            )
        )
    if runtime_key(document) is None:
        errors.append(FieldError("metadata.name", "required: the name TrainJobs give in runtimeRef.name"))
    if not isinstance(document.get("spec"), Mapping):
        errors.append(FieldError("spec", "required: mlPolicy and the template of the node"))
    return errors


@functools.cache
def _shipped() -> dict[RuntimeKey, dict[str, Any]]:
    found: dict[RuntimeKey, dict[str, Any]] = {}
    folder = resources.files("phalanx.model.kubeflow") / "runtimes"
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if entry.name.endswith(".yaml"):
            (document,) = parse_documents(entry.read_text(encoding="utf-8"), source=entry.name)
            key = runtime_key(document)
            assert key is not None, entry.name
            found[key] = document
    return found


def shipped_runtimes() -> dict[RuntimeKey, dict[str, Any]]:
    """The ClusterTrainingRuntimes Phalanx ships, by key (equivalents of those Kubeflow Trainer installs)."""
    return dict(_shipped())


def convert_trainjob(
    document: Mapping[str, Any],
    runtimes: Mapping[RuntimeKey, Mapping[str, Any]],
    jobtypes: Mapping[str, JobType] | None = None,
) -> Conversion:
    """The TrainingJob a TrainJob becomes with its runtime (and, on an MPI runtime, any JobType it needs).

    Args:
        document: the TrainJob.
        runtimes: the runtimes it may name (those of its file, then the shipped ones).
        jobtypes: the JobTypes known (an MPI runtime's job starts from ``mpi``).

    Raises:
        SpecError: every field that cannot be honoured, each with its path.
    """
    return _TrainJob(document, jobtypes or {}).run(runtimes)


class _TrainJob:
    def __init__(self, document: Mapping[str, Any], jobtypes: Mapping[str, JobType]) -> None:
        self.document = document
        self.jobtypes = jobtypes
        #: The options of an mlPolicy.mpi (upstream's defaults filled in), or None for other runtimes.
        self.mpi: dict[str, Any] | None = None
        #: JobType documents the job needs besides the known ones (an MPI runtime's hostfile of its own).
        self.made: list[dict[str, Any]] = []
        self.errors: list[FieldError] = []
        self.paths: dict[str, str] = {}
        self.runtime_name = ""
        #: Labels and annotations of the runtime's JobSet and Job templates: Phalanx makes neither object, so
        #: they go to the TrainingJob, which stands where they stand (under the TrainJob's own).
        self.object_metadata: dict[str, dict[str, Any]] = {}
        self.patched = Patched(None)
        self.pod_paths: dict[str, str] = {}  # each role's pod template in the runtime (runtime-relative)

    def refuse(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def refuse_in_runtime(self, path: str, message: str) -> None:
        self.errors.append(FieldError(self.in_runtime(path), message))

    def refuse_in_template(self, path: str, message: str) -> None:
        """A refusal in the (patched) runtime template: named at the patch when a runtime patch wrote the field."""
        origin = self.patched.origin(path)
        self.errors.append(FieldError(origin if origin != path else self.in_runtime(path), message))

    def in_runtime(self, path: str) -> str:
        """A path in the runtime's document, named by the runtime: ``ClusterTrainingRuntime/NAME spec...``."""
        return f"{self.runtime_name} {path}"

    def run(self, runtimes: Mapping[RuntimeKey, Mapping[str, Any]]) -> Conversion:
        document = self.document
        if document.get("apiVersion") != TRAINER_V1ALPHA1:
            self.refuse("apiVersion", f"a TrainJob is {TRAINER_V1ALPHA1}, got {short(document.get('apiVersion'))}")
        for key in document:
            if key not in ("apiVersion", "kind", "metadata", "spec", "status"):
                self.refuse(key, "unknown field of a TrainJob; it has apiVersion, kind, metadata and spec")
        spec = document.get("spec")
        metadata = document.get("metadata")
        if not isinstance(spec, Mapping):
            self.refuse("spec", "required: a TrainJob spec with runtimeRef")
            raise SpecError(self.errors)
        runtime = self.find_runtime(spec.get("runtimeRef"), metadata, runtimes)
        trainer = spec.get("trainer") or {}
        if not isinstance(trainer, Mapping):
            self.refuse("spec.trainer", f"must be a mapping, got {short(trainer)}")
            trainer = {}
        job_spec: dict[str, Any] = {}
        if runtime is not None:
            job_spec = self.from_runtime(runtime, trainer, spec.get("runtimePatches"))
        self.trainjob_fields(spec, job_spec)
        job_metadata = self.job_metadata(metadata, spec)
        if self.errors:
            raise SpecError(self.errors)
        job = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": job_metadata, "spec": job_spec}
        self.paths.update({"spec.replicas": "spec.trainer", "spec.runPolicy.suspend": "spec.suspend"})
        ordered = sorted(self.paths.items(), key=lambda item: len(item[0]), reverse=True)
        return Conversion(job=job, jobtypes=tuple(self.made), paths=tuple(ordered))

    def find_runtime(
        self, ref: Any, metadata: Any, runtimes: Mapping[RuntimeKey, Mapping[str, Any]]
    ) -> Mapping[str, Any] | None:
        if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str):
            self.refuse("spec.runtimeRef.name", "required: the runtime to use, e.g. torch-distributed")
            return None
        for key in ref:
            if key not in ("name", "kind", "apiGroup"):
                self.refuse(f"spec.runtimeRef.{key}", "unknown field of a runtimeRef; it has name, kind and apiGroup")
        if ref.get("apiGroup", "trainer.kubeflow.org") != "trainer.kubeflow.org":
            self.refuse("spec.runtimeRef.apiGroup", f"must be trainer.kubeflow.org, got {short(ref.get('apiGroup'))}")
        kind = ref.get("kind", "ClusterTrainingRuntime")
        if kind not in RUNTIME_KINDS:
            self.refuse("spec.runtimeRef.kind", f"must be ClusterTrainingRuntime or TrainingRuntime, got {short(kind)}")
            return None
        namespace = None
        if kind == "TrainingRuntime":
            namespace = str((metadata or {}).get("namespace") or "default") if isinstance(metadata, Mapping) else None
        key = RuntimeKey(kind, namespace, ref["name"])
        runtime = runtimes.get(key)
        if runtime is None:
            known = sorted(k.name for k in runtimes if k.kind == kind and k.namespace == namespace)
            where = f" in namespace {namespace}" if namespace else ""
            self.refuse(
                "spec.runtimeRef.name",
                f"no {kind} {ref['name']!r}{where}; put it in the same file as the TrainJob"
                + (f", or use one of {', '.join(known)}" if known else ""),
            )
        self.runtime_name = f"{kind}/{ref['name']}"
        return runtime

    # -- the runtime, with the trainer's overrides -----------------------------------------------------------

    def from_runtime(self, runtime: Mapping[str, Any], trainer: Mapping[str, Any], patches: Any) -> dict[str, Any]:
        spec = runtime.get("spec") if isinstance(runtime.get("spec"), Mapping) else {}
        assert isinstance(spec, Mapping)
        for key in spec:
            if key not in ("mlPolicy", "podGroupPolicy", "template"):
                self.refuse_in_runtime(f"spec.{key}", "unknown field of a runtime; remove it")
        jobtype, nodes, nproc = self.ml_policy(spec.get("mlPolicy"))
        self.pod_group_policy(spec.get("podGroupPolicy"))
        self.patched = apply_runtime_patches(spec.get("template"), patches)
        self.errors += self.patched.errors
        roles = self.replicated_jobs(self.patched.template)
        if self.mpi is not None:
            return self.mpi_job(roles, nodes, trainer)
        template, restart = roles.get("worker", ({}, None))
        if "numNodes" in trainer:
            nodes = trainer["numNodes"]
            self.paths["spec.replicas.worker.count"] = "spec.trainer.numNodes"
        if "numProcPerNode" in trainer:
            nproc = trainer["numProcPerNode"]
        self.apply_trainer(template, trainer)
        if not template.get("command") and "command" not in trainer and not template.get("image"):
            self.refuse(
                "spec.trainer.command",
                f"required: the program each node runs, e.g. [torchrun, train.py] ({self.runtime_name} gives none)",
            )
        if not template.get("command"):
            # The image's entrypoint runs; where a command is needed (the embedded runtime), the trainer gives it.
            self.paths["spec.replicas.worker.template.command"] = "spec.trainer.command"
        if jobtype == "pytorch" and nproc is not None:
            text = str(nproc)
            if text not in ("auto", "cpu", "gpu") and not (text.isdigit() and int(text) >= 1):
                where = (
                    "spec.trainer.numProcPerNode"
                    if "numProcPerNode" in trainer
                    else self.in_runtime("spec.mlPolicy.torch.numProcPerNode")
                )
                self.refuse(where, f"must be auto, cpu, gpu or a whole number >= 1, got {short(nproc)}")
            # torchrun reads it, as on the Pods of upstream's torch plugin.
            template["env"] = {**template.get("env", {}), "PET_NPROC_PER_NODE": text}
            self.paths["spec.replicas.worker.template.env.PET_NPROC_PER_NODE"] = "spec.trainer.numProcPerNode"
        job_spec: dict[str, Any] = {"type": jobtype, "replicas": {"worker": {"count": nodes, "template": template}}}
        if restart is not None:
            job_spec["runPolicy"] = {"restartPolicy": restart}
        if "schedulerName" in template:  # the node pod's scheduler places the job's gang
            job_spec["scheduling"] = {"schedulerName": template.pop("schedulerName")}
            pod_spec = f"{self.pod_paths.get('worker', '')}.spec.schedulerName"
            origin = self.patched.origin(pod_spec)
            self.paths["spec.scheduling.schedulerName"] = origin if origin != pod_spec else self.in_runtime(pod_spec)
        return job_spec

    def ml_policy(self, policy: Any) -> tuple[str, Any, Any]:
        """The JobType, the node count and the processes per node a runtime's mlPolicy says."""
        if policy is None:
            return "generic", 1, None
        if not isinstance(policy, Mapping):
            self.refuse_in_runtime("spec.mlPolicy", f"must be a mapping, got {short(policy)}")
            return "generic", 1, None
        nodes = policy.get("numNodes", 1)
        self.paths["spec.replicas.worker.count"] = self.in_runtime("spec.mlPolicy.numNodes")
        for key in policy:
            if key not in ("numNodes", "torch", "mpi", *_PLAIN_POLICIES):
                self.refuse_in_runtime(f"spec.mlPolicy.{key}", "unknown field of an mlPolicy; remove it")
        frameworks = [key for key in policy if key in ("torch", "mpi", *_PLAIN_POLICIES)]
        for extra in frameworks[1:]:
            self.refuse_in_runtime(
                f"spec.mlPolicy.{extra}",
                f"a runtime has one framework policy; {frameworks[0]} and {extra} are both given: keep one",
            )
        for key, jobtype in _PLAIN_POLICIES.items():
            if key in policy:
                # Upstream's jax and xgboost plugins take no options: they give every node the coordinator or
                # tracker address, the node count and its rank, as Phalanx's JobType of the same name does.
                if policy[key] not in (None, {}):
                    self.refuse_in_runtime(f"spec.mlPolicy.{key}", f"takes no options; write {key}: {{}}")
                return jobtype, nodes, None
        if "mpi" in policy:
            self.mpi = self.mpi_policy(policy["mpi"])
            return "mpi", nodes, None
        torch = policy.get("torch")
        if torch is None:
            return "generic", nodes, None
        if not isinstance(torch, Mapping):
            self.refuse_in_runtime("spec.mlPolicy.torch", f"must be a mapping, got {short(torch)}")
            return "pytorch", nodes, None
        for key in torch:
            if key == "elasticPolicy":
                self.refuse_in_runtime(
                    "spec.mlPolicy.torch.elasticPolicy",
                    "Phalanx runs a job as a gang of a fixed size, so it cannot grow or shrink one; remove it",
                )
            elif key != "numProcPerNode":
                self.refuse_in_runtime(f"spec.mlPolicy.torch.{key}", "unknown field of a torch policy; remove it")
        return "pytorch", nodes, torch.get("numProcPerNode", "auto")

    def pod_group_policy(self, policy: Any) -> None:
        # Phalanx admits every job as a gang: coscheduling is what it does anyway, less a timeout.
        if policy is None:
            return
        if not isinstance(policy, Mapping):
            self.refuse_in_runtime("spec.podGroupPolicy", f"must be a mapping, got {short(policy)}")
            return
        for key, value in policy.items():
            where = f"spec.podGroupPolicy.{key}"
            if key not in _GANG_POLICIES:
                self.refuse_in_runtime(
                    where, "Phalanx schedules every job as a gang itself; use coscheduling or volcano, or remove it"
                )
                continue
            if value is not None and not isinstance(value, Mapping):
                self.refuse_in_runtime(where, f"must be a mapping, got {short(value)}")
                continue
            for option in value or {}:
                if key == "coscheduling" and option == "scheduleTimeoutSeconds":
                    self.refuse_in_runtime(
                        f"{where}.scheduleTimeoutSeconds",
                        "Phalanx keeps a gang queued until all of it fits, with no timeout; remove it",
                    )
                else:
                    self.refuse_in_runtime(
                        f"{where}.{option}",
                        f"is not supported: Phalanx places the gang itself and has no {key} option {option!r}; "
                        "remove it",
                    )

    def replicated_jobs(self, template: Any) -> dict[str, tuple[dict[str, Any], str | None]]:
        """Each role's replica template and pod restartPolicy, from the runtime's JobSet template.

        The replicated job ``node`` is the workers; an MPI runtime's ``launcher`` is the launcher.
        """
        base = "spec.template"
        wanted = "the replicated jobs 'launcher' and 'node'" if self.mpi is not None else "the replicated job 'node'"
        if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
            self.refuse_in_runtime(base, f"required: a JobSet template with {wanted}")
            return {}
        for key in template:
            if key not in ("spec", "metadata"):
                self.refuse_in_runtime(f"{base}.{key}", "unknown field of a runtime template; remove it")
        self.take_object_metadata(template.get("metadata"), f"{base}.metadata")
        jobset = template["spec"]
        for key, value in jobset.items():
            if key == "network":
                self.jobset_network(value, f"{base}.spec.network")
            elif key == "successPolicy" and self.mpi is not None:
                self.jobset_success_policy(value, f"{base}.spec.successPolicy")
            elif key != "replicatedJobs":
                self.refuse_in_runtime(
                    f"{base}.spec.{key}", "a JobSet field Phalanx does not honour (it runs no JobSet); remove it"
                )
        jobs = jobset.get("replicatedJobs")
        if not isinstance(jobs, list):
            self.refuse_in_runtime(f"{base}.spec.replicatedJobs", f"required: {wanted}")
            return {}
        names = (NODE, LAUNCHER) if self.mpi is not None else (NODE,)
        found: dict[str, tuple[dict[str, Any], str | None]] = {}
        for position, job in enumerate(jobs):
            name = job.get("name") if isinstance(job, Mapping) else None
            where = f"{base}.spec.replicatedJobs[{position}]"
            if name not in names or _ROLES[str(name)] in found:
                self.refuse_in_runtime(
                    where,
                    f"only {wanted} {'are' if self.mpi is not None else 'is'} supported ({short(name)}: "
                    "initializers are not supported yet, and a launcher only with mlPolicy.mpi); remove it",
                )
                continue
            assert isinstance(job, Mapping)
            role = _ROLES[str(name)]
            found[role] = self.replicated_job(job, where, role)
        for name in names:
            if _ROLES[name] not in found:
                self.refuse_in_runtime(f"{base}.spec.replicatedJobs", f"required: the replicated job {name!r}")
        return found

    def jobset_network(self, network: Any, where: str) -> None:
        # Phalanx gives every replica a stable hostname, published before it is ready (so MPI and rendezvous
        # peers find each other while they start): what these two options ask a JobSet for.
        if not isinstance(network, Mapping):
            self.refuse_in_runtime(where, f"must be a mapping, got {short(network)}")
            return
        for key, value in network.items():
            if key in ("publishNotReadyAddresses", "enableDNSHostnames"):
                if value is not True:
                    self.refuse_in_runtime(
                        f"{where}.{key}",
                        f"Phalanx always gives replicas hostnames, published before they are ready; {short(value)} "
                        "cannot be honoured: remove it",
                    )
            else:
                self.refuse_in_runtime(
                    f"{where}.{key}", "Phalanx names the replicas' hosts itself (docs/jobs.md); remove it"
                )

    def jobset_success_policy(self, policy: Any, where: str) -> None:
        # An MPI job succeeds when its launcher does: the mpi JobType's successRoles, whatever the operator.
        if not isinstance(policy, Mapping):
            self.refuse_in_runtime(where, f"must be a mapping, got {short(policy)}")
            return
        for key, value in policy.items():
            if key == "operator":
                if value not in ("All", "Any"):
                    self.refuse_in_runtime(f"{where}.operator", f"must be All or Any, got {short(value)}")
            elif key == "targetReplicatedJobs":
                if value != [LAUNCHER]:
                    self.refuse_in_runtime(
                        f"{where}.targetReplicatedJobs",
                        f"an MPI job succeeds when its launcher does; {short(value)} cannot be honoured: write "
                        "[launcher] or remove successPolicy",
                    )
            else:
                self.refuse_in_runtime(f"{where}.{key}", "unknown field of a JobSet successPolicy; remove it")

    def replicated_job(self, job: Mapping[str, Any], where: str, role: str) -> tuple[dict[str, Any], str | None]:
        """The replica template and pod restartPolicy of one replicated job, with the paths of its fields."""
        for key in job:
            if key == "dependsOn" and role == "launcher":
                if job[key] != [{"name": NODE, "status": "Ready"}]:
                    self.refuse_in_runtime(
                        f"{where}.dependsOn",
                        "Phalanx starts the launcher with the nodes, as a gang (mpirun retries its ssh connections "
                        f"while a node's SSH server starts); {short(job[key])} cannot be honoured: write "
                        "[{name: node, status: Ready}] or remove it",
                    )
            elif key not in ("name", "template", "replicas"):
                self.refuse_in_runtime(f"{where}.{key}", "unknown field of a replicated job; remove it")
        if job.get("replicas", 1) != 1:
            count = "mlPolicy.numNodes" if role == "worker" else "one launcher"
            self.refuse_in_runtime(f"{where}.replicas", f"the count is {count}; remove replicas")
        job_template = job.get("template")
        if not isinstance(job_template, Mapping) or not isinstance(job_template.get("spec"), Mapping):
            self.refuse_in_runtime(f"{where}.template.spec", "required: the Job spec with the pod template")
            return {}, None
        for key in job_template:
            if key not in ("spec", "metadata"):
                self.refuse_in_runtime(f"{where}.template.{key}", "unknown field of a Job template; remove it")
        self.take_object_metadata(job_template.get("metadata"), f"{where}.template.metadata")
        for key in job_template["spec"]:
            if key != "template":
                self.refuse_in_runtime(
                    f"{where}.template.spec.{key}", "Phalanx sets the node count and retries itself; remove it"
                )
        pod = job_template["spec"].get("template")
        restart = None
        if isinstance(pod, Mapping) and isinstance(pod.get("spec"), Mapping):
            restart = pod["spec"].get("restartPolicy")
            if restart not in (None, "Never", "OnFailure"):
                self.refuse_in_runtime(
                    f"{where}.template.spec.template.spec.restartPolicy",
                    f"must be Never or OnFailure, got {short(restart)}",
                )
                restart = None
        pod_path = f"{where}.template.spec.template"
        self.pod_paths[role] = pod_path
        result, problems = replica_template(pod, pod_path, restart_policy=restart)
        for problem in problems:
            self.refuse_in_template(problem.path, problem.message)
        ours = f"spec.replicas.{role}"
        self.paths.update(
            {
                f"{ours}.template": self.in_runtime(f"{pod_path}.spec.containers[0]"),
                f"{ours}.template.metadata": self.in_runtime(f"{pod_path}.metadata"),
                ours: self.in_runtime(pod_path),
            }
        )
        record_pod_paths(self.paths, f"{ours}.template", self.in_runtime(f"{pod_path}.spec"), pod)
        for key, path in list(self.paths.items()):
            if path.startswith(f"{self.runtime_name} "):
                runtime_path = path[len(self.runtime_name) + 1 :]
                if self.patched.origin(runtime_path) != runtime_path:
                    self.paths[key] = self.patched.origin(runtime_path)
        return result, restart

    def take_object_metadata(self, metadata: Any, where: str) -> None:
        """Labels and annotations of the JobSet or Job template, for the TrainingJob."""
        if metadata is None:
            return
        if not isinstance(metadata, Mapping):
            self.refuse_in_template(where, f"must be a mapping of labels and annotations, got {short(metadata)}")
            return
        for key, value in metadata.items():
            if key not in ("labels", "annotations"):
                self.refuse_in_template(
                    f"{where}.{key}", "Phalanx names the objects it makes; only labels and annotations are taken"
                )
            elif not isinstance(value, Mapping):
                self.refuse_in_template(f"{where}.{key}", f"must be a mapping of strings, got {short(value)}")
            else:
                self.object_metadata.setdefault(key, {}).update(value)

    def apply_trainer(
        self, template: dict[str, Any], trainer: Mapping[str, Any], role: str = "worker", *, container: bool = True
    ) -> None:
        """The TrainJob's trainer over the container of ``role``'s template.

        ``container`` False: only its env and resourcesPerNode (an MPI runtime's nodes when the launcher is one).
        """
        ours = f"spec.replicas.{role}.template"
        for key, value in trainer.items():
            where = f"spec.trainer.{key}"
            if key in ("image", "command", "args"):
                if container:
                    template[key] = value
                    self.paths[f"{ours}.{key}"] = where
            elif key == "env":
                self.trainer_env(template, value, where, ours, report=container)
            elif key == "resourcesPerNode":
                resources, problems = container_resources(value, where)
                if container:
                    self.errors += problems
                template["resources"] = resources
                resource_paths(self.paths, f"{ours}.resources", where, value)
            elif key not in ("numNodes", "numProcPerNode") and container:
                self.refuse(where, "unknown field of a trainer; remove it")

    def trainer_env(self, template: dict[str, Any], env: Any, where: str, ours: str, *, report: bool) -> None:
        """The trainer's env over the template's; ``report``: refuse what is wrong (once, for the first role)."""
        if not isinstance(env, list):
            if report:
                self.refuse(where, f"must be a list of {{name, value}} entries, got {short(env)}")
            return
        given, problems = container_env(env, where)
        if report:
            self.errors += problems
        merged = dict(template.get("env", {}))
        for name in given:
            merged.pop(name, None)  # the trainer's value wins over the runtime's
        merged.update(given)
        for position, item in enumerate(env):
            if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                self.paths[f"{ours}.env.{item['name']}"] = f"{where}[{position}]"
        template["env"] = merged

    # -- MPI runtimes ----------------------------------------------------------------------------------------

    def mpi_policy(self, policy: Any) -> dict[str, Any]:
        """An mlPolicy.mpi's options, upstream's defaults filled in; what is wrong is refused at its path."""
        options = dict(_MPI_DEFAULTS)
        where = "spec.mlPolicy.mpi"
        if policy is None:
            return options
        if not isinstance(policy, Mapping):
            self.refuse_in_runtime(where, f"must be a mapping, got {short(policy)}")
            return options
        for key, value in policy.items():
            path = f"{where}.{key}"
            if key not in _MPI_DEFAULTS:
                self.refuse_in_runtime(path, "unknown field of an mpi policy; remove it")
            elif key == "numProcPerNode" and (not _whole(value) or value < 1):
                self.refuse_in_runtime(path, f"must be a whole number >= 1, got {short(value)}")
            elif key == "mpiImplementation" and value not in (*MPI_IMPLEMENTATIONS, ""):
                self.refuse_in_runtime(path, f"must be {', '.join(MPI_IMPLEMENTATIONS)}, got {short(value)}")
            elif key == "sshAuthMountPath" and not isinstance(value, str):
                self.refuse_in_runtime(path, f"must be a directory path, got {short(value)}")
            elif key == "runLauncherAsNode" and not isinstance(value, bool):
                self.refuse_in_runtime(path, f"must be true or false, got {short(value)}")
            elif value is not None and value != "":
                options[key] = value
        return options

    def mpi_job(
        self, roles: Mapping[str, tuple[dict[str, Any], str | None]], nodes: Any, trainer: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The TrainingJob spec of a TrainJob on an mlPolicy.mpi runtime: a launcher and its workers.

        As upstream's MPI plugin: the trainer's image, command and args go to the launcher (the replicated job
        the trainer overrides); its env and resourcesPerNode too, and to the nodes when the launcher is a node
        itself (runLauncherAsNode), which then takes one of numNodes. numProcPerNode is the slots per host.
        """
        assert self.mpi is not None
        mpi = self.mpi
        policy = "spec.mlPolicy.mpi"
        launcher, launcher_restart = roles.get("launcher", ({}, None))
        worker, worker_restart = roles.get("worker", ({}, None))
        as_node = bool(mpi["runLauncherAsNode"])
        nodes_path = self.in_runtime("spec.mlPolicy.numNodes")
        if "numNodes" in trainer:
            nodes, nodes_path = trainer["numNodes"], "spec.trainer.numNodes"
        count = nodes
        if as_node and _whole(nodes):
            if nodes < 1:
                self.errors.append(FieldError(nodes_path, f"must be >= 1, got {nodes}"))
            count = max(nodes - 1, 1)  # the launcher is one of them; the node replicated job runs at least one
        self.paths["spec.replicas.worker.count"] = nodes_path
        self.reserved_env(trainer.get("env"))
        self.apply_trainer(launcher, trainer, "launcher")
        if as_node:
            self.apply_trainer(worker, trainer, "worker", container=False)
        if (
            "launcher" in roles
            and not launcher.get("command")
            and "command" not in trainer
            and not launcher.get("image")
        ):
            self.refuse(
                "spec.trainer.command",
                f"required: the program the launcher runs, e.g. [mpirun, python, train.py] ({self.runtime_name} "
                "gives none)",
            )
        if not launcher.get("command"):
            self.paths["spec.replicas.launcher.template.command"] = "spec.trainer.command"
        slots = self.mpi_slots(trainer, launcher)
        job_spec: dict[str, Any] = {
            "type": "mpi",
            "replicas": {
                "launcher": {"count": 1, "template": launcher},
                "worker": {"count": count, "template": worker},
            },
            "sshKeys": {"mountPath": mpi["sshAuthMountPath"]},
        }
        self.paths["spec.sshKeys"] = self.in_runtime(f"{policy}.sshAuthMountPath")
        self.paths["spec.type"] = self.in_runtime(policy)
        if launcher_restart is not None and launcher_restart == worker_restart:
            job_spec["runPolicy"] = {"restartPolicy": launcher_restart}
        else:
            for role, restart in (("launcher", launcher_restart), ("worker", worker_restart)):
                if restart is not None:
                    job_spec["replicas"][role]["restartPolicy"] = restart
                    pod_spec = f"{self.pod_paths[role]}.spec"
                    self.paths[f"spec.replicas.{role}.restartPolicy"] = self.in_runtime(f"{pod_spec}.restartPolicy")
        scheduler = lift_scheduler_name(
            {
                role: (job_spec["replicas"][role]["template"], self.in_runtime(f"{path}.spec"))
                for role, path in self.pod_paths.items()
            },
            self.errors,
        )
        if scheduler is not None:
            job_spec["scheduling"] = {"schedulerName": scheduler[0]}
            self.paths["spec.scheduling.schedulerName"] = scheduler[1]
        implementation = str(mpi["mpiImplementation"])
        if slots is not None and needs_own_mpi_jobtype(slots, as_node, implementation):
            base = self.jobtypes.get("mpi")
            if base is None:
                self.refuse_in_runtime(policy, "no JobType mpi is known to start an MPI job from")
                return job_spec
            metadata = self.document.get("metadata")
            namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
            document = mpi_jobtype_document(
                base,
                slots=slots,
                launcher_works=as_node,
                implementation=implementation,
                namespace=namespace if isinstance(namespace, str) else None,
            )
            job_spec["type"] = document["metadata"]["name"]
            self.made.append(document)
        return job_spec

    def mpi_slots(self, trainer: Mapping[str, Any], launcher: Mapping[str, Any]) -> int | None:
        """The slots per host: the trainer's numProcPerNode, else the runtime's.

        A runtime's 1 is the GPUs per node when a node has more than one, as upstream's MPI plugin decides.
        """
        assert self.mpi is not None
        if "numProcPerNode" in trainer:
            value = trainer["numProcPerNode"]
            if isinstance(value, str) and value.isdigit():
                value = int(value)
            if not _whole(value) or value < 1:
                self.refuse(
                    "spec.trainer.numProcPerNode",
                    f"on an MPI runtime, the processes per node (the slots of each host); must be a whole number "
                    f">= 1, got {short(value)}",
                )
                return None
            self.paths["spec.slotsPerHost"] = "spec.trainer.numProcPerNode"
            return int(value)
        slots = self.mpi["numProcPerNode"]
        if not _whole(slots):
            return None  # refused at the runtime's path
        self.paths["spec.slotsPerHost"] = self.in_runtime("spec.mlPolicy.mpi.numProcPerNode")
        gpus = (launcher.get("resources") or {}).get("gpu") if isinstance(launcher.get("resources"), Mapping) else None
        if slots == 1 and isinstance(gpus, int | str) and str(gpus).isdigit() and int(gpus) > 1:
            return int(gpus)
        return int(slots)

    def reserved_env(self, env: Any) -> None:
        for position, item in enumerate(env if isinstance(env, list) else ()):
            if isinstance(item, Mapping) and item.get("name") in MPI_RESERVED_ENV:
                self.refuse(
                    f"spec.trainer.env[{position}].name",
                    f"{item['name']} is set by the MPI runtime (the hostfile, its slots and ssh's retries); remove it",
                )

    # -- the TrainJob's own fields ---------------------------------------------------------------------------

    def trainjob_fields(self, spec: Mapping[str, Any], job_spec: dict[str, Any]) -> None:
        for key, value in spec.items():
            where = f"spec.{key}"
            if key in ("runtimeRef", "trainer", "labels", "annotations", "runtimePatches"):
                continue
            if key == "suspend":
                job_spec.setdefault("runPolicy", {})["suspend"] = value
            elif key == "activeDeadlineSeconds":
                job_spec.setdefault("runPolicy", {})["activeDeadlineSeconds"] = value
                self.paths["spec.runPolicy.activeDeadlineSeconds"] = where
            elif key == "managedBy":
                if value != TRAINJOB_CONTROLLER:
                    self.refuse(where, f"{short(value)} would hand the job to another controller; remove managedBy")
            elif key == "initializer":
                self.refuse(
                    where,
                    "dataset and model initializers are not supported yet; declare the data as a Phalanx Dataset "
                    "(docs/datasets.md) and remove it",
                )
            elif key == "podTemplateOverrides":
                self.refuse(
                    where, "is the earlier name of runtimePatches upstream; write the same change as runtimePatches"
                )
            else:
                self.refuse(where, "unknown field of a TrainJob spec; remove it")

    def job_metadata(self, metadata: Any, spec: Mapping[str, Any]) -> Any:
        # The TrainJob's labels and annotations are for the objects made from it: here, the TrainingJob.
        if not isinstance(metadata, Mapping):
            return metadata  # validation names what is wrong with it
        merged: dict[str, Any] = dict(metadata)
        for field in ("labels", "annotations"):
            own, extra = metadata.get(field), spec.get(field)
            if extra is not None and not isinstance(extra, Mapping):
                self.refuse(f"spec.{field}", f"must be a mapping of strings, got {short(extra)}")
                continue
            if own is not None and not isinstance(own, Mapping):
                continue  # validation names it at metadata.<field>
            inherited = self.object_metadata.get(field, {})
            if own or extra or inherited:
                merged[field] = {**inherited, **(own or {}), **(extra or {})}
            self.paths[f"metadata.{field}"] = f"spec.{field}" if extra else f"metadata.{field}"
        annotations = merged.get("annotations")
        if annotations is None or isinstance(annotations, Mapping):
            merged["annotations"] = {**(annotations or {}), CONVERTED_FROM: f"{TRAINJOB}.{TRAINER_V1ALPHA1}"}
        return merged


def _whole(value: Any) -> bool:
    """Whether a value is a whole number (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)
