"""What every command module of the ``phalanx`` CLI shares: option types, output formats, the backend session.

``--backend``/``--kubeconfig``/``--context`` become a client of the chosen backend for one command here; a server
named by ``phalanx --server URL`` (``$PHALANX_SERVER``, the config file; ``remote_settings``) takes precedence over
the local state directory, and contradicts a cluster named on the same command.

The option types are ``Annotated`` aliases so that every verb spells an option the same way (same flag, same
help text); ``backends.choose_backend`` decides the backend, this module only turns its refusal into exit 2.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from phalanx.entrypoints.cli.backends import Backend, BackendChoice, BackendError, choose_backend
from phalanx.entrypoints.cli.output import fail
from phalanx.entrypoints.cli.running import session

if TYPE_CHECKING:
    from phalanx.entrypoints.client import Client
    from phalanx.entrypoints.kubernetes.client import KubernetesClient
    from phalanx.entrypoints.remote_client import RemoteClient


@dataclass
class ServerOptions:
    """``phalanx --server URL --token-file FILE VERB``: set by the app's callback, read by ``choose``."""

    server: str | None = None
    token_file: Path | None = None


#: The global options of this command (one command per process; the callback sets them before the verb runs).
GLOBAL = ServerOptions()


class Output(StrEnum):
    """Output formats."""

    TABLE = "table"
    WIDE = "wide"
    YAML = "yaml"
    JSON = "json"


class Resource(StrEnum):
    """What `get` lists."""

    JOBS = "jobs"
    JOB = "job"
    NODES = "nodes"
    NODE = "node"
    JOBTYPES = "jobtypes"
    JOBTYPE = "jobtype"
    QUEUES = "queues"
    QUEUE = "queue"
    DATASETS = "datasets"
    DATASET = "dataset"
    SWEEPS = "sweeps"
    SWEEP = "sweep"
    SW = "sw"
    PIPELINES = "pipelines"
    PIPELINE = "pipeline"
    PL = "pl"
    PIPELINERUNS = "pipelineruns"
    PIPELINERUN = "pipelinerun"
    PLR = "plr"


QUEUE_RESOURCES = ("queue", "queues")
DATASET_RESOURCES = ("dataset", "datasets")
NODE_RESOURCES = ("node", "nodes")
SWEEP_RESOURCES = ("sweep", "sweeps", "sw")
PIPELINE_RESOURCES = ("pipeline", "pipelines", "pl")
PIPELINERUN_RESOURCES = ("pipelinerun", "pipelineruns", "plr")

StateDirOption = Annotated[
    Path | None,
    typer.Option("--state-dir", envvar="PHALANX_HOME", help="State directory (default: ~/.local/share/phalanx)."),
]
FilenameOption = Annotated[
    Path | None, typer.Option("--filename", "-f", help="The file, kubectl-style (instead of the argument).")
]
NamespaceOption = Annotated[
    str | None,
    typer.Option("--namespace", "-n", help="The namespace (default: default; on Kubernetes, the context's namespace)."),
]
BackendOption = Annotated[
    Backend | None,
    typer.Option(
        "--backend",
        help="embedded or kubernetes (default: $PHALANX_BACKEND, else kubernetes when --context or --kubeconfig "
        "is given, else embedded).",
        case_sensitive=False,
        show_default=False,
    ),
]
KubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="kubeconfig file of the cluster (kubernetes backend; default: $KUBECONFIG, ~/.kube/config).",
    ),
]
ContextOption = Annotated[
    str | None,
    typer.Option("--context", help="kubeconfig context: the cluster to use (selects the kubernetes backend)."),
]
OutputOption = Annotated[Output, typer.Option("--output", "-o", help="table, wide, yaml or json.")]
StandInOption = Annotated[
    list[str] | None,
    typer.Option(
        "--stand-in",
        metavar="IMAGE=PROGRAM",
        help="Embedded runtime: run PROGRAM in place of IMAGE, which cannot run here; each replica of that image "
        "runs PROGRAM with its container's command and args as arguments (e.g. kubeflow/mnist:latest=./play.py; "
        "PROGRAM is split into words as a shell would). Repeatable; recorded in the job's phalanx.dev/stand-ins "
        "annotation. Refused on Kubernetes, where images run.",
        show_default=False,
    ),
]


def file_given_once(file: Path | None, filename: Path | None, usage: str) -> Path:
    """The file of a verb given as its argument or as ``-f`` (kubectl's habit); exit 2 with ``usage`` unless once."""
    if file is None and filename is not None:
        return filename
    if filename is None and file is not None:
        return file
    fail(f"give the file once: {usage}", 2)


def _not_runnable(path: Path) -> str | None:
    """Why the system could not start ``path`` as a program (not executable, no ``#!`` line), or None."""
    if not os.access(path, os.X_OK):
        return "is not executable"
    with path.open("rb") as file:
        head = file.read(4)
    # A script starts with #!; a compiled program with its format's magic (ELF here, Mach-O elsewhere).
    if head[:2] == b"#!" or head == b"\x7fELF" or head[:3] == b"\xcf\xfa\xed" or head[:3] == b"\xfe\xed\xfa":
        return None
    return "has no #! line naming its interpreter, so the system cannot start it"


