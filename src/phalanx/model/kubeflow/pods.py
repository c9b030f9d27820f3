"""A Kubernetes PodTemplateSpec, as Kubeflow replica specs hold it, turned into a Phalanx replica template.

What a Phalanx replica can honour is taken: the one container's image, command (none: the image's entrypoint
runs), args, env (``valueFrom`` included), ``envFrom``, working directory, resources (cpu, memory,
``nvidia.com/gpu``), ``volumeMounts``, ``imagePullPolicy``, the liveness, readiness and startup probes and
``securityContext`` (as ``containerSecurityContext``), the template's labels and annotations, the container's
name and ports, which only describe the container, and the pod fields a replica template carries
(``model.pods``, docs/pod-fields.md): volumes, nodeSelector, tolerations, affinity, securityContext,
serviceAccountName, imagePullSecrets, priorityClassName, and init containers, those with ``restartPolicy:
Always`` (Kubernetes' native sidecars) becoming ``sidecars``. The values are checked by the TrainingJob's
validation, and a backend that cannot honour one refuses it there. Every other field is refused with its full
path and why: a field that quietly went missing would run the program somewhere else, or with other data, than
its author wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.model.errors import FieldError, short
from phalanx.model.resources import QuantityError, parse_cpu, parse_memory

GPU_RESOURCE = "nvidia.com/gpu"

#: Pod and container fields that Phalanx does not pass to replicas; refused.
_NOT_YET = (
    "is not supported yet: Phalanx does not pass this pod field to replicas, and running without it would "
    "not be the program you wrote; remove it"
)
#: Pod fields a replica template carries under the same name (``model.pods``).
_POD_FIELDS = frozenset(
    {
        "volumes",
        "nodeSelector",
        "tolerations",
        "affinity",
        "securityContext",
        "serviceAccountName",
        "imagePullSecrets",
        "priorityClassName",
    }
)
_POD_FIELDS_NOT_YET = frozenset(
    {
        "hostIPC",
        "hostNetwork",
        "hostPID",
        "shareProcessNamespace",
        "runtimeClassName",
        "dnsPolicy",
        "dnsConfig",
        "hostAliases",
        "topologySpreadConstraints",
        "terminationGracePeriodSeconds",
    }
)
_CONTAINER_FIELDS_NOT_YET = frozenset(
    {
        "lifecycle",
        "volumeDevices",
        "stdin",
        "tty",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "resizePolicy",
    }
)
#: Container fields a replica template carries under the same name (``model.pods``).
_CONTAINER_POD_FIELDS = frozenset({"imagePullPolicy", "livenessProbe", "readinessProbe", "startupProbe"})
#: Container fields taken as they are (``name`` and ``ports`` only describe the container: Phalanx names the
#: replica and chooses the rendezvous port itself, and tells every replica the port in its environment).
_CONTAINER_FIELDS = frozenset(
    {"name", "image", "command", "args", "env", "envFrom", "workingDir", "resources", "ports", "volumeMounts"}
    | {"securityContext"}
    | _CONTAINER_POD_FIELDS
)
#: Fields of an init container or sidecar (``model.pods.Container``), taken as they are.
_EXTRA_CONTAINER_FIELDS = frozenset(
    {"name", "image", "imagePullPolicy", "command", "args", "workingDir", "env", "envFrom", "volumeMounts"}
    | {"resources", "securityContext"}
)


def replica_template(
    template: Any, path: str, *, restart_policy: str | None
) -> tuple[dict[str, Any], list[FieldError]]:
    """The Phalanx ``ReplicaTemplate`` document for a PodTemplateSpec at ``path``, and what was refused.

    Args:
        template: the replica spec's ``template`` (a PodTemplateSpec).
        path: its path in the upstream document, e.g. ``spec.pytorchReplicaSpecs.Worker.template``.
        restart_policy: the replica's effective restartPolicy; a pod-level one must agree with it.

    Returns:
        The template document (not yet validated: the TrainingJob's validation checks the values) and every
        refused field, each with its path.
    """
    errors: list[FieldError] = []
    if template is None:
        template = {}
    if not isinstance(template, Mapping):
        return {}, [FieldError(path, f"must be a PodTemplateSpec mapping with spec.containers, got {short(template)}")]
    result: dict[str, Any] = {}
    for key in template:
        if key not in ("metadata", "spec"):
            errors.append(FieldError(f"{path}.{key}", "unknown field of a PodTemplateSpec; it has metadata and spec"))
    metadata = template.get("metadata")
    if metadata:
        result_metadata, problems = _template_metadata(metadata, f"{path}.metadata")
        errors += problems
        if result_metadata:
            result["metadata"] = result_metadata
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        errors.append(FieldError(f"{path}.spec", "required: a pod spec with one container under containers"))
        return result, errors
    for key, value in spec.items():
        where = f"{path}.spec.{key}"
        if key == "containers":
            continue
        if key == "restartPolicy":
            if value != restart_policy:
                errors.append(
                    FieldError(
                        where,
                        f"{short(value)} differs from the replica's restartPolicy {restart_policy}; the replica "
                        "spec's restartPolicy decides, so set it there and remove this one",
                    )
                )
        elif key in _POD_FIELDS:
            result[key] = value
        elif key == "initContainers":
            errors += _init_containers(value, where, result)
        elif key == "schedulerName":
            # A job-level choice in Phalanx (spec.scheduling.schedulerName: one scheduler places a gang): kept in
            # the result for the caller to lift; left there, the TrainingJob's validation refuses it by name.
            result[key] = value
        elif key == "serviceAccount":
            errors.append(FieldError(where, "is the deprecated alias of serviceAccountName: write serviceAccountName"))
        elif key in _POD_FIELDS_NOT_YET:
            errors.append(FieldError(where, _NOT_YET))
        else:
            errors.append(FieldError(where, "has no meaning for a Phalanx replica; remove it"))
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        errors.append(
            FieldError(f"{path}.spec.containers", "required: one container with the image and command to run")
        )
        return result, errors
    if len(containers) > 1:
        errors.append(
            FieldError(
                f"{path}.spec.containers[1]",
                f"a replica runs one program; this template has {len(containers)} containers: keep the training "
                "container, and run a helper as a native sidecar (under initContainers, with restartPolicy: "
                "Always), which stops when the replica ends",
            )
        )
    container_fields, problems = _container(containers[0], f"{path}.spec.containers[0]")
    errors += problems
    result.update(container_fields)
    return result, errors


def _template_metadata(metadata: Any, path: str) -> tuple[dict[str, Any], list[FieldError]]:
    if not isinstance(metadata, Mapping):
        return {}, [FieldError(path, f"must be a mapping of labels and annotations, got {short(metadata)}")]
    errors = [
        FieldError(f"{path}.{key}", "a replica's Pod is named by Phalanx; only labels and annotations are taken")
        for key in metadata
        if key not in ("labels", "annotations")
    ]
    return {key: metadata[key] for key in ("labels", "annotations") if key in metadata}, errors


def _container(container: Any, path: str) -> tuple[dict[str, Any], list[FieldError]]:
    if not isinstance(container, Mapping):
        return {}, [FieldError(path, f"must be a container mapping, got {short(container)}")]
    errors: list[FieldError] = []
    result: dict[str, Any] = {}
    for key, value in container.items():
        where = f"{path}.{key}"
        if value is None:
            continue  # a null field is an absent one, as the API server reads it (upstream's `command:` with no value)
        if key in _CONTAINER_FIELDS_NOT_YET:
            errors.append(FieldError(where, _NOT_YET))
        elif key not in _CONTAINER_FIELDS:
            errors.append(FieldError(where, "has no meaning for a Phalanx replica; remove it"))
        elif key in ("image", "command", "args", "envFrom", "volumeMounts") or key in _CONTAINER_POD_FIELDS:
            result[key] = value
        elif key == "securityContext":
            result["containerSecurityContext"] = value
        elif key == "workingDir":
            result["workingDir"] = value
        elif key == "env":
            env, problems = _env(value, where)
            errors += problems
            result["env"] = env
        elif key == "resources":
            resources, problems = container_resources(value, where)
            errors += problems
            if resources:
                result["resources"] = resources
        elif key == "ports":
            errors += _ports(value, where)
    return result, errors


def _env(env: Any, path: str) -> tuple[dict[str, Any], list[FieldError]]:
    if not isinstance(env, list):
        return {}, [FieldError(path, f"must be a list of {{name, value}} entries, got {short(env)}")]
    result: dict[str, Any] = {}
    errors: list[FieldError] = []
    for position, item in enumerate(env):
        where = f"{path}[{position}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            errors.append(FieldError(where, "must be a mapping with a name and a value"))
            continue
        if "valueFrom" in item:
            # Kept as written: the template's validation checks it, and a backend that cannot read its source
            # refuses it there. Never an empty string in its place.
            result.pop(item["name"], None)
            result[item["name"]] = {key: item[key] for key in item if key != "name"}
            continue
        unknown = [key for key in item if key not in ("name", "value")]
        for key in unknown:
            errors.append(FieldError(f"{where}.{key}", "unknown field of an env entry; it has name and value"))
        # Kubernetes lets a later entry of the same name win; so does this mapping.
        result[item["name"]] = item.get("value", "")
    return result, errors


def _init_containers(containers: Any, path: str, result: dict[str, Any]) -> list[FieldError]:
    """Init containers into ``result``: those with ``restartPolicy: Always`` are native sidecars (``sidecars``)."""
    if not isinstance(containers, list):
        return [FieldError(path, f"must be a list of containers, got {short(containers)}")]
    errors: list[FieldError] = []
    for position, container in enumerate(containers):
        where = f"{path}[{position}]"
        if not isinstance(container, Mapping):
            errors.append(FieldError(where, f"must be a container mapping, got {short(container)}"))
            continue
        taken = {}
        for key, value in container.items():
            if key in _EXTRA_CONTAINER_FIELDS:
                taken[key] = value
            elif key == "restartPolicy":
                if value != "Always":
                    errors.append(
                        FieldError(f"{where}.{key}", "an init container's restartPolicy is Always (a sidecar) or unset")
                    )
            else:
                errors.append(
                    FieldError(f"{where}.{key}", "has no meaning for a Phalanx init container or sidecar; remove it")
                )
        result.setdefault("sidecars" if container.get("restartPolicy") == "Always" else "initContainers", []).append(
            taken
        )
    return errors


def _ports(ports: Any, path: str) -> list[FieldError]:
    if not isinstance(ports, list):
        return [FieldError(path, f"must be a list of container ports, got {short(ports)}")]
    errors = []
    for position, port in enumerate(ports):
        if not isinstance(port, Mapping):
            errors.append(FieldError(f"{path}[{position}]", "must be a mapping with name and containerPort"))
            continue
        for key in port:
            if key not in ("name", "containerPort", "protocol"):
                errors.append(
                    FieldError(
                        f"{path}[{position}].{key}",
                        "is not supported: Phalanx replicas reach each other directly on the port it tells them; "
                        "remove it",
                    )
                )
    return errors


def container_resources(resources: Any, path: str) -> tuple[dict[str, Any], list[FieldError]]:
    """Phalanx ``resources`` from a container's requests and limits, with Kubernetes' meaning.

    A request is what Phalanx reserves (``cpu``, ``memory``); a limit above it is the enforced ceiling
    (``limits.cpu``, ``limits.memory``). A limit without a request is both, as Kubernetes defaults a missing
    request to its limit. A CPU or memory request without a limit is reserved and, unlike on Kubernetes, also
    the ceiling: a Phalanx replica always has one. GPUs have no ceiling: requests and limits of
    ``nvidia.com/gpu`` must be equal, as Kubernetes requires. A limit below its request is left for the
    TrainingJob's validation to refuse, at the limit's path (``resource_paths``).
    """
    if not isinstance(resources, Mapping):
        return {}, [FieldError(path, f"must be a mapping with requests and limits, got {short(resources)}")]
    errors: list[FieldError] = []
    amounts: dict[str, dict[str, Any]] = {}
    for part in ("requests", "limits"):
        values = resources.get(part)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            errors.append(FieldError(f"{path}.{part}", f"must be a mapping of resource amounts, got {short(values)}"))
            continue
        for name, amount in values.items():
            if name not in ("cpu", "memory", GPU_RESOURCE):
                errors.append(
                    FieldError(
                        f"{path}.{part}.{name}",
                        f"Phalanx schedules cpu, memory and {GPU_RESOURCE}; remove {name}",
                    )
                )
                continue
            amounts.setdefault(str(name), {})[part] = amount
    for key in resources:
        if key not in ("requests", "limits"):
            errors.append(FieldError(f"{path}.{key}", "has no meaning for a Phalanx replica; remove it"))
    result: dict[str, Any] = {}
    for name, parts in amounts.items():
        if name == GPU_RESOURCE:
            counts = {part: _gpu_count(amount) for part, amount in parts.items()}
            if len(counts) == 2 and str(counts["requests"]) != str(counts["limits"]):
                errors.append(
                    FieldError(
                        f"{path}.limits.{name}",
                        f"differs from requests.{name} ({short(parts['requests'])} vs {short(parts['limits'])}); "
                        "GPUs are not overcommitted (Kubernetes requires the two to be equal): write one amount",
                    )
                )
                continue
            result["gpu"] = counts.get("requests", counts.get("limits"))
            continue
        result[name] = parts.get("requests", parts.get("limits"))
        if "requests" in parts and "limits" in parts and not _same_amount(name, parts["requests"], parts["limits"]):
            result.setdefault("limits", {})[name] = parts["limits"]
    return result, errors


def resource_paths(paths: dict[str, str], ours: str, upstream: str, resources: Any) -> None:
    """Record where each of Phalanx's resource fields was written upstream, as ``container_resources`` maps them.

    ``ours`` is the template's ``resources`` path, ``upstream`` the container's (or ``resourcesPerNode``). A
    reserved amount comes from the request (else the limit); a ceiling from the limit.
    """
    if not isinstance(resources, Mapping):
        return
    for part in ("limits", "requests"):  # a request, where given, is the reserved amount
        amounts = resources.get(part)
        for name in amounts if isinstance(amounts, Mapping) else ():
            field = "gpu" if name == GPU_RESOURCE else str(name)
            paths[f"{ours}.{field}"] = f"{upstream}.{part}.{name}"
            if part == "limits":
                paths[f"{ours}.limits.{field}"] = f"{upstream}.limits.{name}"


def _same_amount(name: str, request: Any, limit: Any) -> bool:
    # "2" and "2000m" are one amount. One that does not parse is kept as written, for validation to name.
    parse = parse_cpu if name == "cpu" else parse_memory
    try:
        return parse(request) == parse(limit)
    except QuantityError:
        return str(request) == str(limit)


def _gpu_count(amount: Any) -> Any:
    # Kubernetes writes extended resources as quantities: "2" or 2. Anything else is left for validation to name.
    if isinstance(amount, str) and amount.strip().isdigit():
        return int(amount)
    return amount


def container_env(env: Any, path: str) -> tuple[dict[str, Any], list[FieldError]]:
    """A container's ``env`` list as a replica template's ``env`` mapping (``valueFrom`` entries kept as written)."""
    return _env(env, path)
