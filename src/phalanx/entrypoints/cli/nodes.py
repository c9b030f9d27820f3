"""``phalanx get nodes`` and ``describe node``: the nodes of either backend, what is placed on them, GPU health."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phalanx.entrypoints.cli.options import Output, print_objects
from phalanx.entrypoints.cli.output import console, fail

if TYPE_CHECKING:
    from phalanx.entrypoints.cli.backends import BackendChoice
    from phalanx.entrypoints.client import Client
    from phalanx.entrypoints.kubernetes.client import KubernetesClient
    from phalanx.entrypoints.remote_client import RemoteClient


def show_nodes(
    client: Client | KubernetesClient | RemoteClient, choice: BackendChoice, name: str | None, output: Output
) -> None:
    """Print the nodes (only ``name`` when given) as a table with their CPU and GPU usage, or as YAML/JSON."""
    from phalanx.entrypoints.cli.render import nodes_table
    from phalanx.model.replicas import Replica

    nodes = [n for n in client.ops.list_nodes() if name in (None, n.metadata.name)]
    if output in (Output.YAML, Output.JSON):
        print_objects(nodes, output)
    elif not nodes:
        console.print(
            "No nodes in the cluster."
            if choice.kubernetes
            else "No nodes yet: the control plane registers them when it starts (`phalanx up`)."
        )
    else:
        from phalanx.services.scheduling import holdings_of, replica_occupant  # only this view needs the scheduler

        usage: dict[str, dict[str, int]] = {}
        # On a cluster, what admitted jobs were placed on; locally, every replica that still exists too.
        replicas = [] if choice.kubernetes or choice.remote else client.store.list(Replica)  # type: ignore[union-attr]
        for placement, vector in holdings_of(_placed_jobs(client), map(replica_occupant, replicas)):
            used = usage.setdefault(placement.node, {"cpu_milli": 0, "gpu": 0})
            used["cpu_milli"] += vector.cpu_milli
            used["gpu"] += len(placement.gpus)
        console.print(nodes_table(nodes, usage))


def describe_node(client: Client | KubernetesClient | RemoteClient, name: str) -> None:
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


def _placed_jobs(client: Client | KubernetesClient | RemoteClient) -> list[Any]:
    """Every job, for what its placements hold; none on a cluster where Phalanx is not installed (yet)."""
    from phalanx.services.operations import OperationError

    try:
        return client.ops.list_jobs(None)
    except OperationError:
        return []
