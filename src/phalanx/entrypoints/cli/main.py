"""The ``phalanx`` command: kubectl-like verbs over the embedded runtime or a Kubernetes cluster.

Every job verb takes ``--backend embedded|kubernetes`` (default: ``$PHALANX_BACKEND``, else kubernetes when
``--context`` or ``--kubeconfig`` names a cluster, else embedded; ``backends.choose_backend``). On Kubernetes the
verbs talk to the API server (``cluster.py``, ``services.kubernetes.operations``) and the phalanx-operator and
phalanx-scheduler run the jobs; ``up``, ``down`` and ``status`` are the embedded control plane's only.

Exit codes: 0 success; 1 the job failed (``run``) or an operation failed (e.g. no such job); 2 invalid input
(a spec error, a file that cannot be read, an unknown resource kind); 3 the job was halted while ``run``
followed it; 4 the state store cannot be used for now (locked by another process past the 10 s busy timeout,
or its disk is full): nothing was done, try again.

Imports of the model, store and services happen inside the commands: ``phalanx run`` talks to a running
control plane through its local API and loads none of them, which keeps its own start-up to the cost of
typer and rich.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from phalanx.entrypoints.cli.backends import Backend, BackendChoice, BackendError, choose_backend
from phalanx.entrypoints.cli.follow import LOG_POLL_SECONDS, LogTailer, StoreJobSource, follow
from phalanx.entrypoints.cli.output import console, fail, print_replica_logs, warn
from phalanx.entrypoints.cli.running import refuse_bad_namespace, run_job, session
from phalanx.entrypoints.cli.sim import sim_app
from phalanx.entrypoints.cli.sim_fgd import fgd as _fgd  # noqa: F401  (registers `phalanx sim fgd`)
from phalanx.entrypoints.cli.styles import STOP_FOLLOWING, styled_phase

if TYPE_CHECKING:
    from phalanx.entrypoints.client import Client
    from phalanx.entrypoints.kubernetes.client import KubernetesClient

app = typer.Typer(
    name="phalanx",
    help="Run ML training jobs: gang-scheduled, pinned to CPUs and GPUs, with a lifecycle you can read.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(sim_app, name="sim")


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


QUEUE_RESOURCES = ("queue", "queues")
DATASET_RESOURCES = ("dataset", "datasets")
NODE_RESOURCES = ("node", "nodes")
dataset_app = typer.Typer(help="Datasets: create, get, describe, delete (see docs/datasets.md).", no_args_is_help=True)
cache_app = typer.Typer(help="Node dataset caches: list what they hold, evict entries.", no_args_is_help=True)
app.add_typer(dataset_app, name="dataset")
app.add_typer(cache_app, name="cache")


StateDirOption = Annotated[
    Path | None,
    typer.Option("--state-dir", envvar="PHALANX_HOME", help="State directory (default: ~/.local/share/phalanx)."),
]
NamespaceOption = Annotated[
    str | None,
    typer.Option(
        "--namespace", "-n", help="Namespace of the job (default: default; on Kubernetes, the context's namespace)."
    ),
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
_INSTALL = "phalanx install --print | kubectl apply -f -"


def _require_jobs(resource: str, verb: str, *, nodes: bool = False) -> None:
    """Verbs on one object take ``job NAME``, ``queue NAME`` or ``dataset NAME`` (``node NAME`` where ``nodes``)."""
    if resource not in ("job", "jobs", *QUEUE_RESOURCES, *DATASET_RESOURCES, *(NODE_RESOURCES if nodes else ())):
        node = f", `phalanx {verb} node NAME`" if nodes else ""
        fail(
            f"cannot {verb} {resource!r}; use `phalanx {verb} job NAME`, `phalanx {verb} queue NAME`{node} or "
            f"`phalanx {verb} dataset NAME`",
            2,
        )


def _choose(backend: Backend | None, kubeconfig: Path | None, context: str | None) -> BackendChoice:
    """The command's backend (``backends.choose_backend``); a contradiction is a usage error (exit 2)."""
    try:
        return choose_backend(backend, os.environ, kubeconfig=kubeconfig, context=context)
    except BackendError as err:
        fail(str(err), 2)


