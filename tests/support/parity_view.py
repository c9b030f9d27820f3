"""What each replica of a job was told, in a form in which the embedded runtime and Kubernetes can be compared.

The two backends cannot give the same bytes: the embedded runtime puts every replica on 127.0.0.1 with a port of
its own, Kubernetes on ``<pod>.<job>.<namespace>.svc`` with the JobType's port; the hostfile and outputs live in
different places; the node-local numbering follows each backend's own node layout. So each backend's record of
a job (``JobFacts``, read by ``support.rendering_parity``) is turned into a *view* (``parity_view``) in which:

- every variable the JobType renders (its ``env`` and its role's ``env``; a key the replica template sets
  overrides them literally), and ``PHALANX_ROLE``, ``PHALANX_RANK``, ``PHALANX_WORLD_SIZE`` and
  ``PHALANX_REPLICA_INDEX``, is read back against its template: a replica's address becomes ``<replica>`` (in
  plain values, ``hosts(...)`` lists and ``TF_CONFIG`` JSON), a host alone ``<replica>.host`` and a port alone
  ``<replica>.port`` (checked to be that replica's in the backend's address book, the replica being the one the
  template names: itself, the rank-0 replica *as the replicas were told their ranks*, or ``host(role, i)``);
- the hostfile path, the output directory, the namespace and the job's uid become a marker once checked
  against the backend's own;
- ``LOCAL_RANK``-like values (``local_rank``, ``local_world_size``, ``node_rank``, ``num_nodes``) become a marker
  once checked against the backend's own node layout, computed here from the told ranks (the embedded runtime:
  where the scheduler placed each replica; Kubernetes: one node per Pod, the renderer's stated choice);
- the command line is the replica template's (command and args), once the replica's is checked to be it with
  ``$(NAME)`` expanded from its environment, as both backends expand it (the embedded runtime before the launch,
  the kubelet on Kubernetes);
- the hostfile becomes ``(replica, slots)`` per replica of the ``hostfileRoles``: the embedded runtime merges
  replicas sharing 127.0.0.1 into one line whose slots are summed, Kubernetes lists each replica.

A value that fails its check keeps what it was and says what was expected, and is listed in the view's
``problems``; ``assert_same_views`` fails on any problem and on any difference between the two views.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from phalanx.core.rendezvous import Endpoint, expand_references
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import TEMPLATE_PATTERN, JobType
from phalanx.model.replicas import replica_name

#: Phalanx's own variables that say who a replica is; the rest of ``PHALANX_*`` is backend-specific (paths, uid).
IDENTITY_VARIABLES = ("PHALANX_ROLE", "PHALANX_RANK", "PHALANX_WORLD_SIZE", "PHALANX_REPLICA_INDEX")
NODE_LOCAL = ("local_rank", "local_world_size", "node_rank", "num_nodes")
#: The view's key for a replica's command line (not a variable name: lower case).
COMMAND = "command line"
PYTHON_NAMES = ("python", "python3")


@dataclass(frozen=True)
class JobFacts:
    """One backend's record of one job: where its replicas listen and run, what each was told, its files.

    Attributes:
        backend: ``embedded`` or ``kubernetes`` (for messages).
        namespace: the job's namespace there.
        uid: the job's uid there.
        addresses: replica -> where it listens (the address book the backend rendered with).
        nodes: replica -> node, as the backend numbered node-local values.
        envs: replica -> the environment the replica got.
        hostfile_paths: replica -> where it finds its hostfile.
        output_dirs: replica -> its output directory.
        hostfiles: replica -> the content of its hostfile (replicas with none are absent).
        commands: replica -> its command line (command and args).
        commands_expanded: whether ``$(NAME)`` in the commands was expanded already (the embedded runtime does
            it before the launch; on Kubernetes the kubelet does it as the container starts).
    """

    backend: str
    namespace: str
    uid: str
    addresses: Mapping[str, Endpoint]
    nodes: Mapping[str, str]
    envs: Mapping[str, Mapping[str, str]]
    hostfile_paths: Mapping[str, str] = field(default_factory=dict)
    output_dirs: Mapping[str, str] = field(default_factory=dict)
    hostfiles: Mapping[str, str] = field(default_factory=dict)
    commands: Mapping[str, Sequence[str]] = field(default_factory=dict)
    commands_expanded: bool = False


@dataclass
class ParityView:
    """What each replica was told, with backend-specific values replaced (module docstring); and the problems."""

    replicas: dict[str, dict[str, str]]
    hostfiles: list[list[tuple[str, str]]]
    problems: list[str]


def parity_view(job: TrainingJob, jobtype: JobType, facts: JobFacts) -> ParityView:
    """Turn one backend's record of ``job`` into the view both backends must agree on (module docstring)."""
    reader = _Reader(job, jobtype, facts)
    replicas = {name: reader.replica(name) for name in sorted(facts.envs)}
    hostfiles = [reader.hostfile(content) for content in dict.fromkeys(facts.hostfiles.values())]
    return ParityView(replicas=replicas, hostfiles=hostfiles, problems=reader.problems)


