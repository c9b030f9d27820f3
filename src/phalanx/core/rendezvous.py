"""Rendezvous: the environment each replica receives, rendered from its JobType's templates.

This module owns the meaning of the template language declared in ``phalanx.model.jobtypes``
(``TEMPLATE_VARIABLES``, ``TEMPLATE_FUNCTIONS``, ``TEMPLATE_PATTERN``): ranks, world size, node-local ranks,
the coordinator, ``TF_CONFIG`` and the MPI hostfile. It is pure: the backend supplies where every replica
listens (an ``AddressBook``: loopback with one port per replica in the embedded runtime, DNS names with the
JobType's port on Kubernetes) and on which node each runs, so every backend renders the same environment.
It also expands ``$(NAME)`` in a command line from that environment, with the kubelet's rules, for the
embedded runtime (on Kubernetes the kubelet itself does it).

Invariants:
    - Ranks follow ``JobTypeSpec.ranked_roles()`` restricted to the roles the job has; for a JobType with
      ``allowOtherRoles`` the job's undeclared roles follow, in the job's order. Indices run within a role.
    - The address book lists the replicas that run. A job admitted with ``minAvailable`` may run fewer
      replicas than its spec names; ranks, world size, counts, host lists, ``TF_CONFIG`` and the hostfile
      then cover the running replicas only, so no framework waits for a rank that will never come.
    - ``PHALANX_*`` variables are always set by Phalanx and cannot be overridden by the user's env.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from phalanx.core.pipelines.steps import OUTPUTS_ENV
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import TEMPLATE_PATTERN, JobType
from phalanx.model.replicas import replica_name

RESERVED_ENV_PREFIX = "PHALANX_"
#: ``PHALANX_`` variables a job's template may carry because a controller of Phalanx set them there (the door
#: refuses every ``PHALANX_`` name a user writes): a pipeline step's outputs folder.
CONTROLLER_ENV = frozenset({OUTPUTS_ENV})


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where one replica listens for its peers."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


AddressBook = Mapping[str, Endpoint]
"""Replica name -> endpoint, supplied by the backend."""


class RendezvousError(ValueError):
    """A template cannot be rendered for this job (a missing address or node, an absent role)."""


def ranked_roles(job: TrainingJob, jobtype: JobType | None) -> list[str]:
    """Return the job's roles that get a global rank, in rank order.

    Without a JobType every role of the job is ranked, in the job's order.
    """
    if jobtype is None:
        return list(job.spec.replicas)
    roles = [role for role in jobtype.spec.ranked_roles() if role in job.spec.replicas]
    if jobtype.spec.allow_other_roles:
        roles += [role for role in job.spec.replicas if role not in jobtype.spec.roles]
    return roles


def replica_names(job: TrainingJob, jobtype: JobType | None = None) -> list[tuple[str, int, str]]:
    """Every replica of the job as ``(role, index, name)``: ranked replicas in rank order, then the others.

    Args:
        job: the job.
        jobtype: its JobType, which decides the rank order; without it, the job's role order is used.

    """
    ranked = ranked_roles(job, jobtype)
    roles = ranked + [role for role in job.spec.replicas if role not in ranked]
    return [
        (role, index, replica_name(job.metadata.name, role, index))
        for role in roles
        for index in range(job.spec.replicas[role].count)
    ]


def render_replica_env(
    job: TrainingJob,
    jobtype: JobType,
    role: str,
    index: int,
    addresses: AddressBook,
    *,
    node_of: Mapping[str, str],
    output_dir: str,
    hostfile_path: str,
) -> dict[str, str]:
    """Render the environment of one replica.

    Layers, later ones winning: the JobType's ``env``, its role's ``env`` (both rendered), the ``PHALANX_*``
    variables, then the replica template's own env taken literally (without ``PHALANX_*`` keys, which are
    reserved).

    Args:
        job: the job (its spec decides roles and counts).
        jobtype: the job's JobType.
        role: the replica's role.
        index: the replica's index within its role.
        addresses: where replicas listen, by replica name.
        node_of: replica name -> node name; replicas missing here (not placed yet) are left out of the
            node-local counts.
        output_dir: where the replica writes outputs.
        hostfile_path: where the replica finds the MPI hostfile.

    Raises:
        RendezvousError: the role or index is not in the job, or a template needs an address or node that
            was not supplied.

    """
    if role not in job.spec.replicas or not 0 <= index < job.spec.replicas[role].count:
        raise RendezvousError(f"the job {job.metadata.name!r} has no replica {role}[{index}]")
    context = _Context(
        job=job,
        jobtype=jobtype,
        role=role,
        index=index,
        addresses=addresses,
        node_of=node_of,
        output_dir=output_dir,
        hostfile_path=hostfile_path,
    )
    env: dict[str, str] = {}
    definition = jobtype.spec.roles.get(role)
    layers = [("env", jobtype.spec.env)]
    if definition is not None:
        layers.append((f"roles.{role}.env", definition.env))
    for where, templates in layers:
        for key, template in templates.items():
            env[key] = context.render(template, where=f"{jobtype.metadata.name}: {where}.{key}")
    rank = context.rank()
    env.update(
        {
            "PHALANX_JOB_NAME": job.metadata.name,
            "PHALANX_NAMESPACE": job.metadata.namespace,
            "PHALANX_JOB_UID": job.metadata.uid or "",
            "PHALANX_ROLE": role,
            "PHALANX_REPLICA_INDEX": str(index),
            "PHALANX_RANK": "" if rank is None else str(rank),
            "PHALANX_WORLD_SIZE": str(len(context.ranked)),
            "PHALANX_OUTPUT_DIR": output_dir,
        }
    )
    for key, value in job.spec.replicas[role].template.env.items():
        if not key.startswith(RESERVED_ENV_PREFIX) or key in CONTROLLER_ENV:
            env[key] = value
    return env


def render_hostfile(job: TrainingJob, jobtype: JobType, addresses: AddressBook) -> str:
    """Render an MPI hostfile: one line per host of the replicas of the JobType's ``hostfileRoles``.

    A line is ``HOST slots=N`` in the JobType's ``hostfileFormat`` OpenMPI (what Open MPI's ``mpirun`` reads), and
    ``HOST:N`` in Hydra (what MPICH's and Intel MPI's ``mpiexec`` read), N the host's slots. Replicas that share a
    host (every replica is on 127.0.0.1 in the embedded runtime) are merged into one line whose slots are summed;
    hosts keep the order of their first replica.

    Raises:
        RendezvousError: a listed replica has no address.

    """
    slots: dict[str, int] = {}
    for role in jobtype.spec.hostfile_roles:
        replica = job.spec.replicas.get(role)
        for index in range(replica.count if replica else 0):
            endpoint = addresses.get(replica_name(job.metadata.name, role, index))
            if endpoint is None:
                continue  # not running (admitted with minAvailable): not a host mpirun may use
            slots[endpoint.host] = slots.get(endpoint.host, 0) + jobtype.spec.slots_per_host
    if jobtype.spec.hostfile_format == "Hydra":
        return "".join(f"{host}:{count}\n" for host, count in slots.items())
    return "".join(f"{host} slots={count}\n" for host, count in slots.items())


class _Context:
    """The values templates may name, for one replica, computed on first use."""

    def __init__(
        self,
        *,
        job: TrainingJob,
        jobtype: JobType,
        role: str,
        index: int,
        addresses: AddressBook,
        node_of: Mapping[str, str],
        output_dir: str,
        hostfile_path: str,
    ) -> None:
        self.job = job
        self.role = role
        self.index = index
        self.name = replica_name(job.metadata.name, role, index)
        self.addresses = addresses
        self.node_of = node_of
        self.ranked_role_names = ranked_roles(job, jobtype)
        self.ranked = [(r, i, name) for r in self.ranked_role_names for i, name in self.members(r)]
        self.variables: dict[str, Callable[[], str]] = {
            "job_name": lambda: job.metadata.name,
            "namespace": lambda: job.metadata.namespace,
            "job_uid": lambda: job.metadata.uid or "",
            "role": lambda: role,
            "index": lambda: str(index),
            "rank": lambda: _text(self.rank()),
            "local_rank": lambda: str(self._local()[0]),
            "local_world_size": lambda: str(self._local()[1]),
            "node_rank": lambda: str(self._nodes()[0]),
            "num_nodes": lambda: str(self._nodes()[1]),
            "world_size": lambda: str(len(self.ranked)),
            "host": lambda: self.endpoint(self.name).host,
            "port": lambda: str(self.endpoint(self.name).port),
            "coordinator_host": lambda: self.endpoint(self.coordinator()).host,
            "coordinator_port": lambda: str(self.endpoint(self.coordinator()).port),
            "tf_config": self.tf_config,
            "hostfile": lambda: hostfile_path,
            "output_dir": lambda: output_dir,
            "local_gpus": self.local_gpus,
        }

    def render(self, template: str, *, where: str) -> str:
        """Replace every ``{{ ... }}`` in ``template``."""
        if self.name not in self.addresses:
            raise RendezvousError(f"{where}: replica {self.name!r} has no address: it is not among the running")

        def substitute(match: re.Match[str]) -> str:
            name, args = match.group(1), match.group(2)
            try:
                if args is None:
                    if name not in self.variables:
                        raise RendezvousError(f"unknown template variable {name!r}")
                    return self.variables[name]()
                return self.function(name, [part.strip() for part in args.split(",")])
            except RendezvousError as err:
                raise RendezvousError(f"{where}: {err}") from None

        return TEMPLATE_PATTERN.sub(substitute, template)

    def local_gpus(self) -> str:
        """The replica's GPUs numbered as it sees them, ``0,1,…,n-1``.

        Both backends make only the replica's own GPUs visible to it (the embedded runtime through
        CUDA_VISIBLE_DEVICES, Kubernetes through the device plugin), numbered from 0; a share of one GPU is 0.
        """
        resources = self.job.spec.replicas[self.role].template.resources
        count = resources.gpu or (1 if resources.gpu_milli else 0)
        return ",".join(str(i) for i in range(count))

    def members(self, role: str) -> list[tuple[int, str]]:
        """``(index, name)`` of the role's replicas that run (those in the address book), in index order."""
        replica = self.job.spec.replicas.get(role)
        names = [(i, replica_name(self.job.metadata.name, role, i)) for i in range(replica.count if replica else 0)]
        return [(i, name) for i, name in names if name in self.addresses]

    def function(self, name: str, args: list[str]) -> str:
        """Evaluate ``name(args)``."""
        role = args[0]
        members = self.members(role)
        if name == "count":
            return str(len(members))
        if name == "hosts":
            return ",".join(str(self.endpoint(member)) for _, member in members)
        if name in ("host", "port") and len(args) == 2 and args[1].isdigit():
            index = int(args[1])
            wanted = replica_name(self.job.metadata.name, role, index)
            if wanted not in self.addresses:
                raise RendezvousError(
                    f"{name}({role}, {index}): replica {wanted!r} does not run "
                    f"(running {role!r} replicas: {len(members)})"
                )
            endpoint = self.endpoint(wanted)
            return endpoint.host if name == "host" else str(endpoint.port)
        raise RendezvousError(f"unknown template function {name}({', '.join(args)})")

    def endpoint(self, name: str) -> Endpoint:
        """Look up the address of a replica, by name."""
        endpoint = self.addresses.get(name)
        if endpoint is None:
            raise RendezvousError(f"no address for replica {name!r}")
        return endpoint

    def rank(self) -> int | None:
        """Return the global rank of this replica, or None for a role outside the ranked roles."""
        for rank, (_, _, name) in enumerate(self.ranked):
            if name == self.name:
                return rank
        return None

    def coordinator(self) -> str:
        """Return the name of the rank-0 replica."""
        if not self.ranked:
            raise RendezvousError("the job has no ranked replica to coordinate it")
        return self.ranked[0][2]

    def tf_config(self) -> str:
        """Render TF_CONFIG: the cluster of ranked roles and this replica's task, as compact JSON."""
        cluster = {
            role: [str(self.endpoint(name)) for _, name in self.members(role)] for role in self.ranked_role_names
        }
        # The task index is the position in the role's cluster list, which skips replicas that do not run.
        position = [name for _, name in self.members(self.role)].index(self.name) if self.name in self.addresses else 0
        config = {"cluster": cluster, "task": {"type": self.role, "index": position}}
        return json.dumps(config, separators=(",", ":"))

    def _group(self) -> list[str]:
        # Node-local numbering runs over the ranked replicas for a ranked replica, and over the replica's own
        # role otherwise (an evaluator counts evaluators), in rank order; unplaced replicas are left out.
        if self.rank() is not None:
            names = [name for _, _, name in self.ranked]
        else:
            names = [name for _, name in self.members(self.role)]
        if self.name not in self.node_of:
            raise RendezvousError(f"no node known for replica {self.name!r}")
        return [name for name in names if name in self.node_of]

    def _local(self) -> tuple[int, int]:
        group = self._group()
        node = self.node_of[self.name]
        peers = [name for name in group if self.node_of[name] == node]
        return peers.index(self.name), len(peers)

    def _nodes(self) -> tuple[int, int]:
        group = self._group()
        nodes = list(dict.fromkeys(self.node_of[name] for name in group))
        return nodes.index(self.node_of[self.name]), len(nodes)


