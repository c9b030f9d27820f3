"""`phalanx get nodes` and `describe node`: which GPUs are unhealthy and why, on either backend."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from rich.console import Console

from phalanx.entrypoints.cli.render import nodes_table, print_node_description
from phalanx.model.events import Event
from phalanx.model.meta import ObjectMeta
from phalanx.model.nodes import GpuInfo, Node, NodeStatus

NODE = Node(
    metadata=ObjectMeta(name="n0"),
    status=NodeStatus(
        gpus=[GpuInfo(index=0, model="A100", healthy=False, problem="XID 79"), GpuInfo(index=1, model="A100")],
        source="kubernetes",
    ),
)


def text(draw: object) -> str:
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    if callable(draw):
        draw(console)
    else:
        console.print(draw)
    return out.getvalue()


def test_get_nodes_names_the_unhealthy_gpus() -> None:
    header, row = text(nodes_table([NODE], {})).splitlines()[:2]
    assert "UNHEALTHY" in header
    assert row.split()[-2:] == ["0", "kubernetes"] and "GPU 0" in row


def test_describe_node_says_why_a_gpu_is_unhealthy_and_events_only_where_kept() -> None:
    shown = text(lambda console: print_node_description(console, NODE, None))
    assert "GPUs:        2, 1 healthy" in shown
    assert "unhealthy: XID 79" in shown and "healthy" in shown
    assert "Events" not in shown  # a cluster's Node events are kubectl's
    event = Event(
        object_kind="Node",
        object_name="n0",
        type="Warning",
        reason="GPUUnhealthy",
        message="GPU 0 is unhealthy: XID 79; 1 of 2 GPU(s) healthy",
        time=datetime.now(UTC),
    )
    local = text(lambda console: print_node_description(console, NODE, [event]))
    assert "Events" in local and "GPUUnhealthy" in local