def assert_same_views(job: TrainingJob, jobtype: JobType, left: JobFacts, right: JobFacts) -> ParityView:
    """Assert that two records of ``job`` give the same view, and that neither has a problem; return the view."""
    views = [parity_view(job, jobtype, facts) for facts in (left, right)]
    problems = [
        f"{facts.backend}: {p}" for facts, view in zip((left, right), views, strict=True) for p in view.problems
    ]
    assert not problems, "\n".join(problems)
    differences = _differences(views[0], views[1], left.backend, right.backend)
    assert not differences, f"{left.backend} and {right.backend} told the replicas different things:\n" + "\n".join(
        differences
    )
    assert views[0].replicas, "no replica in the view"
    return views[0]


def _differences(left: ParityView, right: ParityView, a: str, b: str) -> list[str]:
    lines = []
    if set(left.replicas) != set(right.replicas):
        lines.append(f"replicas: {a} {sorted(left.replicas)}, {b} {sorted(right.replicas)}")
    for replica in sorted(set(left.replicas) & set(right.replicas)):
        mine, theirs = left.replicas[replica], right.replicas[replica]
        for key in sorted(set(mine) | set(theirs)):
            if mine.get(key) != theirs.get(key):
                lines.append(f"{replica} {key}: {a} {mine.get(key)!r}, {b} {theirs.get(key)!r}")
    if left.hostfiles != right.hostfiles:
        lines.append(f"hostfile: {a} {left.hostfiles}, {b} {right.hostfiles}")
    return lines


