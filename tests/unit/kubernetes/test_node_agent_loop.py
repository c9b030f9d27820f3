"""The node agent's cycle against an in-memory API: what it writes, in which order, only when something changed,
the heartbeat, Events on GPU failure and recovery, a restart that remembers, and the command line."""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any

import pytest

from phalanx.adapters.devices.discovery import Discovered, InventoryDiscovery
from phalanx.adapters.kubernetes.api import EVENTS, NODES, NotFoundError, Resource
from phalanx.adapters.kubernetes.objects import node_from_object
from phalanx.core.clock import VirtualClock
from phalanx.entrypoints.kubernetes import node_agent as entrypoint
from phalanx.model.nodes import Node
from phalanx.services.kubernetes.node_agent import AgentSettings, NodeAgent
from support.merge_patch import merge

ROOT = Path(__file__).resolve().parents[3]
DGX = ROOT / "examples" / "inventories" / "dgx-2socket-8gpu.yaml"


class FakeApi:
    """One Node, merge patches as the API server applies them (status only through the subresource)."""

    def __init__(self, node: dict[str, Any] | None) -> None:
        self.node = node
        self.calls: list[tuple[str, Any]] = []
        self.events: list[dict[str, Any]] = []

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        assert resource == NODES
        self.calls.append(("get", name))
        if self.node is None or self.node["metadata"]["name"] != name:
            raise NotFoundError(404, "NotFound", f'nodes "{name}" not found')
        return copy.deepcopy(self.node)

    def patch(
        self, resource: Resource, name: str, patch: Any, namespace: str | None = None, *, subresource: str | None = None
    ) -> dict[str, Any]:
        assert resource == NODES and self.node is not None
        if subresource == "status":
            assert set(patch) == {"status"}
            self.calls.append(("status", copy.deepcopy(patch["status"])))
        else:
            assert set(patch) == {"metadata"}
            self.calls.append(("metadata", copy.deepcopy(patch["metadata"])))
        self.node = merge(self.node, patch)
        return copy.deepcopy(self.node)

    def create(self, resource: Resource, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        assert resource == EVENTS and namespace == "default"
        self.events.append(body)
        return body

    def writes(self) -> list[str]:
        kinds = [kind for kind, _ in self.calls if kind != "get"]
        self.calls.clear()
        return kinds

    def close(self) -> None:
        pass


def kwok_node(name: str = "gpu-0") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": "u-1", "labels": {"type": "kwok"}, "annotations": {}},
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


@pytest.fixture
def faults(tmp_path: Path) -> Path:
    return tmp_path / "faults"


def agent_for(api: FakeApi, faults: Path, clock: VirtualClock, **settings: Any) -> NodeAgent:
    options = AgentSettings(node_name="gpu-0", fault_file=faults, heartbeat_interval_s=60, **settings)
    return NodeAgent(api, options, InventoryDiscovery(DGX, "gpu-0"), clock)  # type: ignore[arg-type]


def test_first_cycle_writes_labels_annotations_and_gpu_resources(faults: Path) -> None:
    api, clock = FakeApi(kwok_node()), VirtualClock()
    agent = agent_for(api, faults, clock)

    agent.cycle()

    assert api.writes() == ["metadata", "status"]  # GPUs appear with their topology already there
    assert agent.ready.is_set()
    assert api.node is not None
    meta = api.node["metadata"]
    assert meta["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert meta["labels"]["type"] == "kwok"
    assert meta["annotations"]["phalanx.dev/node-agent-heartbeat"] == "2026-01-01T00:00:00Z"
    assert api.node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert api.events == []
    node = node_from_object(api.node)
    assert len(node.status.gpus) == 8 and all(gpu.healthy for gpu in node.status.gpus)


def test_nothing_is_written_until_something_changes_or_the_heartbeat_is_due(faults: Path) -> None:
    api, clock = FakeApi(kwok_node()), VirtualClock()
    agent = agent_for(api, faults, clock)
    agent.cycle()
    api.writes()

    clock.advance(30)
    agent.cycle()
    assert api.calls == []  # not even a read: the agent compares with the Node it last wrote

    clock.advance(31)  # 61 s after the first cycle
    agent.cycle()
    assert api.calls[0] == ("get", "gpu-0")
    assert api.writes() == ["metadata"]
    assert api.node is not None
    assert api.node["metadata"]["annotations"]["phalanx.dev/node-agent-heartbeat"] == "2026-01-01T00:01:01Z"


def test_a_fault_removes_the_gpu_from_allocatable_after_the_annotation_names_it(faults: Path) -> None:
    api, clock = FakeApi(kwok_node()), VirtualClock()
    agent = agent_for(api, faults, clock)
    agent.cycle()
    api.writes()

    faults.write_text("3\n")
    result = agent.cycle()

    assert api.calls[0][0] == "metadata" and api.calls[1][0] == "status"  # never 7 allocatable and no name
    assert api.calls[0][1]["annotations"]["phalanx.dev/unhealthy-gpus"] == "3"
    assert api.calls[1][1] == {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "7"}}
    assert result.failed == [3]
    (event,) = api.events
    assert event["type"] == "Warning" and event["reason"] == "GPUUnhealthy"
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-0", "uid": "gpu-0"}
    assert event["message"] == "GPU 3 is unhealthy: listed in the fault file; 7 of 8 GPU(s) healthy"
    assert api.node is not None
    assert [gpu.index for gpu in node_from_object(api.node).status.gpus if not gpu.healthy] == [3]


def test_recovery_returns_the_gpu_to_allocatable_before_the_annotation_forgets_it(faults: Path) -> None:
    api, clock = FakeApi(kwok_node()), VirtualClock()
    agent = agent_for(api, faults, clock)
    faults.write_text("3")
    agent.cycle()
    api.writes()
    api.events.clear()

    faults.unlink()
    result = agent.cycle()

    assert [kind for kind, _ in api.calls] == ["status", "metadata"]
    assert result.recovered == [3]
    (event,) = api.events
    assert (event["type"], event["reason"]) == ("Normal", "GPUHealthy")
    assert api.node is not None
    assert node_from_object(api.node).status.gpus[3].healthy


def test_every_intermediate_node_shows_only_the_failing_gpu_as_unhealthy(faults: Path) -> None:
    api, clock = FakeApi(kwok_node()), VirtualClock()
    agent = agent_for(api, faults, clock)
    agent.cycle()
    seen: list[set[int]] = []
    original = api.patch

    def observing(*args: Any, **kwargs: Any) -> dict[str, Any]:
        node = original(*args, **kwargs)
        seen.append({gpu.index for gpu in node_from_object(node).status.gpus if not gpu.healthy})
        return node

    api.patch = observing  # type: ignore[method-assign]
    faults.write_text("2")
    agent.cycle()
    faults.write_text("")
    agent.cycle()

    assert seen == [{2}, {2}, {2}, set()]


def test_a_restarted_agent_does_not_repeat_events_for_known_faults(faults: Path) -> None:
    api, clock = FakeApi(kwok_node()), VirtualClock()
    faults.write_text("5")
    agent_for(api, faults, clock).cycle()
    assert len(api.events) == 1

    restarted = agent_for(api, faults, clock)
    result = restarted.cycle()

    assert result.failed == [] and len(api.events) == 1


def test_someone_elses_change_is_repaired_at_the_next_heartbeat(faults: Path) -> None:
    api, clock = FakeApi(kwok_node()), VirtualClock()
    agent = agent_for(api, faults, clock)
    agent.cycle()
    assert api.node is not None
    api.node["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    api.node["metadata"]["labels"]["nvidia.com/gpu.count"] = "2"
    api.writes()

    clock.advance(60)
    agent.cycle()

    assert api.node["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    faults.write_text("0")
    agent.cycle()
    assert api.node["status"]["allocatable"]["nvidia.com/gpu"] == "7"


def test_without_the_gpu_resource_the_status_is_left_to_the_device_plugin(faults: Path) -> None:
    api, clock = FakeApi(kwok_node()), VirtualClock()
    agent = agent_for(api, faults, clock, manage_gpu_resource=False)
    faults.write_text("1")

    agent.cycle()

    assert api.writes() == ["metadata"]
    assert api.node is not None and "nvidia.com/gpu" not in api.node["status"]["allocatable"]
    assert api.node["metadata"]["annotations"]["phalanx.dev/unhealthy-gpus"] == "1"
    assert len(api.events) == 1


def test_an_agent_without_nvml_on_a_gpu_node_leaves_the_gpus_alone(faults: Path) -> None:
    node = kwok_node()
    node["status"]["capacity"]["nvidia.com/gpu"] = node["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    node["metadata"]["annotations"]["phalanx.dev/unhealthy-gpus"] = "4"
    api, clock = FakeApi(node), VirtualClock()
    cpus_only = Node.model_validate({"metadata": {"name": "x"}, "status": {"cpus": [{"id": 0}]}})
    settings = AgentSettings(node_name="gpu-0", fault_file=faults)

    def discover() -> Discovered:
        return Discovered(node=cpus_only, note="NVML not available: Driver Not Loaded")

    result = NodeAgent(api, settings, discover, clock).cycle()  # type: ignore[arg-type]

    assert api.node is not None
    assert api.node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert api.node["metadata"]["annotations"]["phalanx.dev/unhealthy-gpus"] == "4"
    assert api.node["metadata"]["annotations"]["phalanx.dev/gpu-discovery"] == "NVML not available: Driver Not Loaded"
    assert result.recovered == [] and api.events == []


def test_a_missing_node_fails_the_cycle(faults: Path) -> None:
    agent = agent_for(FakeApi(None), faults, VirtualClock())

    with pytest.raises(NotFoundError):
        agent.cycle()
    assert not agent.ready.is_set()


def test_the_loop_survives_a_failed_check(faults: Path) -> None:
    api, clock = FakeApi(kwok_node()), VirtualClock()
    inventory = InventoryDiscovery(DGX, "gpu-0")
    stop = threading.Event()
    calls: list[int] = []

    def flaky() -> Discovered:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("sysfs went away")
        stop.set()
        return inventory()

    agent = NodeAgent(api, AgentSettings(node_name="gpu-0", interval_s=0.01), flaky, clock)  # type: ignore[arg-type]
    agent.run(stop)

    assert len(calls) == 2 and agent.ready.is_set()
    assert api.node is not None and api.node["status"]["allocatable"]["nvidia.com/gpu"] == "8"


# -- the command line -------------------------------------------------------------------------------------------------


def test_once_reports_the_inventory_node_and_exits(monkeypatch: pytest.MonkeyPatch, faults: Path) -> None:
    api = FakeApi(kwok_node("sim-0"))
    monkeypatch.setattr(entrypoint, "setup", lambda options, component: api)
    faults.write_text("6")
    monkeypatch.setenv("PHALANX_FAULT_FILE", str(faults))
    monkeypatch.setenv("NODE_NAME", "sim-0")

    assert entrypoint.main(["--inventory", str(DGX), "--once", "--health-port", "0"]) == 0
    assert api.node is not None
    assert api.node["status"]["allocatable"]["nvidia.com/gpu"] == "7"
    assert api.node["metadata"]["annotations"]["phalanx.dev/unhealthy-gpus"] == "6"


def test_once_fails_when_the_node_does_not_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entrypoint, "setup", lambda options, component: FakeApi(None))

    assert entrypoint.main(["--node-name", "gone", "--inventory", str(DGX), "--once", "--health-port", "0"]) == 1


def test_a_bad_inventory_is_refused_before_the_first_cycle(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(entrypoint, "setup", lambda options, component: FakeApi(kwok_node()))
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Node\nmetadata: {name: a}\nstatus: {gpus: [{index: -1}]}\n")

    assert entrypoint.main(["--node-name", "gpu-0", "--inventory", str(bad), "--once"]) == 2


def test_the_node_name_is_required(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)

    with pytest.raises(SystemExit) as exit_info:
        entrypoint.main(["--once"])

    assert exit_info.value.code == 2
    assert "--node-name (or $NODE_NAME) is required" in capsys.readouterr().err


def test_flags_are_checked() -> None:
    parser = entrypoint.build_parser()
    args = parser.parse_args(["--node-name", "n", "--interval", "0.5", "--no-gpu-resource", "--ignored-xids", "13,43"])
    assert (args.interval, args.gpu_resource, args.ignored_xids) == (0.5, False, frozenset({13, 43}))
    with pytest.raises(SystemExit):
        parser.parse_args(["--interval", "0"])