@contextmanager
def _session(
    choice: BackendChoice, state_dir: Path | None, namespace: str | None
) -> Iterator[Client | KubernetesClient]:
    """A client of the chosen backend for one command; expected errors become messages and exit codes."""
    if choice.kubernetes:
        from phalanx.entrypoints.cli.cluster import cluster_session

        with cluster_session(choice, namespace) as cluster:
            yield cluster
    else:
        with session(state_dir, namespace or "default") as client:
            yield client


def _placed_jobs(client: Client | KubernetesClient) -> list[Any]:
    """Every job, for what its placements hold; none on a cluster where Phalanx is not installed (yet)."""
    from phalanx.services.operations import OperationError

    try:
        return client.ops.list_jobs(None)
    except OperationError:
        return []


def _embedded_only(choice: BackendChoice, verb: str, instead: str) -> None:
    if choice.kubernetes:
        fail(f"`phalanx {verb}` is for the embedded backend's local control plane; on Kubernetes, {instead}", 2)


def _print_objects(objects: list[Any], output: Output) -> None:
    from phalanx.entrypoints.cli.render import as_wire
    from phalanx.model.loading import dump_json, dump_yaml

    data = as_wire(objects)
    sys.stdout.write(dump_json(data) + "\n" if output == Output.JSON else dump_yaml(data))


