"""A TrainJob's ``runtimePatches``, applied to its runtime's JobSet template before the template is converted.

Kubeflow Trainer lets a TrainJob (or a controller acting for it, named by ``manager``) patch a restricted set of
fields of the runtime it names: labels and annotations of the JobSet, Job and Pod templates, and some Pod spec
fields of a replicated job (service account, volumes, init containers and containers by name — their env,
volumeMounts and securityContext —, image pull secrets, security context, node selector, affinity, tolerations,
scheduling gates, termination grace period). Patches are applied in order, as server-side apply merges them:
maps merge, lists keyed by name merge by name, other values are replaced.

The patched template is then converted like any runtime template, so a patched field is honoured or refused as
if the runtime had it; ``Patched.origins`` says where each patched field was written, so a refusal names the
patch's path rather than the runtime's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.model.errors import FieldError, short

#: Pod spec fields a patch may set, and how a patch merges into the runtime's value.
_POD_SPEC_MERGE = {
    "serviceAccountName": "replace",
    "volumes": "by-name",
    "imagePullSecrets": "by-name",
    "securityContext": "replace",
    "nodeSelector": "map",
    "affinity": "replace",
    "tolerations": "replace",
    "schedulingGates": "by-name",
    "terminationGracePeriodSeconds": "replace",
}
_CONTAINER_MERGE = {"env": "by-name", "volumeMounts": "by-name", "securityContext": "replace"}
#: Containers whose env comes only from the TrainJob's trainer or initializer, as upstream rules.
_ENV_FROM_TRAINJOB_ONLY = ("node", "dataset-initializer", "model-initializer")


@dataclass
class Patched:
    """A runtime template with a TrainJob's patches applied."""

    template: Any
    #: Runtime-relative path of a patched field → the path of the patch that set it.
    origins: dict[str, str] = field(default_factory=dict)
    errors: list[FieldError] = field(default_factory=list)

    def origin(self, path: str) -> str:
        """``path`` (in the runtime) named as the patch that wrote it, when one did; the longest match wins."""
        for ours in sorted(self.origins, key=len, reverse=True):
            if path == ours or path.startswith((f"{ours}.", f"{ours}[")):
                return self.origins[ours] + path[len(ours) :]
        return path


def apply_runtime_patches(template: Any, patches: Any, base: str = "spec.runtimePatches") -> Patched:
    """The runtime's JobSet ``template`` with ``patches`` (a TrainJob's ``spec.runtimePatches``) applied."""
    result = Patched(copy.deepcopy(template))
    if patches is None:
        return result
    if not isinstance(patches, list):
        result.errors.append(FieldError(base, f"must be a list of patches, each with a manager, got {short(patches)}"))
        return result
    managers: set[str] = set()
    for position, patch in enumerate(patches):
        where = f"{base}[{position}]"
        if not isinstance(patch, Mapping):
            result.errors.append(
                FieldError(where, f"must be a mapping with manager and trainingRuntimeSpec, got {short(patch)}")
            )
            continue
        manager = patch.get("manager")
        if not isinstance(manager, str) or not manager:
            result.errors.append(FieldError(f"{where}.manager", "required: who owns this patch, e.g. example.io/team"))
        elif manager in managers:
            result.errors.append(FieldError(f"{where}.manager", f"{manager!r} has a patch already; one per manager"))
        else:
            managers.add(manager)
        for key in patch:
            if key not in ("manager", "time", "trainingRuntimeSpec"):
                result.errors.append(
                    FieldError(
                        f"{where}.{key}",
                        "unknown field of a runtime patch; it has manager, time and trainingRuntimeSpec",
                    )
                )
        spec = patch.get("trainingRuntimeSpec")
        if spec is None:
            continue
        if not isinstance(spec, Mapping):
            result.errors.append(FieldError(f"{where}.trainingRuntimeSpec", f"must be a mapping, got {short(spec)}"))
            continue
        for key in spec:
            if key != "template":
                result.errors.append(
                    FieldError(f"{where}.trainingRuntimeSpec.{key}", "a patch may change only the runtime's template")
                )
        if "template" in spec:
            _JobSetPatch(result, f"{where}.trainingRuntimeSpec.template").apply(spec["template"])
    return result


