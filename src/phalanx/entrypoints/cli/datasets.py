"""``phalanx dataset …`` (create, get, describe, delete) and the dataset views that ``get`` and ``delete`` share."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from phalanx.entrypoints.cli.options import (
    BackendOption,
    ContextOption,
    KubeconfigOption,
    NamespaceOption,
    Output,
    OutputOption,
    StateDirOption,
    backend_session,
    choose,
    print_objects,
)
from phalanx.entrypoints.cli.output import console, fail

if TYPE_CHECKING:
    from phalanx.entrypoints.client import Client
    from phalanx.entrypoints.kubernetes.client import KubernetesClient
    from phalanx.entrypoints.remote_client import RemoteClient

dataset_app = typer.Typer(help="Datasets: create, get, describe, delete (see docs/datasets.md).", no_args_is_help=True)


def show_datasets(
    client: Client | KubernetesClient | RemoteClient, name: str | None, output: Output, everywhere: bool
) -> None:
    """Print the datasets (only ``name``; every namespace's when ``everywhere``) as a table or as YAML/JSON."""
    from phalanx.entrypoints.cli.render_data import datasets_table

    datasets = [client.dataset(name)] if name else client.ops.list_datasets(None if everywhere else client.namespace)
    if output in (Output.YAML, Output.JSON):
        print_objects(datasets, output)
    elif not datasets:
        console.print(
            f"No datasets in {'any namespace' if everywhere else client.namespace}: create one with "
            "`phalanx dataset create -f dataset.yaml` (see docs/datasets.md)."
        )
    else:
        console.print(datasets_table(datasets, namespaces=everywhere))


def delete_dataset(client: Client | KubernetesClient | RemoteClient, name: str) -> None:
    """Delete a dataset, noting which node caches keep its data until space is needed."""
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
    choice = choose(backend, kubeconfig, context)
    with backend_session(choice, state_dir, namespace) as client:
        submitted = client.submit(filename)
        for item in submitted:
            console.print(f"dataset/{item.name} {item.verb}")
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
                f"{status.files} file{'' if status.files == 1 else 's'}; {escape(status.lineage or '')}"
            )
        if failed:
            raise typer.Exit(1)


@dataset_app.command("get")
def dataset_get(
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
    """List Datasets: phase, version, size, files, nodes caching them (as `phalanx get datasets`)."""
    with backend_session(choose(backend, kubeconfig, context), state_dir, namespace) as client:
        show_datasets(client, name, output, all_namespaces)


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

    with backend_session(choose(backend, kubeconfig, context), state_dir, namespace) as client:
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
    with backend_session(choose(backend, kubeconfig, context), state_dir, namespace) as client:
        delete_dataset(client, name)