@app.command()
def run(
    file: Annotated[Path, typer.Argument(help="A TrainingJob YAML/JSON file (JobTypes in it are created too).")],
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Submit and return at once.")] = False,
    logs: Annotated[bool, typer.Option("--logs/--no-logs", help="Stream replica logs.")] = True,
    inventory: Annotated[
        Path | None, typer.Option(help="Start the control plane on simulated nodes (YAML of Node objects).")
    ] = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Submit a job, starting the local control plane if needed, and follow it to the end."""
    refuse_bad_namespace(namespace)
    choice = _choose(backend, kubeconfig, context)
    if choice.kubernetes:
        if inventory is not None:
            fail("--inventory simulates nodes for the embedded backend; a cluster has its own nodes", 2)
        from phalanx.entrypoints.cli.cluster import cluster_session, run_on_cluster

        with cluster_session(choice, namespace) as cluster:
            code = run_on_cluster(cluster, file, detach=detach, logs=logs)
        raise typer.Exit(code)
    raise typer.Exit(
        run_job(
            file, state_dir=state_dir, namespace=namespace or "default", detach=detach, logs=logs, inventory=inventory
        )
    )


@app.command()
def submit(
    file: Annotated[
        Path | None, typer.Argument(help="A YAML/JSON file of TrainingJobs, JobTypes and Queues.", show_default=False)
    ] = None,
    filename: Annotated[
        Path | None, typer.Option("--filename", "-f", help="The file, kubectl-style (instead of the argument).")
    ] = None,
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate only; print the defaulted spec.")] = False,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Validate and create jobs, job types and queues without following them (the control plane picks them up).

    Every document is validated first: if any is invalid, nothing is created. An existing Queue or JobType gets
    the new spec (`configured`), as `kubectl apply` does.
    """
    from phalanx.model.loading import read_documents

    if (file is None) == (filename is None):
        fail("give the file once: `phalanx submit -f FILE` or `phalanx submit FILE`", 2)
    file = filename or file
    assert file is not None
    refuse_bad_namespace(namespace)
    choice = _choose(backend, kubeconfig, context)
    if choice.kubernetes:
        from phalanx.entrypoints.cli.cluster import cluster_session

        with cluster_session(choice, namespace) as cluster:
            if dry_run:
                target = None if cluster.namespace == "default" else cluster.namespace  # as `submit` does
                _print_objects(
                    cluster.ops.validate(read_documents(file), source=str(file), namespace=target), Output.YAML
                )
                return
            for item in cluster.submit(file):
                console.print(f"{item.kind.lower()}/{item.name} {'configured' if item.configured else 'created'}")
        return
    from phalanx.services.embedded.daemon import current_leader

    with session(state_dir, namespace or "default") as client:
        documents = read_documents(file)
        if dry_run:
            objects = client.ops.validate(documents, source=str(file), namespace=namespace)
            _print_objects(objects, Output.YAML)
            return
        submitted = client.submit(file)
        for item in submitted:
            console.print(f"{item.kind.lower()}/{item.name} {'configured' if item.configured else 'created'}")
        if current_leader(client.store) is None:
            console.print("[yellow]note:[/] no control plane is running; start one with `phalanx up`")


@app.command()
def get(
    resource: Annotated[Resource, typer.Argument(help="jobs, nodes, jobtypes, queues or datasets")],
    name: Annotated[str | None, typer.Argument(help="Only this one.")] = None,
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A")] = False,
    output: OutputOption = Output.TABLE,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """List jobs, nodes, job types, queues (usage/quota, admitted and pending jobs) or datasets."""
    from phalanx.entrypoints.cli.render import jobs_table, jobtypes_table, nodes_table, queues_table
    from phalanx.model.replicas import Replica

    choice = _choose(backend, kubeconfig, context)
    with _session(choice, state_dir, namespace) as client:
        namespace = client.namespace
        if resource in (Resource.JOBS, Resource.JOB):
            jobs = (
                [client.ops.get_job(namespace, name)]
                if name
                else client.ops.list_jobs(None if all_namespaces else namespace)
            )
            if output in (Output.YAML, Output.JSON):
                _print_objects(jobs, output)
            elif not jobs:
                console.print(f"No jobs in {'any namespace' if all_namespaces else namespace}.")
            else:
                console.print(jobs_table(jobs, wide=output == Output.WIDE or all_namespaces))
            if not choice.kubernetes and not name:
                _warn_unreadable_jobs(client, None if all_namespaces else namespace)
        elif resource in (Resource.NODES, Resource.NODE):
            nodes = [n for n in client.ops.list_nodes() if name in (None, n.metadata.name)]
            if output in (Output.YAML, Output.JSON):
                _print_objects(nodes, output)
            elif not nodes:
                console.print(
                    "No nodes in the cluster."
                    if choice.kubernetes
                    else "No nodes yet: the control plane registers them when it starts (`phalanx up`)."
                )
            else:
                from phalanx.services.scheduling import holdings_of  # only this view needs the scheduler

                usage: dict[str, dict[str, int]] = {}
                # On a cluster, what admitted jobs were placed on; locally, every replica that still exists too.
                replicas = [] if choice.kubernetes else client.store.list(Replica)  # type: ignore[union-attr]
                for placement, vector in holdings_of(_placed_jobs(client), replicas):
                    used = usage.setdefault(placement.node, {"cpu_milli": 0, "gpu": 0})
                    used["cpu_milli"] += vector.cpu_milli
                    used["gpu"] += len(placement.gpus)
                console.print(nodes_table(nodes, usage))
        elif resource in (Resource.DATASETS, Resource.DATASET):
            _show_datasets(client, name, output, all_namespaces)
        elif resource in (Resource.QUEUES, Resource.QUEUE):
            views = client.ops.queue_views()
            if name:
                views = [view for view in views if view.name == name]
                if not views:
                    client.ops.get_queue(name)  # says it is not found, with the names of the others
            if output in (Output.YAML, Output.JSON):
                _print_objects([view.current() for view in views], output)
            elif not views:
                console.print("No queues: create one with `phalanx submit -f queue.yaml` (see docs/queues.md).")
            else:
                console.print(queues_table(views))
        else:
            jobtypes = [jt for n, jt in sorted(client.ops.jobtypes().items()) if name in (None, n)]
            if name and not jobtypes:
                fail(f"job type {name!r} not found; known: {', '.join(sorted(client.ops.jobtypes()))}")
            if output in (Output.YAML, Output.JSON):
                _print_objects(jobtypes, output)
            else:
                console.print(jobtypes_table(jobtypes))


def _describe_node(client: Client | KubernetesClient, name: str) -> None:
    """`phalanx describe node NAME`; the events are the local control plane's (on a cluster: `kubectl describe`)."""
    from phalanx.entrypoints.cli.render import print_node_description

    nodes = client.ops.list_nodes()
    node = next((n for n in nodes if n.metadata.name == name), None)
    if node is None:
        known = ", ".join(sorted(n.metadata.name for n in nodes)) or "none"
        fail(f"node {name!r} not found; known: {known}")
    store = getattr(client, "store", None)
    events = store.list_events("Node", node.metadata.namespace, name) if store is not None else None
    print_node_description(console, node, events)


def _warn_unreadable_jobs(client: Client | KubernetesClient, namespace: str | None) -> None:
    """Say which stored jobs cannot be read, so that a listing never hides them silently."""
    store = getattr(client, "store", None)
    if store is None:
        return
    unreadable = [
        record
        for record in store.quarantined("TrainingJob")
        if not record.readable and namespace in (None, record.namespace)
    ]
    for record in unreadable:
        warn(
            f"job {record.namespace}/{record.name} is stored but cannot be read ({record.message}); it is "
            f"quarantined: delete it with `phalanx delete job {record.name} -n {record.namespace}`"
        )


@app.command()
def describe(
    resource: Annotated[str, typer.Argument(help="job, queue, dataset or node")],
    name: Annotated[str, typer.Argument(help="Its name.")],
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Show a job (roles, placement, replicas, events), a queue (quota, usage, jobs), a dataset or a node (GPUs)."""
    from phalanx.entrypoints.cli.render import print_description, print_queue_description

    _require_jobs(resource, "describe", nodes=True)
    choice = _choose(backend, kubeconfig, context)
    with _session(choice, state_dir, namespace) as client:
        if resource in NODE_RESOURCES:
            _describe_node(client, name)
            return
        if resource in QUEUE_RESOURCES:
            print_queue_description(console, client.describe_queue(name))
            return
        if resource in DATASET_RESOURCES:
            from phalanx.entrypoints.cli.render_data import print_dataset_description

            print_dataset_description(console, client.describe_dataset(name))
            return
        print_description(console, client.describe(name), pods=choice.kubernetes)


@app.command()
def logs(
    job: Annotated[str, typer.Argument(help="The job's name.")],
    replica: Annotated[str | None, typer.Option("--replica", "-r", help="e.g. worker-0")] = None,
    follow_logs: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")] = False,
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Print the logs of a job's replicas (latest attempt of each)."""
    choice = _choose(backend, kubeconfig, context)
    if choice.kubernetes:
        from phalanx.entrypoints.cli.cluster import cluster_session, print_logs

        with cluster_session(choice, namespace) as cluster:
            code = print_logs(cluster, job, replica, follow_logs=follow_logs)
        if code:
            raise typer.Exit(code)
        return
    namespace = namespace or "default"
    with session(state_dir, namespace) as client:
        files = client.ops.log_files(namespace, job, replica)
        if follow_logs:
            if replica is None:
                follow(StoreJobSource(client, job), console, show_phases=False)
                return
            tailer = LogTailer()
            while True:
                seq = client.store.latest_seq()
                for _, line in tailer.read(client.ops.log_files(namespace, job, replica)):
                    console.print(escape(line), highlight=False)
                current = client.get(job)
                if current.status.phase in STOP_FOLLOWING:
                    for _, line in tailer.read(client.ops.log_files(namespace, job, replica)):
                        console.print(escape(line), highlight=False)
                    return
                client.store.wait_for_change(seq, LOG_POLL_SECONDS)
        from phalanx.adapters.executor import read_exit_code

        job_ended = client.get(job).status.phase in STOP_FOLLOWING
        shown: list[tuple[str, str, bool]] = []
        for short, path in files:
            text = path.read_text(errors="replace") if path.exists() else ""
            # A replica has ended once its shim recorded an exit code, or once the whole job has (a halted job's
            # replicas were stopped, maybe before they could record one).
            shown.append((short, text, job_ended or read_exit_code(path.parent) is not None))
        print_replica_logs(shown)


@app.command()
def halt(
    job: Annotated[str, typer.Argument(help="The job's name.")],
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until it is Halted.")] = True,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Stop every replica of a job; it keeps its outputs and can be resumed."""
    from phalanx.model.jobs import Phase
    from phalanx.services.embedded.daemon import current_leader

    choice = _choose(backend, kubeconfig, context)
    with _session(choice, state_dir, namespace) as client:
        client.halt(job)
        # Locally, nothing moves the job while no control plane runs; on a cluster the operator always runs.
        if wait and (choice.kubernetes or current_leader(client.store) is not None):  # type: ignore[union-attr]
            final = client.wait(job, until={Phase.HALTED, Phase.SUCCEEDED, Phase.FAILED}, timeout=120)
            console.print(f"job/{job} {styled_phase(final.status.phase)}")
        else:
            console.print(f"job/{job} halting")


@app.command()
def resume(
    job: Annotated[str, typer.Argument(help="The job's name.")],
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Queue a halted job again."""
    choice = _choose(backend, kubeconfig, context)
    with _session(choice, state_dir, namespace) as client:
        client.resume(job)
        console.print(f"job/{job} resumed")


@app.command()
def delete(
    resource: Annotated[str | None, typer.Argument(help="job, queue or dataset", show_default=False)] = None,
    name: Annotated[str | None, typer.Argument(help="Its name.", show_default=False)] = None,
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    quarantined: Annotated[
        bool,
        typer.Option(
            "--quarantined",
            help="Delete every quarantined object instead (see `phalanx status`), even rows that cannot be read.",
        ),
    ] = False,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Delete a job (stop its replicas, then remove it with its logs), a queue (its jobs keep running) or a dataset.

    With --quarantined: every object the control plane set aside (see `phalanx status`), rows it cannot read
    included.
    """
    choice = _choose(backend, kubeconfig, context)
    if quarantined:
        if resource is not None:
            fail("`phalanx delete --quarantined` takes no resource or name: it deletes every quarantined object", 2)
        _embedded_only(choice, "delete --quarantined", "objects the API server cannot read are its to report")
        with session(state_dir) as local:
            removed = local.ops.delete_quarantined()
        for record in removed:
            console.print(f"{record.kind.lower()}/{escape(record.name)} deleted (namespace {escape(record.namespace)})")
        if not removed:
            console.print("nothing is quarantined")
        return
    if resource is None or name is None:
        fail("give what to delete: `phalanx delete job NAME` (or queue, dataset), or `phalanx delete --quarantined`", 2)
    _require_jobs(resource, "delete")
    with _session(choice, state_dir, namespace) as client:
        if resource in DATASET_RESOURCES:
            _delete_dataset(client, name)
            return
        if resource in QUEUE_RESOURCES:
            deleted = client.delete_queue(name)
            console.print(f"queue/{name} deleted")
            if deleted.admitted_count:
                jobs = ", ".join(job.key for job in deleted.admitted) or f"{deleted.admitted_count} job(s)"
                warn(
                    f"queue {name} had {deleted.admitted_count} admitted job(s), which keep running: {jobs}; "
                    f"jobs naming queue {name} are no longer limited by a quota (submit the Queue again to limit "
                    "them)"
                )
            return
        client.delete(name)
        console.print(f"job/{name} deleted")


def _show_datasets(client: Client | KubernetesClient, name: str | None, output: Output, everywhere: bool) -> None:
    from phalanx.entrypoints.cli.render_data import datasets_table

    datasets = [client.dataset(name)] if name else client.ops.list_datasets(None if everywhere else client.namespace)
    if output in (Output.YAML, Output.JSON):
        _print_objects(datasets, output)
    elif not datasets:
        console.print(
            f"No datasets in {'any namespace' if everywhere else client.namespace}: create one with "
            "`phalanx dataset create -f dataset.yaml` (see docs/datasets.md)."
        )
    else:
        console.print(datasets_table(datasets, namespaces=everywhere))


def _delete_dataset(client: Client | KubernetesClient, name: str) -> None:
    dataset = client.delete_dataset(name)
    console.print(f"dataset/{name} deleted")
    if dataset.status.nodes:
        console.print(
            f"note: node caches ({', '.join(dataset.status.nodes)}) keep its data until space is needed; "
            "`phalanx cache evict --dataset NAME` frees it now"
        )


@dataset_app.command("create")
def dataset_create(
    filename: Annotated[Path, typer.Option("--filename", "-f", help="A YAML/JSON file of Datasets.")],
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Follow until materialised or failed.")] = True,
    timeout: Annotated[float, typer.Option(help="Seconds to wait at most.")] = 3600.0,
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Create Datasets (or give existing ones the new spec) and follow them until they are Ready or Failed."""
    from phalanx.model.loading import read_documents

    documents = read_documents(filename)
    others = sorted({str(d.get("kind", "TrainingJob")) for d in documents} - {"Dataset"})
    if others:
        fail(f"{filename} holds {', '.join(others)} too; `phalanx dataset create` takes Datasets only (use submit)", 2)
    choice = _choose(backend, kubeconfig, context)
    with _session(choice, state_dir, namespace) as client:
        submitted = client.submit(filename)
        for item in submitted:
            console.print(f"dataset/{item.name} {'configured' if item.configured else 'created'}")
        if not wait:
            return
        failed = False
        for item in submitted:
            with console.status(f"materialising dataset {item.name} …"):
                dataset = client.wait_dataset(item.name, timeout=timeout)
            status = dataset.status
            if status.phase == "Failed":
                failed = True
                console.print(f"[red]dataset/{item.name} Failed[/]: {escape(status.message or '')}")
                continue
            from phalanx.model.resources import human_memory

            console.print(
                f"dataset/{item.name} Ready: version {status.version}, {human_memory(status.bytes)} in "
                f"{status.files} files; {escape(status.lineage or '')}"
            )
        if failed:
            raise typer.Exit(1)


@dataset_app.command("get")
def dataset_get(
    name: Annotated[str | None, typer.Argument(help="Only this one.")] = None,
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A")] = False,
    output: OutputOption = Output.TABLE,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """List Datasets: phase, version, size, files, nodes caching them (as `phalanx get datasets`)."""
    with _session(_choose(backend, kubeconfig, context), state_dir, namespace) as client:
        _show_datasets(client, name, output, all_namespaces)


@dataset_app.command("describe")
def dataset_describe(
    name: Annotated[str, typer.Argument(help="The Dataset's name.")],
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Show a Dataset: source, distribution, version, lineage, nodes caching it, jobs reading it, events."""
    from phalanx.entrypoints.cli.render_data import print_dataset_description

    with _session(_choose(backend, kubeconfig, context), state_dir, namespace) as client:
        print_dataset_description(console, client.describe_dataset(name))


@dataset_app.command("delete")
def dataset_delete(
    name: Annotated[str, typer.Argument(help="The Dataset's name.")],
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Delete a Dataset that no unfinished job reads (its materialised copies go with it)."""
    with _session(_choose(backend, kubeconfig, context), state_dir, namespace) as client:
        _delete_dataset(client, name)


@cache_app.command("ls")
def cache_ls(
    node: Annotated[str | None, typer.Option("--node", help="Only this node's cache.")] = None,
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """What each node's dataset cache holds: entries, size, pins, and per-dataset hits, misses and evictions."""
    from phalanx.entrypoints.cli.render_data import print_caches

    # Caches are per node and hold every namespace's data: --namespace is accepted and changes nothing.
    with _session(_choose(backend, kubeconfig, context), state_dir, namespace) as client:
        views = client.caches(node)
        if not views:
            console.print("No nodes yet: the control plane registers them when it starts (`phalanx up`).")
        print_caches(console, views)


@cache_app.command("evict")
def cache_evict(
    key: Annotated[str | None, typer.Argument(help="The entry's key (see `phalanx cache ls`).")] = None,
    dataset: Annotated[
        str | None, typer.Option("--dataset", help="Every entry of this Dataset (NAME or NAMESPACE/NAME).")
    ] = None,
    node: Annotated[str | None, typer.Option("--node", help="Only on this node.")] = None,
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Evict entries no job uses from node caches; entries in use are refused, naming the jobs.

    On Kubernetes each node's agent evicts, on request (the Node annotation phalanx.dev/dataset-cache-evict).
    """
    if (key is None) == (dataset is None):
        fail("name the entry (`phalanx cache evict KEY`) or the dataset (`--dataset NAME`), not both", 2)
    choice = _choose(backend, kubeconfig, context)
    with _session(choice, state_dir, namespace) as client:
        if dataset is not None and "/" not in dataset:
            dataset = f"{client.namespace}/{dataset}"
        for evicted in client.evict(key=key, dataset=dataset, node=node):
            console.print(f"evicted {evicted}")


@app.command()
def explain(
    job: Annotated[str, typer.Argument(help="The job's name.")],
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Say in one sentence why a job is where it is (why it waits)."""
    choice = _choose(backend, kubeconfig, context)
    with _session(choice, state_dir, namespace) as client:
        console.print(escape(client.explain(job)))


@app.command()
def up(
    state_dir: StateDirOption = None,
    inventory: Annotated[
        Path | None, typer.Option(help="Simulated nodes (YAML of Node objects) instead of this machine.")
    ] = None,
    cache_size: Annotated[
        str | None,
        typer.Option(help="Each node's dataset cache, e.g. 50Gi (default: as recorded; half the free disk when new)."),
    ] = None,
    gpu_fault_file: Annotated[
        Path | None,
        typer.Option(help="A file of this machine's GPU indices to treat as unhealthy, read every 10 s."),
    ] = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Start the local control plane in the background (or report the running one)."""
    from phalanx.services.embedded.daemon import start_control_plane

    _embedded_only(_choose(backend, kubeconfig, context), "up", f"install Phalanx once: {_INSTALL}")

    with session(state_dir) as client:
        leader, started = start_control_plane(
            client.layout, inventory=inventory, cache_size=cache_size, gpu_fault_file=gpu_fault_file
        )
        word = "started" if started else "already running"
        console.print(f"control plane {word} (pid {leader.pid}); state in {client.layout.root}")
        console.print(f"log: {client.layout.control_plane_log}")


@app.command()
def down(
    state_dir: StateDirOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Stop the local control plane. Running replicas keep running and are adopted by the next `up`."""
    _embedded_only(_choose(backend, kubeconfig, context), "down", "Phalanx runs in the cluster; nothing to stop")
    with session(state_dir) as client:
        stopped = client.down()
        console.print("control plane stopped" if stopped else "no control plane was running")


@app.command()
def status(
    state_dir: StateDirOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Is the control plane running, what does this machine hold, and what is quarantined?"""
    from phalanx.core.lifecycle.quarantine import shown_phase
    from phalanx.services.embedded.daemon import current_leader

    _embedded_only(
        _choose(backend, kubeconfig, context),
        "status",
        "see the components with `kubectl -n phalanx-system get pods` and the jobs with `phalanx get jobs`",
    )

    with session(state_dir) as client:
        leader = current_leader(client.store)
        if leader is None:
            console.print("control plane: [yellow]not running[/] (start it with `phalanx up`)")
        else:
            console.print(f"control plane: [green]running[/] (pid {leader.pid}, {leader.holder})")
        console.print(f"state: {client.layout.root}")
        jobs = client.ops.list_jobs(None)
        counts: dict[str, int] = {}
        for job in jobs:
            phase = shown_phase(job.status)
            counts[phase] = counts.get(phase, 0) + 1
        summary = ", ".join(f"{n} {styled_phase(p)}" for p, n in sorted(counts.items())) or "none"
        console.print(f"jobs: {summary}")
        console.print(f"nodes: {len(client.ops.list_nodes())}")
        records = client.ops.quarantined()
        if records:
            console.print(
                f"quarantined: [bold red]{len(records)}[/] object(s) the control plane leaves alone; delete them "
                "(`phalanx delete --quarantined`, or one job with `phalanx delete job NAME -n NAMESPACE`) or fix them"
            )
            for record in records:
                console.print(f"  {escape(record.key)}: {escape(record.message)}", soft_wrap=True)


@app.command()
def install(
    print_yaml: Annotated[
        bool, typer.Option("--print", help="Print the manifests as YAML, e.g. for `| kubectl apply -f -`.")
    ] = False,
    crds_only: Annotated[
        bool,
        typer.Option("--crds-only", help="Only the CustomResourceDefinitions (TrainingJob, JobType, Queue, Dataset)."),
    ] = False,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Namespace of the components (default: phalanx-system).")
    ] = None,
    image: Annotated[str | None, typer.Option(help="Image the components run (default: phalanx:<version>).")] = None,
) -> None:
    """Install Phalanx on Kubernetes: CRDs, RBAC, operator, scheduler and node agent."""
    if not print_yaml:
        fail(
            "nothing is applied by phalanx itself yet; print the manifests and apply them with kubectl: "
            "phalanx install --print | kubectl apply -f -",
            2,
        )
    from phalanx.services.kubernetes.install import InstallRequest, render_install

    request = InstallRequest(image=image, crds_only=crds_only)
    if namespace is not None:
        request = InstallRequest(namespace=namespace, image=image, crds_only=crds_only)
    try:
        text = render_install(request)
    except ValueError as err:
        fail(str(err), 2)
    sys.stdout.write(text)


def main() -> None:
    """Entry point of ``python -m phalanx.entrypoints.cli.main`` (the console script uses the launcher)."""
    from phalanx.entrypoints.cli.launcher import main as launch

    launch()


if __name__ == "__main__":
    main()