class _JobSetPatch:
    def __init__(self, result: Patched, where: str) -> None:
        self.result = result
        self.where = where

    def refuse(self, path: str, message: str) -> None:
        self.result.errors.append(FieldError(path, message))

    def template_patch(
        self,
        target: dict[str, Any],
        ours: str,
        patch: Mapping[str, Any],
        where: str,
        what: str,
        spec: Callable[[dict[str, Any], str, Any, str], None],
    ) -> None:
        """A ``{metadata, spec}`` patch of a ``what`` template into ``target`` (its runtime path ``ours``)."""
        for key, value in patch.items():
            if key == "metadata":
                self.metadata(target, ours, value, f"{where}.metadata")
            elif key == "spec":
                spec(target, ours, value, f"{where}.spec")
            else:
                self.refuse(f"{where}.{key}", f"unknown field of a {what} patch; it has metadata and spec")

    def apply(self, patch: Any) -> None:
        if not isinstance(patch, Mapping):
            self.refuse(self.where, f"must be a mapping with metadata and spec, got {short(patch)}")
            return
        template = self.result.template
        if not isinstance(template, dict):
            return  # the runtime's own conversion names what is wrong with its template
        for key, value in patch.items():
            if key == "metadata":
                self.metadata(template, "spec.template", value, f"{self.where}.metadata")
            elif key == "spec":
                self.jobset_spec(template, value, f"{self.where}.spec")
            else:
                self.refuse(f"{self.where}.{key}", "unknown field of a JobSet template patch; it has metadata and spec")

    def metadata(self, target: dict[str, Any], ours: str, patch: Any, where: str) -> None:
        if not isinstance(patch, Mapping):
            self.refuse(where, f"must be a mapping of labels and annotations, got {short(patch)}")
            return
        current = target.setdefault("metadata", {})
        if not isinstance(current, dict):
            return
        for key, value in patch.items():
            if key not in ("labels", "annotations"):
                self.refuse(f"{where}.{key}", "a patch may set only labels and annotations")
            elif not isinstance(value, Mapping):
                self.refuse(f"{where}.{key}", f"must be a mapping of strings, got {short(value)}")
            else:
                existing = current.get(key)
                current[key] = {**(existing if isinstance(existing, Mapping) else {}), **value}
                for name in value:
                    self.result.origins[f"{ours}.metadata.{key}.{name}"] = f"{where}.{key}.{name}"

    def jobset_spec(self, template: dict[str, Any], patch: Any, where: str) -> None:
        if not isinstance(patch, Mapping):
            self.refuse(where, f"must be a mapping with replicatedJobs, got {short(patch)}")
            return
        for key in patch:
            if key != "replicatedJobs":
                self.refuse(f"{where}.{key}", "a patch may change only replicatedJobs of the JobSet spec")
        jobs_patch = patch.get("replicatedJobs")
        if jobs_patch is None:
            return
        if not isinstance(jobs_patch, list):
            self.refuse(f"{where}.replicatedJobs", f"must be a list of replicated job patches, got {short(jobs_patch)}")
            return
        spec = template.get("spec")
        jobs = spec.get("replicatedJobs") if isinstance(spec, Mapping) else None
        by_name = {
            job.get("name"): position
            for position, job in enumerate(jobs if isinstance(jobs, list) else ())
            if isinstance(job, Mapping)
        }
        for position, job_patch in enumerate(jobs_patch):
            job_where = f"{where}.replicatedJobs[{position}]"
            if not isinstance(job_patch, Mapping) or not isinstance(job_patch.get("name"), str):
                self.refuse(job_where, "must be a mapping with the name of a replicated job of the runtime")
                continue
            name = job_patch["name"]
            if name not in by_name:
                known = ", ".join(str(n) for n in by_name) or "none"
                self.refuse(f"{job_where}.name", f"the runtime has no replicated job {name!r} (it has {known})")
                continue
            assert isinstance(jobs, list)
            ours = f"spec.template.spec.replicatedJobs[{by_name[name]}]"
            self.replicated_job(jobs[by_name[name]], ours, job_patch, job_where)

    def replicated_job(self, job: dict[str, Any], ours: str, patch: Mapping[str, Any], where: str) -> None:
        for key in patch:
            if key not in ("name", "template"):
                self.refuse(f"{where}.{key}", "unknown field of a replicated job patch; it has name and template")
        job_template = patch.get("template")
        if job_template is None:
            return
        if not isinstance(job_template, Mapping):
            self.refuse(f"{where}.template", f"must be a mapping with metadata and spec, got {short(job_template)}")
            return
        target = job.setdefault("template", {})
        if not isinstance(target, dict):
            return
        self.template_patch(
            target, f"{ours}.template", job_template, f"{where}.template", "Job template", self.job_spec
        )

    def job_spec(self, target: dict[str, Any], ours: str, patch: Any, where: str) -> None:
        if not isinstance(patch, Mapping):
            self.refuse(where, f"must be a mapping with the pod template, got {short(patch)}")
            return
        for key in patch:
            if key != "template":
                self.refuse(f"{where}.{key}", "a patch may change only the pod template of a Job spec")
        pod_patch = patch.get("template")
        if pod_patch is None:
            return
        if not isinstance(pod_patch, Mapping):
            self.refuse(f"{where}.template", f"must be a mapping with metadata and spec, got {short(pod_patch)}")
            return
        spec = target.setdefault("spec", {})
        pod = spec.setdefault("template", {}) if isinstance(spec, dict) else None
        if not isinstance(pod, dict):
            return
        self.template_patch(pod, f"{ours}.spec.template", pod_patch, f"{where}.template", "pod template", self.pod_spec)

    def pod_spec(self, pod: dict[str, Any], ours: str, patch: Any, where: str) -> None:
        ours = f"{ours}.spec"  # ``ours`` is the pod template's path
        if not isinstance(patch, Mapping):
            self.refuse(where, f"must be a mapping of pod spec fields, got {short(patch)}")
            return
        spec = pod.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        for key, value in patch.items():
            if key in ("containers", "initContainers"):
                self.containers(spec, key, f"{ours}.{key}", value, f"{where}.{key}")
            elif key in _POD_SPEC_MERGE:
                merged = _merge(spec.get(key), value, _POD_SPEC_MERGE[key])
                if merged is None:
                    self.refuse(f"{where}.{key}", f"cannot be merged into the runtime's {key}: {short(value)}")
                    continue
                spec[key] = merged
                self.result.origins[f"{ours}.{key}"] = f"{where}.{key}"
            else:
                self.refuse(f"{where}.{key}", "a runtime patch may not set this pod spec field")

    def containers(self, spec: dict[str, Any], key: str, ours: str, patch: Any, where: str) -> None:
        if not isinstance(patch, list):
            self.refuse(where, f"must be a list of container patches, got {short(patch)}")
            return
        existing = spec.get(key)
        by_name = {
            container.get("name"): position
            for position, container in enumerate(existing if isinstance(existing, list) else ())
            if isinstance(container, Mapping)
        }
        for position, container_patch in enumerate(patch):
            item = f"{where}[{position}]"
            if not isinstance(container_patch, Mapping) or not isinstance(container_patch.get("name"), str):
                self.refuse(item, "must be a mapping with the name of a container of the runtime")
                continue
            name = container_patch["name"]
            if name not in by_name:
                self.refuse(
                    f"{item}.name",
                    f"the runtime's pod has no {key[:-1] if key == 'containers' else 'init container'} {name!r}",
                )
                continue
            assert isinstance(existing, list)
            target = existing[by_name[name]]
            for field_name, value in container_patch.items():
                if field_name == "name":
                    continue
                if field_name not in _CONTAINER_MERGE:
                    self.refuse(
                        f"{item}.{field_name}",
                        "a patch may set only env, volumeMounts and securityContext of a container",
                    )
                    continue
                if field_name == "env" and name in _ENV_FROM_TRAINJOB_ONLY:
                    self.refuse(
                        f"{item}.env",
                        f"the env of container {name!r} comes from the TrainJob's trainer: set it under "
                        "spec.trainer.env",
                    )
                    continue
                merged = _merge(target.get(field_name), value, _CONTAINER_MERGE[field_name])
                if merged is None:
                    self.refuse(
                        f"{item}.{field_name}", f"cannot be merged into the container's {field_name}: {short(value)}"
                    )
                    continue
                target[field_name] = merged
                self.result.origins[f"{ours}[{by_name[name]}].{field_name}"] = f"{item}.{field_name}"


def _merge(current: Any, patch: Any, how: str) -> Any:
    """``patch`` merged into ``current`` as server-side apply would; None when the shapes do not allow it."""
    if how == "replace":
        return copy.deepcopy(patch)
    if how == "map":
        if not isinstance(patch, Mapping) or (current is not None and not isinstance(current, Mapping)):
            return None
        return {**(current or {}), **patch}
    if not isinstance(patch, list) or (current is not None and not isinstance(current, list)):
        return None
    merged = [copy.deepcopy(item) for item in current or []]
    for item in patch:
        name = item.get("name") if isinstance(item, Mapping) else None
        if name is None:
            return None
        for position, existing in enumerate(merged):
            if isinstance(existing, Mapping) and existing.get("name") == name:
                merged[position] = {**existing, **item}
                break
        else:
            merged.append(copy.deepcopy(item))
    return merged
