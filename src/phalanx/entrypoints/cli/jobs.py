"""The job verbs of ``phalanx``: run, submit, get, describe, logs, halt, resume, delete and explain.

``get``, ``describe`` and ``delete`` take other kinds too (nodes, job types, queues, datasets), kubectl-style:
they read the resource argument here and hand the other kinds to their noun's module.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from phalanx.entrypoints.cli.follow import LOG_POLL_SECONDS, LogTailer, StoreJobSource, follow
from phalanx.entrypoints.cli.options import (
    DATASET_RESOURCES,
    NODE_RESOURCES,
    PIPELINE_RESOURCES,
    PIPELINERUN_RESOURCES,
    QUEUE_RESOURCES,
    SWEEP_RESOURCES,
    BackendOption,
    ContextOption,
    FilenameOption,
    KubeconfigOption,
    NamespaceOption,
    Output,
    OutputOption,
    Resource,
    StandInOption,
    StateDirOption,
    backend_session,
    choose,
    embedded_only,
    file_given_once,
    print_objects,
    require_named_resource,
    stand_in_map,
)
from phalanx.entrypoints.cli.output import console, fail, print_replica_logs, print_submitted, warn
from phalanx.entrypoints.cli.running import refuse_bad_namespace, run_job, session
from phalanx.entrypoints.cli.styles import STOP_FOLLOWING, styled_phase

if TYPE_CHECKING:
    from phalanx.entrypoints.client import Client
    from phalanx.entrypoints.kubernetes.client import KubernetesClient
    from phalanx.entrypoints.remote_client import RemoteClient


def run(
    file: Annotated[
        Path | None,
        typer.Argument(
            help="A TrainingJob YAML/JSON file (JobTypes in it are created too); or a Sweep, Katib Experiment or "
            "PipelineRun file, followed the same way.",
            show_default=False,
        ),
    ] = None,
    filename: FilenameOption = None,
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
    stand_in: StandInOption = None,
) -> None:
    """Submit a job, starting the local control plane if needed, and follow it to the end.

    A file without a TrainingJob runs its Sweep (each trial as it ends, then the best) or its PipelineRun (each
    step instance as it ends, with its outputs) to the end instead. Exit code: 0 succeeded, 1 failed, 3 halted.
    """
    file = file_given_once(file, filename, "`phalanx run FILE` or `phalanx run -f FILE`")
    refuse_bad_namespace(namespace)
    stand_ins = stand_in_map(stand_in)
    choice = choose(backend, kubeconfig, context)
    if choice.server is not None:
        if inventory is not None:
            fail("--inventory simulates nodes for the local control plane; the server has its own nodes", 2)
        from phalanx.entrypoints.cli.remote import remote_session, run_on_server

        if stand_ins:
            fail("--stand-in names a program of this machine, and the server runs jobs on its own; leave it out", 2)
        with remote_session(choice.server, namespace) as remote:
            code = run_on_server(remote, file, detach=detach, logs=logs)
        raise typer.Exit(code)
    if choice.kubernetes:
        if inventory is not None:
            fail("--inventory simulates nodes for the embedded backend; a cluster has its own nodes", 2)
        from phalanx.entrypoints.cli.cluster import cluster_session, run_on_cluster

        with cluster_session(choice, namespace) as cluster:
            code = run_on_cluster(cluster, file, detach=detach, logs=logs, stand_ins=stand_ins)
        raise typer.Exit(code)
    raise typer.Exit(
        run_job(
            file,
            state_dir=state_dir,
            namespace=namespace or "default",
            detach=detach,
            logs=logs,
            inventory=inventory,
            stand_ins=stand_ins,
        )
    )


def submit(
    file: Annotated[
        Path | None,
        typer.Argument(
            help="A YAML/JSON file of TrainingJobs, JobTypes, Queues, Datasets, Sweeps, Pipelines, PipelineRuns "
            "(or Kubeflow jobs and Katib Experiments).",
            show_default=False,
        ),
    ] = None,
    filename: FilenameOption = None,
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate only; print the defaulted spec.")] = False,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    stand_in: StandInOption = None,
) -> None:
    """Validate and create jobs, job types, queues, datasets, sweeps and pipelines without following them.

    The control plane picks them up (`phalanx up` starts one; `phalanx run FILE` submits and follows). Every
    document is validated first: if any is invalid, nothing is created. An existing Queue, JobType or Pipeline
    gets the new spec (`configured`; `unchanged` if it had it), as `kubectl apply` does.
    """
    from phalanx.model.loading import read_documents

    file = file_given_once(file, filename, "`phalanx submit -f FILE` or `phalanx submit FILE`")
    refuse_bad_namespace(namespace)
    stand_ins = stand_in_map(stand_in)
    choice = choose(backend, kubeconfig, context)
    if choice.server is not None:
        from phalanx.entrypoints.cli.remote import remote_session

        with remote_session(choice.server, namespace) as remote:
            if dry_run:
                target = None if remote.namespace == "default" else remote.namespace  # as `submit` does
                print_objects(
                    remote.ops.validate(read_documents(file), source=str(file), namespace=target), Output.YAML
                )
                return
            print_submitted(remote.submit(file, stand_ins=stand_ins))
        return
    if choice.kubernetes:
        from phalanx.entrypoints.cli.cluster import cluster_session

        with cluster_session(choice, namespace) as cluster:
            if dry_run:
                target = None if cluster.namespace == "default" else cluster.namespace  # as `submit` does
                objects = cluster.ops.validate(
                    read_documents(file), source=str(file), namespace=target, stand_ins=stand_ins
                )
                print_objects(objects, Output.YAML)
                return
            print_submitted(cluster.submit(file, stand_ins=stand_ins))
        return
    from phalanx.services.embedded.daemon import current_leader

    with session(state_dir, namespace or "default") as client:
        documents = read_documents(file)
        if dry_run:
            objects = client.ops.validate(documents, source=str(file), namespace=namespace, stand_ins=stand_ins)
            print_objects(objects, Output.YAML)
            return
        print_submitted(client.submit(file, stand_ins=stand_ins))
        if current_leader(client.store) is None:
            console.print("[yellow]note:[/] no control plane is running; start one with `phalanx up`")


def get(
    resource: Annotated[
        Resource,
        typer.Argument(
            help="jobs, nodes, jobtypes, queues, datasets, sweeps (sw), pipelines (pl) or pipelineruns (plr)"
        ),
    ],
    name: Annotated[str | None, typer.Argument(help="Only this one.")] = None,
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="Those of every namespace (a NAMESPACE column says whose).")
    ] = False,
    output: OutputOption = Output.TABLE,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """List jobs, nodes, job types, queues (usage/quota, jobs), datasets, sweeps, pipelines or pipeline runs."""
    from phalanx.entrypoints.cli.datasets import show_datasets
    from phalanx.entrypoints.cli.jobtypes import show_jobtypes
    from phalanx.entrypoints.cli.nodes import show_nodes
    from phalanx.entrypoints.cli.pipelines import show_pipelineruns, show_pipelines
    from phalanx.entrypoints.cli.queues import show_queues
    from phalanx.entrypoints.cli.sweeps import show_sweeps

    choice = choose(backend, kubeconfig, context)
    with backend_session(choice, state_dir, namespace) as client:
        namespace = client.namespace
        if resource in (Resource.JOBS, Resource.JOB):
            _show_jobs(client, name, output, namespace=None if all_namespaces else namespace)
            if not choice.kubernetes and not name:
                _warn_unreadable_jobs(client, None if all_namespaces else namespace)
        elif resource in (Resource.NODES, Resource.NODE):
            show_nodes(client, choice, name, output)
        elif resource in (Resource.DATASETS, Resource.DATASET):
            show_datasets(client, name, output, all_namespaces)
        elif resource in (Resource.QUEUES, Resource.QUEUE):
            show_queues(client, name, output)
        elif resource in SWEEP_RESOURCES:
            show_sweeps(client, name, output, all_namespaces)
        elif resource in PIPELINE_RESOURCES:
            show_pipelines(client, name, output, all_namespaces)
        elif resource in PIPELINERUN_RESOURCES:
            show_pipelineruns(client, name, output, all_namespaces)
        else:
            show_jobtypes(client, name, output)


def _show_jobs(
    client: Client | KubernetesClient | RemoteClient, name: str | None, output: Output, *, namespace: str | None
) -> None:
    """Print the jobs of ``namespace`` (every namespace's when None; only ``name`` when given)."""
    from phalanx.entrypoints.cli.render import jobs_table

    everywhere = namespace is None
    jobs = [client.ops.get_job(client.namespace, name)] if name else client.ops.list_jobs(namespace)
    if output in (Output.YAML, Output.JSON):
        print_objects(jobs, output)
    elif not jobs:
        console.print(f"No jobs in {'any namespace' if everywhere else namespace}.")
    else:
        console.print(jobs_table(jobs, wide=output == Output.WIDE or everywhere))


def _warn_unreadable_jobs(client: Client | KubernetesClient | RemoteClient, namespace: str | None) -> None:
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


def describe(
    resource: Annotated[
        str, typer.Argument(help="job, queue, dataset, node, sweep (sw), pipeline (pl) or pipelinerun (plr)")
    ],
    name: Annotated[str, typer.Argument(help="Its name.")],
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Show a job, a queue, a dataset, a node, a sweep, a pipeline or a pipeline run.

    A job: roles, placement, replicas, events; a queue: quota, usage, jobs; a node: GPUs; a sweep: trials, best
    trial; a pipeline: parameters, steps; a pipeline run: its steps.
    """
    from phalanx.entrypoints.cli.nodes import describe_node
    from phalanx.entrypoints.cli.render import print_description, print_queue_description

    require_named_resource(resource, "describe", nodes=True)
    choice = choose(backend, kubeconfig, context)
    with backend_session(choice, state_dir, namespace) as client:
        if resource in NODE_RESOURCES:
            describe_node(client, name)
            return
        if resource in QUEUE_RESOURCES:
            print_queue_description(console, client.describe_queue(name))
            return
        if resource in DATASET_RESOURCES:
            from phalanx.entrypoints.cli.render_data import print_dataset_description

            print_dataset_description(console, client.describe_dataset(name))
            return
        # The sweep and pipeline controllers own what these two show (entrypoints/cli/sweeps.py, pipelines.py).
        if resource in SWEEP_RESOURCES:
            from phalanx.entrypoints.cli.sweeps import describe_sweep

            describe_sweep(client, name)
            return
        if resource in PIPELINERUN_RESOURCES:
            from phalanx.entrypoints.cli.pipelines import describe_pipelinerun

            describe_pipelinerun(client, name)
            return
        if resource in PIPELINE_RESOURCES:
            from phalanx.entrypoints.cli.pipelines import describe_pipeline

            describe_pipeline(client, name)
            return
        print_description(console, client.describe(name), pods=choice.kubernetes)


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
    choice = choose(backend, kubeconfig, context)
    if choice.server is not None:
        from phalanx.entrypoints.cli.remote import print_logs as print_server_logs
        from phalanx.entrypoints.cli.remote import remote_session

        with remote_session(choice.server, namespace) as remote:
            print_server_logs(remote, job, replica, follow_logs=follow_logs)
        return
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
                follow(StoreJobSource(client, job), console, show_phases=False, note_silent=True)
                return
            tailer, said = LogTailer(), False
            while True:
                seq = client.store.latest_seq()
                for _, line in tailer.read(client.ops.log_files(namespace, job, replica)):
                    said = True
                    console.print(escape(line), highlight=False)
                current = client.get(job)
                if current.status.phase in STOP_FOLLOWING:
                    for _, line in tailer.read(client.ops.log_files(namespace, job, replica)):
                        said = True
                        console.print(escape(line), highlight=False)
                    if not said:  # named, not left out, as `logs` without -f does
                        print_replica_logs([(replica, "", True)])
                    return
                client.store.wait_for_change(seq, LOG_POLL_SECONDS)
        from phalanx.adapters.executor import read_exit_code

        phase = client.get(job).status.phase
        job_ended = phase in STOP_FOLLOWING
        shown: list[tuple[str, str, bool]] = []
        for short, path in files:
            text = path.read_text(errors="replace") if path.exists() else ""
            # A replica has ended once its shim recorded an exit code, or once the whole job has (a halted job's
            # replicas were stopped, maybe before they could record one).
            shown.append((short, text, job_ended or read_exit_code(path.parent) is not None))
        print_replica_logs(shown, job=job, phase=phase)


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
    from phalanx.model.jobs import STOPPED_PHASES
    from phalanx.services.embedded.daemon import current_leader

    choice = choose(backend, kubeconfig, context)
    with backend_session(choice, state_dir, namespace) as client:
        client.halt(job)
        # Locally, nothing moves the job while no control plane runs; on a cluster the operator always runs, and a
        # server's owner runs its control plane.
        remote = choice.kubernetes or choice.remote
        if wait and (remote or current_leader(client.store) is not None):  # type: ignore[union-attr]
            final = client.wait(job, until=set(STOPPED_PHASES), timeout=120)
            console.print(f"trainingjob/{job} {styled_phase(final.status.phase)}")
        else:
            console.print(f"trainingjob/{job} halting")


def resume(
    job: Annotated[str, typer.Argument(help="The job's name.")],
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Queue a halted job again."""
    choice = choose(backend, kubeconfig, context)
    with backend_session(choice, state_dir, namespace) as client:
        client.resume(job)
        console.print(f"trainingjob/{job} resumed")


def delete(
    resource: Annotated[
        str | None,
        typer.Argument(help="job, queue, dataset, sweep (sw), pipeline (pl) or pipelinerun (plr)", show_default=False),
    ] = None,
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
    """Delete a job, a queue, a dataset, a sweep, a pipeline or a pipeline run.

    A job's replicas are stopped, then it is removed with its logs; a queue's jobs keep running; a sweep goes with
    its trial jobs, a pipeline run with its step jobs; a pipeline no run names.

    With --quarantined: every object the control plane set aside (see `phalanx status`), rows it cannot read
    included.
    """
    from phalanx.entrypoints.cli.datasets import delete_dataset
    from phalanx.entrypoints.cli.queues import delete_queue

    choice = choose(backend, kubeconfig, context)
    if quarantined:
        if resource is not None:
            fail("`phalanx delete --quarantined` takes no resource or name: it deletes every quarantined object", 2)
        embedded_only(choice, "delete --quarantined", "objects the API server cannot read are its to report")
        with session(state_dir) as local:
            removed = local.ops.delete_quarantined()
        for record in removed:
            console.print(f"{record.kind.lower()}/{escape(record.name)} deleted (namespace {escape(record.namespace)})")
        if not removed:
            console.print("nothing is quarantined")
        return
    if resource is None or name is None:
        fail(
            "give what to delete: `phalanx delete job NAME` (or queue, dataset, sweep, pipeline, pipelinerun), or "
            "`phalanx delete --quarantined`",
            2,
        )
    require_named_resource(resource, "delete")
    with backend_session(choice, state_dir, namespace) as client:
        if resource in DATASET_RESOURCES:
            delete_dataset(client, name)
            return
        if resource in QUEUE_RESOURCES:
            delete_queue(client, name)
            return
        if resource in SWEEP_RESOURCES:
            from phalanx.entrypoints.cli.sweeps import delete_sweep

            delete_sweep(client, name)
            return
        if resource in PIPELINE_RESOURCES:
            from phalanx.entrypoints.cli.pipelines import delete_pipeline

            delete_pipeline(client, name)
            return
        if resource in PIPELINERUN_RESOURCES:
            from phalanx.entrypoints.cli.pipelines import delete_pipelinerun

            delete_pipelinerun(client, name)
            return
        client.delete(name)
        console.print(f"trainingjob/{name} deleted")


def explain(
    job: Annotated[str, typer.Argument(help="The job's name.")],
    state_dir: StateDirOption = None,
    namespace: NamespaceOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Say in one sentence why a job is where it is (why it waits)."""
    choice = choose(backend, kubeconfig, context)
    with backend_session(choice, state_dir, namespace) as client:
        console.print(escape(client.explain(job)))
