"""The queue views of ``phalanx get queues`` and ``phalanx delete queue``: quota, usage, admitted and pending jobs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from phalanx.entrypoints.cli.options import Output, print_objects
from phalanx.entrypoints.cli.output import console, warn

if TYPE_CHECKING:
    from phalanx.entrypoints.client import Client
    from phalanx.entrypoints.kubernetes.client import KubernetesClient
    from phalanx.entrypoints.remote_client import RemoteClient


def show_queues(client: Client | KubernetesClient | RemoteClient, name: str | None, output: Output) -> None:
    """Print the queues (only ``name`` when given) as a table, or their current objects as YAML/JSON."""
    from phalanx.entrypoints.cli.render import queues_table

    views = client.ops.queue_views()
    if name:
        views = [view for view in views if view.name == name]
        if not views:
            client.ops.get_queue(name)  # says it is not found, with the names of the others
    if output in (Output.YAML, Output.JSON):
        print_objects([view.current() for view in views], output)
    elif not views:
        console.print("No queues: create one with `phalanx submit -f queue.yaml` (see docs/queues.md).")
    else:
        console.print(queues_table(views))


def delete_queue(client: Client | KubernetesClient | RemoteClient, name: str) -> None:
    """Delete a queue; its admitted jobs keep running, and a warning names them."""
    deleted = client.delete_queue(name)
    console.print(f"queue/{name} deleted")
    if deleted.admitted_count:
        jobs = ", ".join(job.key for job in deleted.admitted) or f"{deleted.admitted_count} job(s)"
        warn(
            f"queue {name} had {deleted.admitted_count} admitted job(s), which keep running: {jobs}; "
            f"jobs naming queue {name} are no longer limited by a quota (submit the Queue again to limit "
            "them)"
        )
