"""Turning a raw TrainingJob document into a validated, defaulted one — or into a list of field errors.

Validation happens before anything is created. It checks the document's shape (pydantic), then what the shape
cannot say alone: that the JobType exists, that roles and counts fit it, that every replica has a command or an image,
that ``minAvailable`` is reachable. Defaulting then fills each role's template from its JobType role and
T-shirt size, so the stored spec is complete and the scheduler never guesses.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from phalanx.model.base import API_VERSION, every_problem, nul_free_context
from phalanx.model.bounds import MAX_REPLICAS
from phalanx.model.errors import FieldError, SpecError, from_validation_error, short
from phalanx.model.jobs import PRIORITY_CLASSES, ReplicaSpec, ReplicaTemplate, TrainingJob
from phalanx.model.jobtypes import TEMPLATE_PATTERN, JobType, RoleDefinition
from phalanx.model.pods import PodFields
from phalanx.model.sizes import DEFAULT_SIZE, SIZES, fill_resources

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED_ENV_PREFIX = "PHALANX_"


def allowed_fields(model: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    """The wire names of the fields allowed at ``loc`` inside ``model`` (for 'did you mean' hints)."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = next(
                (f for name, f in current.model_fields.items() if part in (name, f.alias)),
                None,
            )
            if field is None:
                return []
            current = field.annotation
        elif typing.get_origin(current) in (dict, Mapping):
            current = typing.get_args(current)[1]
        elif typing.get_origin(current) in (list, Sequence):
            current = typing.get_args(current)[0]
        else:
            return []
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [field.alias or name for name, field in current.model_fields.items()]
    return []


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
            annotation = args[0] if len(args) == 1 else annotation
            if len(args) != 1:
                return annotation
        else:
            return annotation


_Document = TypeVar("_Document", bound=BaseModel)


def parse_shape(
    raw: Any,
    model: type[_Document],
    kind: str,
    *,
    source: str | None = None,
    checks: Callable[[_Document], list[FieldError]] | None = None,
) -> _Document:
    """A Phalanx document of ``kind`` parsed as ``model``: its kind, apiVersion and shape (no defaults, no lookups).

    ``status`` is left out (a user does not write it). ``checks`` adds what the shape cannot tell, reported with
    a wrong kind or apiVersion in one error.

    Raises:
        SpecError: listing every problem with its field path.
    """
    if not isinstance(raw, Mapping):
        raise SpecError([FieldError("", f"a {kind} must be a mapping with metadata and spec")], source=source)
    errors: list[FieldError] = []
    if raw.get("kind", kind) != kind:
        errors.append(FieldError("kind", f"must be {kind}, got {short(raw.get('kind'))}"))
    if raw.get("apiVersion", API_VERSION) != API_VERSION:
        errors.append(FieldError("apiVersion", f"must be {API_VERSION}, got {short(raw.get('apiVersion'))}"))
    body = {key: value for key, value in raw.items() if key not in ("status", "kind", "apiVersion")}
    try:
        parsed = model.model_validate(body)
    except ValidationError as err:
        errors.extend(from_validation_error(err, fields_at=lambda loc: allowed_fields(model, loc)))
        raise SpecError(errors, source=source) from None
    if checks is not None:
        errors.extend(checks(parsed))
    if errors:
        raise SpecError(errors, source=source)
    return parsed


def parse_job(raw: Any, *, source: str | None = None) -> TrainingJob:
    """Check the document's shape only (no JobType lookup, no defaults).

    Raises:
        SpecError: listing every shape problem with its field path.
    """
    return parse_shape(raw, TrainingJob, "TrainingJob", source=source)


def validate_job(raw: Any, jobtypes: Mapping[str, JobType], *, source: str | None = None) -> TrainingJob:
    """Validate and default a TrainingJob document against the known JobTypes.

    Returns:
        The job with every role's template complete (command, env, resources), status reset.

    Raises:
        SpecError: every problem found, each with its field path and a fix.
    """
    try:
        job = parse_job(raw, source=source)
    except SpecError as err:
        # An unknown job type is said in the same round as the shape's problems, not only once they are fixed.
        unknown = _unknown_type(raw, jobtypes)
        if unknown is None or any(error.path == unknown.path for error in err.errors):
            raise
        raise SpecError([*err.errors, unknown], source=source) from None
    errors = check_against_jobtype(job, jobtypes)
    if errors:
        raise SpecError(errors, source=source)
    # Defaulting combines validated parts (the role's command with the job's args, both envs, a size's
    # reservation with the template's ceiling): validate the whole again, as the store will read it back, so
    # that no combination escapes a bound.
    try:
        defaulted = apply_defaults(job, jobtypes[job.spec.type])
        # The wire form as JSON text, read back: the same checks as ``model_validate(to_dict())``, in pydantic's
        # core without building the dict in Python (a third of the cost of a submission's validation).
        text = defaulted.model_dump_json(by_alias=True, exclude_none=True)
        return TrainingJob.model_validate_json(text, context=nul_free_context(text))
    except ValidationError as err:
        raise SpecError(from_validation_error(err), source=source) from None