class _Reader:
    """Reads one backend's values back against the JobType's templates."""

    def __init__(self, job: TrainingJob, jobtype: JobType, facts: JobFacts) -> None:
        self.job = job
        self.jobtype = jobtype
        self.facts = facts
        self.problems: list[str] = []
        # The ranks as the replicas were told them: the coordinator and node-local numbering follow these.
        told = {name: env.get("PHALANX_RANK", "") for name, env in facts.envs.items()}
        self.ranked = sorted((name for name, rank in told.items() if rank.isdigit()), key=lambda n: int(told[n]))
        self._addresses = sorted(
            ((str(endpoint), name) for name, endpoint in facts.addresses.items()), key=lambda p: -len(p[0])
        )
        alternatives = "|".join(re.escape(address) for address, _ in self._addresses)
        self._address_pattern = re.compile(rf"(?<![\w.-])({alternatives})(?!\d)") if alternatives else None

    def replica(self, name: str) -> dict[str, str]:
        env = self.facts.envs[name]
        role = env.get("PHALANX_ROLE", "")
        templates = self._templates(role)
        literal = {
            key: value
            for key, value in (
                self.job.spec.replicas[role].template.env.items() if role in self.job.spec.replicas else ()
            )
            if not key.startswith("PHALANX_")
        }
        view = {key: env.get(key, "<unset>") for key in IDENTITY_VARIABLES}
        if role in self.job.spec.replicas:
            view[COMMAND] = self._command(name, role)
        for key, template in templates.items():
            observed = env.get(key)
            if observed is None:
                view[key] = "<unset>"
                self.problems.append(f"{name}: {key} is not set")
            elif key in literal:
                view[key] = observed
                if observed != literal[key]:
                    self.problems.append(f"{name}: {key}={observed!r}, the job sets {literal[key]!r}")
            else:
                view[key] = self._read(name, key, template, observed)
        return view

    def _command(self, name: str, role: str) -> str:
        """The template's command line, once the replica's is checked to be it with ``$(NAME)`` expanded from the
        environment the replica was told (as the kubelet expands it on Kubernetes)."""
        template = self.job.spec.replicas[role].template
        written = [*template.command, *template.args]
        env = self.facts.envs[name]
        expected = [expand_references(part, env) for part in written] if self.facts.commands_expanded else written
        actual = list(self.facts.commands.get(name, ()))
        if actual and expected and expected[0] in PYTHON_NAMES and Path(actual[0]).name.startswith("python"):
            actual[0] = expected[0]  # the embedded runtime runs `python` as its own interpreter (node_runtime)
        if actual != expected:
            self.problems.append(f"{name}: runs {actual}, its template with its env gives {expected}")
            return shlex.join(actual)
        return shlex.join(written)

    def _templates(self, role: str) -> dict[str, str]:
        templates = dict(self.jobtype.spec.env)
        definition = self.jobtype.spec.roles.get(role)
        if definition is not None:
            templates.update(definition.env)
        return templates

    def _read(self, name: str, key: str, template: str, observed: str) -> str:
        """Match ``observed`` against ``template`` and normalise each placeholder's part."""
        parts = TEMPLATE_PATTERN.split(template)  # literal, name, args, literal, name, args, ..., literal
        literals, placeholders = parts[::3], list(zip(parts[1::3], parts[2::3], strict=True))
        pattern = "(.*?)".join(re.escape(literal) for literal in literals)
        match = re.fullmatch(pattern, observed, re.DOTALL)
        if match is None:
            self.problems.append(f"{name}: {key}={observed!r} does not have the form of {template!r}")
            return observed
        normalised = [literals[0]]
        for (variable, args), text, literal in zip(placeholders, match.groups(), literals[1:], strict=True):
            arguments = [a.strip() for a in args.split(",")] if args is not None else []
            normalised += [self._piece(name, key, variable, arguments, text), literal]
        return "".join(normalised)

    def _piece(self, name: str, key: str, variable: str, args: list[str], text: str) -> str:
        expected: str | None
        if variable in ("host", "port", "coordinator_host", "coordinator_port"):
            if args:
                referent = replica_name(self.job.metadata.name, args[0], int(args[1]))
            elif variable.startswith("coordinator"):
                referent = self.ranked[0] if self.ranked else "<no rank 0>"
            else:
                referent = name
            endpoint = self.facts.addresses.get(referent)
            part = "host" if variable.endswith("host") else "port"
            expected = None if endpoint is None else (endpoint.host if part == "host" else str(endpoint.port))
            marker = f"<{referent}>.{part}"
        elif variable in ("hosts", "tf_config"):
            return self._addresses_to_names(text)
        elif variable in NODE_LOCAL:
            expected, marker = self._node_local(name, variable), f"<{variable}>"
        elif variable in ("hostfile", "output_dir", "namespace", "job_uid"):
            expected = {
                "hostfile": self.facts.hostfile_paths.get(name),
                "output_dir": self.facts.output_dirs.get(name),
                "namespace": self.facts.namespace,
                "job_uid": self.facts.uid,
            }[variable]
            marker = f"<{variable}>"
        else:  # job_name, role, index, rank, world_size, count(role): the same on every backend
            return text
        if text != expected:
            self.problems.append(f"{name}: {key}: {{{{ {variable} }}}} is {text!r}, expected {expected!r}")
            return text
        return marker

    def _addresses_to_names(self, text: str) -> str:
        if self._address_pattern is None:
            return text
        names = dict(self._addresses)
        return self._address_pattern.sub(lambda match: f"<{names[match.group(1)]}>", text)

    def _node_local(self, name: str, variable: str) -> str:
        """The value the backend's node layout gives: node-local numbering over the ranked replicas (over the
        replica's own role for one without a rank), in rank order (index order)."""
        nodes = self.facts.nodes
        if name in self.ranked:
            group = [n for n in self.ranked if n in nodes]
        else:
            role = self.facts.envs[name].get("PHALANX_ROLE", "")
            group = sorted(
                (n for n, env in self.facts.envs.items() if env.get("PHALANX_ROLE") == role and n in nodes),
                key=lambda n: int(self.facts.envs[n].get("PHALANX_REPLICA_INDEX", "0")),
            )
        if name not in nodes:
            return "<no node>"
        peers = [n for n in group if nodes[n] == nodes[name]]
        order = list(dict.fromkeys(nodes[n] for n in group))
        return str(
            {
                "local_rank": peers.index(name),
                "local_world_size": len(peers),
                "node_rank": order.index(nodes[name]),
                "num_nodes": len(order),
            }[variable]
        )

    def hostfile(self, content: str) -> list[tuple[str, str]]:
        """``(replica, slots)`` per replica of the hostfile roles, in the file's order; a host's slots shared
        evenly among the replicas listening there (the embedded runtime merges them into one line)."""
        listed = [
            name
            for role in self.jobtype.spec.hostfile_roles
            if role in self.job.spec.replicas
            for name in (
                replica_name(self.job.metadata.name, role, i) for i in range(self.job.spec.replicas[role].count)
            )
            if name in self.facts.addresses
        ]
        entries: list[tuple[str, str]] = []
        for line in content.splitlines():
            if not line.strip():
                continue
            host, _, slots_text = line.partition(" slots=")
            slots = int(slots_text) if slots_text.isdigit() else -1
            there = [name for name in listed if self.facts.addresses[name].host == host]
            if not there or slots % len(there):
                self.problems.append(f"hostfile line {line!r}: slots cannot be shared among replicas {there}")
                entries.append((host, slots_text))
                continue
            entries += [(name, str(slots // len(there))) for name in there]
        return entries