def _text(value: int | None) -> str:
    return "" if value is None else str(value)


def expand_references(value: str, env: Mapping[str, str]) -> str:
    """Expand ``$(NAME)`` in a command or argument from the replica's environment, as Kubernetes does.

    On Kubernetes the kubelet expands a container's command and args from its env; the embedded runtime does
    the same with the same rules, so one job runs alike on both backends and a JobType's rendered variables
    (``$(LISTEN_PORT)``) can reach a framework that takes them as arguments. ``$$`` is a literal ``$`` (so
    ``$$(NAME)`` stays ``$(NAME)``); a name not in ``env``, an unterminated ``$(``, and any other ``$`` are
    kept as written.
    """
    out: list[str] = []
    cursor = 0
    while cursor < len(value):
        char = value[cursor]
        if char != "$" or cursor + 1 == len(value):
            out.append(char)
            cursor += 1
            continue
        following = value[cursor + 1]
        close = value.find(")", cursor + 2) if following == "(" else -1
        if following == "$":
            out.append("$")
            cursor += 2
        elif close != -1:
            name = value[cursor + 2 : close]
            out.append(env.get(name, f"$({name})"))
            cursor = close + 1
        else:  # not a reference: the $ stays, and what follows it is read as text
            out.append("$")
            cursor += 1
    return "".join(out)
