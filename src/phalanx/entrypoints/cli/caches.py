"""``phalanx cache …`` (ls, evict): what each node's dataset cache holds, and evicting entries no job uses."""

from __future__ import annotations

from typing import Annotated

import typer

from phalanx.entrypoints.cli.options import (
    BackendOption,
    ContextOption,
    KubeconfigOption,
    NamespaceOption,
    StateDirOption,
    backend_session,
    choose,
)
from phalanx.entrypoints.cli.output import console, fail

cache_app = typer.Typer(help="Node dataset caches: list what they hold, evict entries.", no_args_is_help=True)


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
    with backend_session(choose(backend, kubeconfig, context), state_dir, namespace) as client:
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
    choice = choose(backend, kubeconfig, context)
    with backend_session(choice, state_dir, namespace) as client:
        if dataset is not None and "/" not in dataset:
            dataset = f"{client.namespace}/{dataset}"
        for evicted in client.evict(key=key, dataset=dataset, node=node):
            console.print(f"evicted {evicted}")