def with_namespace(document: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """A copy of a raw document whose ``metadata.namespace`` is ``namespace`` (``submit -n``), to be validated.

    The override is applied to the document, not to a parsed object, so that it passes the same validation as a
    namespace written in the file.
    """
    metadata = document.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        return dict(document)  # validation names the bad metadata
    return {**document, "metadata": {**(metadata or {}), "namespace": namespace}}


def _unknown_type_error(name: str, jobtypes: Mapping[str, JobType]) -> FieldError:
    close = difflib.get_close_matches(name, list(jobtypes), n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known types: {', '.join(sorted(jobtypes))}"
    return FieldError("spec.type", f"unknown job type {name!r}; {hint}")


def _unknown_type(raw: Any, jobtypes: Mapping[str, JobType]) -> FieldError | None:
    """The error of a raw document's ``spec.type`` naming no JobType; None when it names one or is no string."""
    spec = raw.get("spec") if isinstance(raw, Mapping) else None
    name = spec.get("type") if isinstance(spec, Mapping) else None
    if not isinstance(name, str) or name in jobtypes:
        return None
    return _unknown_type_error(name, jobtypes)


def check_against_jobtype(job: TrainingJob, jobtypes: Mapping[str, JobType]) -> list[FieldError]:
    """What the shape alone cannot tell: the JobType, its roles and counts, commands, names, paths."""
    spec = job.spec
    errors: list[FieldError] = []
    jobtype = jobtypes.get(spec.type)
    if jobtype is None:
        return [_unknown_type_error(spec.type, jobtypes)]
    roles = jobtype.spec.roles
    for role_name, replica in spec.replicas.items():
        path = f"spec.replicas.{role_name}"
        if role_name not in roles and not jobtype.spec.allow_other_roles:
            errors.append(
                FieldError(path, f"job type {spec.type!r} has no role {role_name!r}; its roles are {sorted(roles)}")
            )
            continue
        definition = roles.get(role_name)
        count = replica_count(replica, definition)
        if definition and count < definition.min_count:
            errors.append(
                FieldError(
                    f"{path}.count",
                    f"role {role_name!r} of {spec.type!r} needs at least {definition.min_count}, got {count}",
                )
            )
        if definition and definition.max_count is not None and count > definition.max_count:
            errors.append(
                FieldError(
                    f"{path}.count",
                    f"role {role_name!r} of {spec.type!r} allows at most {definition.max_count}, got {count}",
                )
            )
        role_template = definition.template if definition else None
        role_command = role_template.command if role_template else []
        role_image = role_template.image if role_template else None
        if not replica.template.command and not role_command and not (replica.template.image or role_image):
            # With an image and no command, the image's entrypoint runs (on Kubernetes; the embedded runtime,
            # which runs no images, refuses it at its door unless a stand-in plays the image).
            errors.append(
                FieldError(
                    f"{path}.template.command",
                    "required: the program to run, e.g. [python, train.py], or an image whose entrypoint runs it",
                )
            )
        errors.extend(_check_env(replica.template.env, f"{path}.template.env"))
        errors.extend(_check_env(replica.template.env_value_from, f"{path}.template.envValueFrom"))
        errors.extend(
            FieldError(f"{path}.template.envValueFrom.{name}", f"{name} is also in env; set it once")
            for name in replica.template.env_value_from
            if name in replica.template.env
        )
        if replica.template.working_dir is not None and ".." in PurePosixPath(replica.template.working_dir).parts:
            errors.append(FieldError(f"{path}.template.workingDir", "must not contain '..'"))
    for role_name, definition in roles.items():
        if definition.min_count > 0 and role_name not in spec.replicas:
            errors.append(
                FieldError(
                    f"spec.replicas.{role_name}",
                    f"job type {spec.type!r} needs at least {definition.min_count} {role_name!r} replica(s); "
                    f"add replicas.{role_name}",
                )
            )
    errors.extend(_check_template_references(job, jobtype))
    total = sum(replica_count(r, roles.get(name)) for name, r in spec.replicas.items())
    if total > MAX_REPLICAS:
        errors.append(
            FieldError("spec.replicas", f"at most {MAX_REPLICAS} replicas per job (all roles together), got {total}")
        )
    min_available = spec.scheduling.min_available
    if min_available is not None and min_available > total:
        errors.append(
            FieldError(
                "spec.scheduling.minAvailable",
                f"must be <= the job's {total} replica(s), got {min_available}",
            )
        )
    priority_class = spec.scheduling.priority_class
    if priority_class is not None and priority_class not in PRIORITY_CLASSES:
        errors.append(
            FieldError(
                "spec.scheduling.priorityClass",
                f"unknown priority class {priority_class!r}; use one of {', '.join(PRIORITY_CLASSES)}",
            )
        )
    outputs = PurePosixPath(spec.outputs.path)
    if outputs.is_absolute() or ".." in outputs.parts:
        errors.append(
            FieldError("spec.outputs.path", f"must be a relative path without '..', got {spec.outputs.path!r}")
        )
    if spec.run_policy.max_backoff_seconds < spec.run_policy.backoff_seconds:
        errors.append(FieldError("spec.runPolicy.maxBackoffSeconds", "must be >= runPolicy.backoffSeconds"))
    return errors


def replica_count(replica: ReplicaSpec, definition: RoleDefinition | None) -> int:
    """The role's count: as written, else the JobType role's ``defaultCount``."""
    if "count" not in replica.model_fields_set and definition is not None:
        return definition.default_count
    return replica.count


def _check_template_references(job: TrainingJob, jobtype: JobType) -> list[FieldError]:
    """``host(ROLE, I)`` / ``port(ROLE, I)`` in the JobType's env must name a replica this job has."""
    counts = {name: replica_count(r, jobtype.spec.roles.get(name)) for name, r in job.spec.replicas.items()}
    templates = [(f"env.{key}", value) for key, value in jobtype.spec.env.items()]
    for role in job.spec.replicas:
        if definition := jobtype.spec.roles.get(role):
            templates += [(f"roles.{role}.env.{key}", value) for key, value in definition.env.items()]
    errors = []
    for where, template in templates:
        for match in TEMPLATE_PATTERN.finditer(template):
            function, args = match.group(1), match.group(2)
            if function not in ("host", "port") or args is None:
                continue
            role, _, index = (part.strip() for part in args.partition(","))
            if index.isdigit() and int(index) >= counts.get(role, 0):
                errors.append(
                    FieldError(
                        f"spec.replicas.{role}",
                        f"job type {jobtype.metadata.name!r} uses {function}({role}, {index}) in {where}, so the "
                        f"job needs at least {int(index) + 1} {role!r} replica(s); it has {counts.get(role, 0)}",
                    )
                )
    return errors


def _check_env(env: Mapping[str, object], path: str) -> list[FieldError]:
    errors = []
    for key in env:
        if not _ENV_NAME.match(key):
            errors.append(
                FieldError(f"{path}.{key}", "not a valid variable name: use letters, digits and '_', e.g. MY_VAR")
            )
        elif key.startswith(_RESERVED_ENV_PREFIX):
            errors.append(FieldError(f"{path}.{key}", f"names starting with {_RESERVED_ENV_PREFIX} are reserved"))
    return errors


def apply_defaults(job: TrainingJob, jobtype: JobType) -> TrainingJob:
    """Complete every role's template from the JobType role and the T-shirt sizes; reset the status."""
    replicas: dict[str, ReplicaSpec] = {}
    for role_name, replica in job.spec.replicas.items():
        definition = jobtype.spec.roles.get(role_name)
        template = replica.template
        role_template = definition.template if definition else ReplicaTemplate()
        size = template.size or job.spec.size
        fallbacks = [definition.resources] if definition else []
        if size is not None:
            fallbacks.insert(0, SIZES[size])
        fallbacks.append(SIZES[DEFAULT_SIZE])
        try:
            resources = fill_resources(template.resources, role_template.resources, *fallbacks)
        except ValidationError as error:  # e.g. a ceiling below the reservation a size gave: named at its path
            where = ("spec", "replicas", role_name, "template", "resources")
            raise every_problem(
                "TrainingJob",
                [((*where, *item["loc"]), item["msg"].removeprefix("Value error, ")) for item in error.errors()],
            ) from None
        if resources.gpu_model is None and job.spec.scheduling.gpu_model:
            resources = resources.model_copy(update={"gpu_model": job.spec.scheduling.gpu_model})
        completed = template.model_copy(
            update={
                "command": template.command or role_template.command,
                "args": template.args or role_template.args,
                # A variable the job takes from a source is not also given the JobType's value.
                "env": {
                    key: value
                    for key, value in {**role_template.env, **template.env}.items()
                    if key not in template.env_value_from
                },
                "working_dir": template.working_dir or role_template.working_dir,
                "image": template.image or role_template.image,
                "resources": resources,
                # Pod fields the job leaves empty come from the JobType role's template.
                **{
                    name: getattr(role_template, name)
                    for name in PodFields.model_fields
                    if getattr(template, name) in (None, [], {})
                },
            }
        )
        count = replica_count(replica, definition)
        replicas[role_name] = replica.model_copy(update={"template": completed, "count": count})
    spec = job.spec.model_copy(update={"replicas": replicas})
    return job.model_copy(update={"spec": spec, "status": type(job.status)()})