def stand_in_map(given: list[str] | None) -> dict[str, list[str]] | None:
    """``--stand-in IMAGE=PROGRAM`` options as image -> program words; a path-like program made absolute.

    The program's first word, when it has a ``/``, is a file relative to the current directory: it must exist, and
    is made absolute (a replica runs in its own working directory). A bare name is found on PATH when it runs.
    """
    from phalanx.core.stand_ins import parse_stand_in

    if not given:
        return None
    found: dict[str, list[str]] = {}
    for text in given:
        try:
            stand_in = parse_stand_in(text)
        except ValueError as err:
            fail(str(err), 2)
        if stand_in.image in found:
            fail(f"--stand-in {stand_in.image}: given twice; give one program per image", 2)
        program, *rest = stand_in.program
        if "/" in program:
            path = Path(os.path.abspath(Path(program).expanduser()))
            if not path.is_file():
                fail(f"--stand-in {text}: {program} is not a file; give the path of the program playing the image", 2)
            problem = _not_runnable(path)
            if problem:
                # The absolute path: a replica runs in a working directory of its own.
                hint = shlex.join(["python3", str(path), *rest]) if path.suffix == ".py" else f"INTERPRETER {path}"
                fail(f"--stand-in {text}: {program} {problem}; start it with its interpreter: "
                     f"--stand-in {stand_in.image}={shlex.quote(hint)}", 2)  # fmt: skip
            program = str(path)
        found[stand_in.image] = [program, *rest]
    return found


INSTALL_HINT = "phalanx install --print | kubectl apply -f -"


def require_named_resource(resource: str, verb: str, *, nodes: bool = False) -> None:
    """Verbs on one object take ``KIND NAME``: job, queue, dataset, sweep, pipeline, pipelinerun (node: ``nodes``)."""
    named = (*QUEUE_RESOURCES, *DATASET_RESOURCES, *SWEEP_RESOURCES, *PIPELINE_RESOURCES, *PIPELINERUN_RESOURCES)
    if resource not in ("job", "jobs", *named, *(NODE_RESOURCES if nodes else ())):
        node = f", `phalanx {verb} node NAME`" if nodes else ""
        fail(
            f"cannot {verb} {resource!r}; use `phalanx {verb} job NAME`, `phalanx {verb} queue NAME`{node}, "
            f"`phalanx {verb} dataset NAME`, `phalanx {verb} sweep NAME`, `phalanx {verb} pipeline NAME` or "
            f"`phalanx {verb} pipelinerun NAME`",
            2,
        )


def choose(backend: Backend | None, kubeconfig: Path | None, context: str | None) -> BackendChoice:
    """The command's backend (``backends.choose_backend``), or the server named; a contradiction is exit 2."""
    from phalanx.entrypoints.remote_settings import SettingsError, server_settings

    try:
        settings = server_settings(os.environ, server=GLOBAL.server, token_file=GLOBAL.token_file)
    except SettingsError as err:
        fail(str(err), 2)
    if settings is not None:
        given = [
            name
            for name, value in (("--backend", backend), ("--kubeconfig", kubeconfig), ("--context", context))
            if value
        ]
        if given:
            fail(
                f"{' and '.join(given)} chose a backend, and --server (or $PHALANX_SERVER, or the config file) a "
                f"Phalanx server ({settings.server}); give one of them",
                2,
            )
        return BackendChoice(Backend.EMBEDDED, server=settings)
    try:
        return choose_backend(backend, os.environ, kubeconfig=kubeconfig, context=context)
    except BackendError as err:
        fail(str(err), 2)


@contextmanager
def backend_session(
    choice: BackendChoice, state_dir: Path | None, namespace: str | None
) -> Iterator[Client | KubernetesClient | RemoteClient]:
    """A client of the chosen backend for one command; expected errors become messages and exit codes."""
    if choice.server is not None:
        from phalanx.entrypoints.cli.remote import remote_session

        with remote_session(choice.server, namespace) as remote:
            yield remote
    elif choice.kubernetes:
        from phalanx.entrypoints.cli.cluster import cluster_session

        with cluster_session(choice, namespace) as cluster:
            yield cluster
    else:
        with session(state_dir, namespace or "default") as client:
            yield client


def embedded_only(choice: BackendChoice, verb: str, instead: str) -> None:
    """Refuse (exit 2) a verb of the local control plane when the command's backend is Kubernetes or a server."""
    if choice.server is not None:
        fail(
            f"`phalanx {verb}` is for this machine's local control plane, and --server (or $PHALANX_SERVER, or the "
            f"config file) names the server {choice.server.server}, whose owner runs its control plane; leave "
            "--server out to use the local one",
            2,
        )
    if choice.kubernetes:
        fail(f"`phalanx {verb}` is for the embedded backend's local control plane; on Kubernetes, {instead}", 2)


def print_objects(objects: list[Any], output: Output) -> None:
    """Write objects as their wire form, YAML or JSON (``-o yaml|json``)."""
    from phalanx.entrypoints.cli.render import as_wire
    from phalanx.model.loading import dump_json, dump_yaml

    data = as_wire(objects)
    sys.stdout.write(dump_json(data) + "\n" if output == Output.JSON else dump_yaml(data))
