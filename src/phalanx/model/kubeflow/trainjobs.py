"""Kubeflow Trainer v2: a TrainJob and the (Cluster)TrainingRuntime it names, turned into a TrainingJob.

A TrainJob (``trainer.kubeflow.org/v1alpha1``) names a runtime (``spec.runtimeRef``): a ClusterTrainingRuntime
(the default kind) or a TrainingRuntime of its namespace, from the same file or, for ClusterTrainingRuntimes,
one Phalanx ships (``runtimes/``, today ``torch-distributed``). The runtime says what kind of job it is
(``mlPolicy``: ``torch`` → the ``pytorch`` JobType; none → ``generic``) and holds the node's pod template
(the replicated job named ``node``); the TrainJob's ``trainer`` replaces its image, command, args and resources,
adds to its env, and sets the node count (``numNodes``) and processes per node (``numProcPerNode``, given to
torchrun as ``PET_NPROC_PER_NODE``).

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
from phalanx.model.kubeflow.convert import CONVERTED_FROM, Conversion, record_pod_paths
from phalanx.model.kubeflow.pods import container_env, container_resources, replica_template, resource_paths
from phalanx.model.kubeflow.runtime_patches import Patched, apply_runtime_patches
from phalanx.model.loading import parse_documents

TRAINER_V1ALPHA1 = "trainer.kubeflow.org/v1alpha1"
TRAINJOB = "TrainJob"
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
TRAINJOB_CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
#: The replicated job of a runtime that runs the training nodes (the one the TrainJob's trainer overrides).
NODE = "node"
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


def convert_trainjob(document: Mapping[str, Any], runtimes: Mapping[RuntimeKey, Mapping[str, Any]]) -> Conversion:
    """The TrainingJob a TrainJob becomes with its runtime.

    Args:
        document: the TrainJob.
        runtimes: the runtimes it may name (those of its file, then the shipped ones).

    Raises:
        SpecError: every field that cannot be honoured, each with its path.
    """
    return _TrainJob(document).run(runtimes)


class _TrainJob:
    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document = document
        self.errors: list[FieldError] = []
        self.paths: dict[str, str] = {}
        self.runtime_name = ""
        #: Labels and annotations of the runtime's JobSet and Job templates: Phalanx makes neither object, so
        #: they go to the TrainingJob, which stands where they stand (under the TrainJob's own).
        self.object_metadata: dict[str, dict[str, Any]] = {}
        self.patched = Patched(None)
        self.node_pod_path = ""  # the node's pod template in the runtime (runtime-relative)

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
        return Conversion(job=job, jobtypes=(), paths=tuple(ordered))

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
        template, restart = self.node_template(self.patched.template)
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
            pod_spec = f"{self.node_pod_path}.spec.schedulerName"
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
        for key, jobtype in _PLAIN_POLICIES.items():
            if key in policy:
                # Upstream's jax and xgboost plugins take no options: they give every node the coordinator or
                # tracker address, the node count and its rank, as Phalanx's JobType of the same name does.
                if policy[key] not in (None, {}):
                    self.refuse_in_runtime(f"spec.mlPolicy.{key}", f"takes no options; write {key}: {{}}")
                return jobtype, nodes, None
        if "mpi" in policy:
            self.refuse_in_runtime(
                "spec.mlPolicy.mpi",
                "MPI runtimes are not supported yet (their launcher reaches the nodes over SSH); write the job as an "
                "MPIJob (kubeflow.org/v2beta1) instead",
            )
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

    def node_template(self, template: Any) -> tuple[dict[str, Any], str | None]:
        """The node's replica template and the pod restartPolicy, from the runtime's JobSet template."""
        base = "spec.template"
        if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
            self.refuse_in_runtime(base, "required: a JobSet template with the replicated job 'node'")
            return {}, None
        for key in template:
            if key not in ("spec", "metadata"):
                self.refuse_in_runtime(f"{base}.{key}", "unknown field of a runtime template; remove it")
        self.take_object_metadata(template.get("metadata"), f"{base}.metadata")
        jobset = template["spec"]
        for key in jobset:
            if key != "replicatedJobs":
                self.refuse_in_runtime(
                    f"{base}.spec.{key}", "a JobSet field Phalanx does not honour (it runs no JobSet); remove it"
                )
        jobs = jobset.get("replicatedJobs")
        if not isinstance(jobs, list):
            self.refuse_in_runtime(f"{base}.spec.replicatedJobs", "required: the replicated job 'node'")
            return {}, None
        found: tuple[int, Mapping[str, Any]] | None = None
        for position, job in enumerate(jobs):
            name = job.get("name") if isinstance(job, Mapping) else None
            if name == NODE:
                found = (position, job)
            else:
                self.refuse_in_runtime(
                    f"{base}.spec.replicatedJobs[{position}]",
                    f"only the replicated job 'node' is supported ({short(name)}: initializers and launchers are "
                    "not supported yet); remove it",
                )
        if found is None:
            self.refuse_in_runtime(f"{base}.spec.replicatedJobs", "required: the replicated job 'node'")
            return {}, None
        position, job = found
        where = f"{base}.spec.replicatedJobs[{position}]"
        for key in job:
            if key not in ("name", "template", "replicas"):
                self.refuse_in_runtime(f"{where}.{key}", "unknown field of a replicated job; remove it")
        if job.get("replicas", 1) != 1:
            self.refuse_in_runtime(f"{where}.replicas", "the node count is mlPolicy.numNodes; remove replicas")
        job_template = job.get("template")
        if not isinstance(job_template, Mapping) or not isinstance(job_template.get("spec"), Mapping):
            self.refuse_in_runtime(f"{where}.template.spec", "required: the Job spec with the node's pod template")
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
        self.node_pod_path = pod_path
        result, problems = replica_template(pod, pod_path, restart_policy=restart)
        for problem in problems:
            self.refuse_in_template(problem.path, problem.message)
        container = self.in_runtime(f"{pod_path}.spec.containers[0]")
        self.paths.update(
            {
                "spec.replicas.worker.template": container,
                "spec.replicas.worker.template.metadata": self.in_runtime(f"{pod_path}.metadata"),
                "spec.replicas.worker": self.in_runtime(pod_path),
            }
        )
        record_pod_paths(self.paths, "spec.replicas.worker.template", self.in_runtime(f"{pod_path}.spec"), pod)
        for ours, path in list(self.paths.items()):
            if path.startswith(f"{self.runtime_name} "):
                runtime_path = path[len(self.runtime_name) + 1 :]
                if self.patched.origin(runtime_path) != runtime_path:
                    self.paths[ours] = self.patched.origin(runtime_path)
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

    def apply_trainer(self, template: dict[str, Any], trainer: Mapping[str, Any]) -> None:
        """The TrainJob's trainer over the runtime's node container."""
        for key, value in trainer.items():
            where = f"spec.trainer.{key}"
            if key in ("image", "command", "args"):
                template[key] = value
                self.paths[f"spec.replicas.worker.template.{key}"] = where
            elif key == "env":
                self.trainer_env(template, value, where)
            elif key == "resourcesPerNode":
                resources, problems = container_resources(value, where)
                self.errors += problems
                template["resources"] = resources
                resource_paths(self.paths, "spec.replicas.worker.template.resources", where, value)
            elif key not in ("numNodes", "numProcPerNode"):
                self.refuse(where, "unknown field of a trainer; remove it")

    def trainer_env(self, template: dict[str, Any], env: Any, where: str) -> None:
        if not isinstance(env, list):
            self.refuse(where, f"must be a list of {{name, value}} entries, got {short(env)}")
            return
        given, problems = container_env(env, where)
        self.errors += problems
        merged = dict(template.get("env", {}))
        for name in given:
            merged.pop(name, None)  # the trainer's value wins over the runtime's
        merged.update(given)
        for position, item in enumerate(env):
            if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                self.paths[f"spec.replicas.worker.template.env.{item['name']}"] = f"{where}[{position}]"
        template["env"] = merged

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
