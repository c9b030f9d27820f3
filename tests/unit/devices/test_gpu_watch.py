"""The embedded control plane's GPU health watch on a real SQLite store: NVML (a fake pynvml), a simulated
inventory edited at run time, a fault file; what it writes on the Node and the events it records."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from phalanx.adapters.devices.discovery import HostDiscovery
from phalanx.adapters.devices.inventory import load_inventory
from phalanx.adapters.store import SqliteStore
from phalanx.core.clock import VirtualClock
from phalanx.model.meta import ObjectMeta
from phalanx.model.nodes import GpuInfo, Node, NodeStatus
from phalanx.services.embedded.gpu_watch import GpuWatch
from support.fake_nvml import XID_CRITICAL, make_fake_sys, three_gpus


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore(tmp_path / "state.db")


def register(store: SqliteStore, node: Node) -> Node:
    return store.create(node)


def health(store: SqliteStore, name: str) -> list[tuple[int, bool, str]]:
    [node] = [n for n in store.list(Node) if n.metadata.name == name]
    return [(g.index, g.healthy, g.problem) for g in node.status.gpus]


def reasons(store: SqliteStore, name: str) -> list[tuple[str, str]]:
    return [(e.reason, e.message) for e in store.list_events("Node", "default", name)]


def inventory_doc(unhealthy: dict[int, str] | None = None) -> dict[str, object]:
    sick = unhealthy or {}
    gpus = [
        {"index": i, "model": "A100", **({"healthy": False, "problem": sick[i]} if i in sick else {})} for i in range(2)
    ]
    return {"kind": "Node", "metadata": {"name": "sim-0"}, "status": {"cpus": [{"id": 0}], "gpus": gpus}}


def test_an_inventory_edited_at_run_time_marks_a_gpu_and_clears_it(store: SqliteStore, tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inventory_doc()))
    [node] = load_inventory(path)
    register(store, node)
    clock = VirtualClock()
    watch = GpuWatch(store, {"sim-0": node}, inventory=path, interval_s=5, clock=clock)
    assert watch.sync() is False  # first check: nothing changed
    assert health(store, "sim-0") == [(0, True, ""), (1, True, "")]

    path.write_text(yaml.safe_dump(inventory_doc({1: "XID 79 (injected)"})))
    assert watch.sync() is False  # not due yet
    assert watch.due_in() == 5
    clock.advance(5)
    assert watch.sync() is True
    assert health(store, "sim-0") == [(0, True, ""), (1, False, "XID 79 (injected)")]
    assert reasons(store, "sim-0") == [("GPUUnhealthy", "GPU 1 is unhealthy: XID 79 (injected); 1 of 2 GPU(s) healthy")]

    path.write_text("status: [half-written")  # an edit in progress: health stays as it was
    clock.advance(5)
    assert watch.sync() is False
    assert health(store, "sim-0")[1] == (1, False, "XID 79 (injected)")

    path.write_text(yaml.safe_dump(inventory_doc()))
    clock.advance(5)
    assert watch.sync() is True
    assert health(store, "sim-0") == [(0, True, ""), (1, True, "")]
    assert reasons(store, "sim-0")[-1] == ("GPUHealthy", "GPU 1 is healthy again; 2 of 2 GPU(s) healthy")


def test_nvml_health_xids_and_the_fault_file_reach_the_node(
    store: SqliteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvml = three_gpus()
    monkeypatch.setitem(sys.modules, "pynvml", nvml.module())
    fake_sys = make_fake_sys(tmp_path / "sys")
    node = Node(
        metadata=ObjectMeta(name="box"),
        status=NodeStatus(gpus=[GpuInfo(index=i, model="A100") for i in range(3)], source="nvml"),
    )
    register(store, node)
    faults = tmp_path / "faults"
    clock = VirtualClock()
    discovery = HostDiscovery(fake_sys)
    watch = GpuWatch(store, {"box": node}, fault_file=faults, interval_s=1, clock=clock, discover={"box": discovery})
    assert watch.sync() is False

    nvml.gpus[0].retired_pending = True
    nvml.events.append((2, XID_CRITICAL, 79))
    faults.write_text("1\n")
    clock.advance(1)
    assert watch.sync() is True
    assert health(store, "box") == [
        (0, False, "retired memory pages are pending; the GPU needs a reset"),
        (1, False, "listed in the fault file"),
        (2, False, "XID 79 (GPU has fallen off the bus)"),
    ]
    assert [r for r, _ in reasons(store, "box")] == ["GPUUnhealthy"] * 3
    watch.close()
    discovery.close()  # the watch closes only the discovery it made
    assert nvml.sets == 0


def test_nodes_without_gpus_are_not_watched(store: SqliteStore) -> None:
    node = Node(metadata=ObjectMeta(name="laptop"), status=NodeStatus(cpus=[]))
    watch = GpuWatch(store, {"laptop": node})
    assert watch.due_in() is None
    assert watch.sync() is False
