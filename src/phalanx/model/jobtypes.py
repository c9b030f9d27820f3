"""JobType: a template that defines a kind of ML job as data, so new kinds need no code.

A JobType names its roles (with count bounds and default resources), which roles get a global rank, which
roles decide success, which roles are services stopped once the job succeeds, and the environment each replica
receives. Environment values are templates: ``{{ rank }}``, ``{{ host(master, 0) }}``, ``{{ tf_config }}``.
The variables and functions are listed in ``TEMPLATE_VARIABLES`` and ``TEMPLATE_FUNCTIONS``; a template that
names anything else is rejected when the JobType is loaded, not when a job runs, and every such problem is
reported at once, each with its path.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, StrictBool, field_validator, model_validator
from pydantic.alias_generators import to_camel

from phalanx.model.base import ApiModel, every_problem
from phalanx.model.bounds import MAX_REPLICAS, MAX_SLOTS_PER_HOST, few_roles
from phalanx.model.jobs import EnvMap, ReplicaTemplate, Resources, RoleName, SshKeys, TrainingJob
from phalanx.model.meta import ObjectMeta

TEMPLATE_VARIABLES: dict[str, str] = {
    "job_name": "the job's name",
    "namespace": "the job's namespace",
    "job_uid": "the job's uid",
    "role": "this replica's role",
    "index": "this replica's index within its role",
    "rank": "this replica's global rank (roles in rankRoles order)",
    "local_rank": "rank among the job's replicas on the same node",
    "local_world_size": "number of the job's replicas on this replica's node",
    "node_rank": "index of this replica's node among the job's nodes",
    "num_nodes": "number of nodes the job runs on",
    "world_size": "number of ranked replicas",
    "host": "this replica's host name or address",
    "port": "this replica's rendezvous port",
    "coordinator_host": "host of the replica with rank 0",
    "coordinator_port": "port of the replica with rank 0",
    "tf_config": "TensorFlow TF_CONFIG JSON (cluster of rankRoles, task of this replica)",
    "hostfile": "path of an MPI hostfile listing the hosts of the hostfileRoles",
    "output_dir": "directory where the replica writes outputs",
    "local_gpus": "the replica's GPUs as it numbers them: 0,1,...,n-1 (n whole GPUs; 0 for a share; empty: none)",
}
TEMPLATE_FUNCTIONS: dict[str, str] = {
    "host": "host(ROLE, INDEX): the host of another replica",
    "port": "port(ROLE, INDEX): the rendezvous port of another replica",
    "hosts": "hosts(ROLE): comma-separated host:port of every replica of a role",
    "count": "count(ROLE): replica count of a role",
}
TEMPLATE_PATTERN = re.compile(r"\{\{\s*([a-z_]+)\s*(?:\(([^)]*)\))?\s*\}\}")


class RoleDefinition(ApiModel):
    """One role of a JobType."""

    min_count: int = Field(default=0, ge=0, le=MAX_REPLICAS)
    max_count: int | None = Field(default=None, ge=1, le=MAX_REPLICAS)
    default_count: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    resources: Resources = Field(default_factory=Resources)
    template: ReplicaTemplate = Field(default_factory=ReplicaTemplate)
    env: EnvMap = Field(default_factory=dict)


class JobTypeSpec(ApiModel):
    """The template that defines a kind of job."""

    description: str = ""
    roles: dict[RoleName, RoleDefinition]
    rank_roles: list[str] | None = Field(
        default=None,
        description="roles that get a global rank, in rank order; default: all, in declared order",
    )
    success_roles: list[str] = Field(
        default_factory=list,
        description="the first of these roles present in a job decides success (all its replicas succeed); "
        "when none is present, every non-service replica must succeed",
    )
    service_roles: list[str] = Field(
        default_factory=list, description="roles that serve others (e.g. ps): stopped once the job succeeds"
    )
    hostfile_roles: list[str] = Field(default_factory=list, description="roles listed in the MPI hostfile")
    slots_per_host: int = Field(default=1, ge=1, le=MAX_SLOTS_PER_HOST)
    hostfile_format: Literal["OpenMPI", "Hydra"] = Field(
        default="OpenMPI",
        description="how the MPI hostfile lists a host: 'HOST slots=N' (Open MPI's mpirun) or 'HOST:N' (the Hydra "
        "process manager of MPICH's and Intel MPI's mpiexec)",
    )
    allow_other_roles: StrictBool = Field(
        default=False, description="jobs may name roles the type does not declare (generic programs)"
    )
    port: int = Field(default=29500, ge=1, le=65535)
    env: EnvMap = Field(default_factory=dict)
    ssh_keys: SshKeys | None = Field(
        default=None,
        description="a key pair for every job of this type that names none (spec.sshKeys): on Kubernetes a Secret "
        "mounted in every replica, so that the launcher's mpirun logs in to the workers' SSH servers",
    )

    @field_validator("roles", mode="before")
    @classmethod
    def _few_roles(cls, value: Any) -> Any:
        return few_roles(value, "a job type")

    @model_validator(mode="after")
    def _roles_are_known(self) -> JobTypeSpec:
        if not self.roles:
            raise ValueError("roles: at least one role is needed")
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for field in ("rank_roles", "success_roles", "service_roles", "hostfile_roles"):
            for role in getattr(self, field) or []:
                if role not in self.roles:
                    problems.append(((to_camel(field),), f"{role!r} is not one of the roles {sorted(self.roles)}"))
        for name, role in self.roles.items():
            if role.max_count is not None and role.max_count < max(role.min_count, 1):
                problems.append((("roles", name, "maxCount"), "must be >= minCount"))
        envs = [(("env",), self.env)] + [(("roles", n, "env"), r.env) for n, r in self.roles.items()]
        for where, env in envs:
            for key, value in env.items():
                try:
                    check_template(value, ".".join((*where, key)), self.roles)
                except ValueError as err:
                    problems.append(((*where, key), str(err).split(": ", 1)[1]))
        if problems:
            # Every problem at once (docs/jobtypes.md), not only the first.
            raise every_problem("JobTypeSpec", problems)
        return self

    def ranked_roles(self) -> list[str]:
        """Roles that get a global rank, in rank order."""
        return list(self.rank_roles) if self.rank_roles is not None else list(self.roles)


def check_template(template: str, where: str, roles: dict[str, RoleDefinition] | None = None) -> None:
    """Reject a template that names an unknown variable, function or role.

    Raises:
        ValueError: naming the place, the bad name and what is allowed.
    """
    for match in TEMPLATE_PATTERN.finditer(template):
        name, args = match.group(1), match.group(2)
        if args is None:
            if name not in TEMPLATE_VARIABLES:
                raise ValueError(
                    f"{where}: unknown template variable {name!r}; known: {', '.join(sorted(TEMPLATE_VARIABLES))}"
                )
            continue
        if name not in TEMPLATE_FUNCTIONS:
            raise ValueError(
                f"{where}: unknown template function {name!r}; known: {', '.join(sorted(TEMPLATE_FUNCTIONS))}"
            )
        parts = [part.strip() for part in args.split(",")]
        if roles is not None and parts[0] not in roles and "*" not in roles:
            raise ValueError(f"{where}: {name}({args}) names role {parts[0]!r}; roles are {sorted(roles)}")
        if name in ("host", "port") and (len(parts) != 2 or not parts[1].isdigit()):
            raise ValueError(f"{where}: {name}() takes a role and an index, e.g. {name}(worker, 0)")
        if name in ("hosts", "count") and len(parts) != 1:
            raise ValueError(f"{where}: {name}() takes one role, e.g. {name}(worker)")


class JobType(ApiModel):
    """A kind of ML job, defined as data."""

    api_version: Literal["phalanx.dev/v1alpha1"] = "phalanx.dev/v1alpha1"
    kind: Literal["JobType"] = "JobType"
    metadata: ObjectMeta
    spec: JobTypeSpec


def job_ssh_keys(job: TrainingJob, jobtype: JobType | None) -> SshKeys | None:
    """The key pair a job's replicas get: its own ``spec.sshKeys``, else its JobType's (``mpi``'s, built in)."""
    if job.spec.ssh_keys is not None:
        return job.spec.ssh_keys
    return jobtype.spec.ssh_keys if jobtype is not None else None
