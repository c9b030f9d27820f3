"""``phalanx get jobtypes``: the job types (templates) a job may name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from phalanx.entrypoints.cli.options import Output, print_objects
from phalanx.entrypoints.cli.output import console, fail

if TYPE_CHECKING:
    from phalanx.entrypoints.client import Client
    from phalanx.entrypoints.kubernetes.client import KubernetesClient
    from phalanx.entrypoints.remote_client import RemoteClient


def show_jobtypes(client: Client | KubernetesClient | RemoteClient, name: str | None, output: Output) -> None:
    """Print the job types (only ``name`` when given; exit 1 naming the known ones when it is unknown)."""
    from phalanx.entrypoints.cli.render import jobtypes_table

    jobtypes = [jt for n, jt in sorted(client.ops.jobtypes().items()) if name in (None, n)]
    if name and not jobtypes:
        fail(f"job type {name!r} not found; known: {', '.join(sorted(client.ops.jobtypes()))}")
    if output in (Output.YAML, Output.JSON):
        print_objects(jobtypes, output)
    else:
        console.print(jobtypes_table(jobtypes))
