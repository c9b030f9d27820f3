"""The node agent's discovery and GPU health check, through a fake ``pynvml`` and a fake /sys: failing queries,
pending page retirement, critical XID events (sticky; application XIDs ignored), no driver, inventories."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from phalanx.adapters.devices.discovery import HostDiscovery, InventoryDiscovery
from phalanx.adapters.devices.nvml import XidWatcher, describe_xid
from phalanx.adapters.kubernetes.node_report import node_report
from phalanx.model.errors import SpecError
from support.fake_nvml import XID_CRITICAL, FakeGpu, FakeNvml, NVMLError, make_fake_sys, three_gpus

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def fake_sys(tmp_path: Path) -> Path:
    """Two NUMA nodes of two CPUs each; GPU 0 (bus 0x07) on node 0, GPUs 1-2 (0x47, 0x4E) on node 1."""
    return make_fake_sys(tmp_path / "sys")


def install(monkeypatch: pytest.MonkeyPatch, nvml: FakeNvml | None) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", nvml.module() if nvml else None)


# -- discovery ------------------------------------------------------------------------------------------------------


def test_host_discovery_finds_gpus_and_every_host_cpu(monkeypatch: pytest.MonkeyPatch, fake_sys: Path) -> None:
    install(monkeypatch, three_gpus())
    # The agent's own affinity is one CPU; the Node's topology is still the machine's four.
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})

    found = HostDiscovery(fake_sys)()

    assert found.note is None and found.problems == {}
    assert [(gpu.index, gpu.numa, gpu.model) for gpu in found.node.status.gpus] == [
        (0, 0, "NVIDIA-H100-80GB-HBM3"),
        (1, 1, "NVIDIA-H100-80GB-HBM3"),
        (2, 1, "NVIDIA-H100-80GB-HBM3"),
    ]
    assert [(cpu.id, cpu.socket, cpu.numa) for cpu in found.node.status.cpus] == [
        (0, 0, 0),
        (1, 0, 0),
        (2, 1, 1),
        (3, 1, 1),
    ]
    assert found.node.status.source == "nvml"


def test_no_driver_means_no_gpus_and_a_reason(monkeypatch: pytest.MonkeyPatch, fake_sys: Path) -> None:
    nvml = FakeNvml([], init_error=NVMLError("NVML Shared Library Not Found"))
    install(monkeypatch, nvml)

    discovery = HostDiscovery(fake_sys)
    found = discovery()

    assert found.node.status.gpus == []
    assert found.note == "NVML not available: NVML Shared Library Not Found"
    assert len(found.node.status.cpus) == 4
    assert not discovery.xids.started  # nothing to watch without GPUs


def test_no_pynvml_module_means_no_gpus(monkeypatch: pytest.MonkeyPatch, fake_sys: Path) -> None:
    install(monkeypatch, None)

    found = HostDiscovery(fake_sys)()

    assert found.node.status.gpus == [] and found.note and "pynvml" in found.note


def test_a_gpu_whose_queries_fail_is_unhealthy_with_the_reason(monkeypatch: pytest.MonkeyPatch, fake_sys: Path) -> None:
    nvml = three_gpus()
    nvml.gpus[1].lost = True
    nvml.gpus[2].retired_pending = True
    install(monkeypatch, nvml)

    found = HostDiscovery(fake_sys)()
    report = node_report(found.node, found.problems)

    assert report.unhealthy == {1, 2}
    assert report.problems[1] == ["GPU has fallen off the bus (NVML: GPU is lost)"]
    assert report.problems[2] == ["retired memory pages are pending; the GPU needs a reset"]
    assert report.healthy_gpus == 1


# -- critical XIDs --------------------------------------------------------------------------------------------------


def test_a_critical_xid_makes_its_gpu_unhealthy_until_restart(monkeypatch: pytest.MonkeyPatch, fake_sys: Path) -> None:
    nvml = three_gpus()
    install(monkeypatch, nvml)
    discovery = HostDiscovery(fake_sys)
    assert discovery().problems == {}
    assert discovery.xids.watched == {0, 1, 2}

    nvml.events.extend([(2, XID_CRITICAL, 79), (0, XID_CRITICAL, 13), (1, 0x4, 48)])  # 13: the app's fault
    first = discovery()
    later = discovery()

    assert first.problems == {2: ["XID 79 (GPU has fallen off the bus)"]}
    assert [gpu.healthy for gpu in first.node.status.gpus] == [True, True, False]
    assert later.problems == first.problems  # sticky: a reset GPU comes back when the agent restarts
    discovery.close()
    assert nvml.sets == 0 and nvml.initialised == 0


def test_an_xid_nvml_cannot_attribute_marks_every_watched_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = three_gpus()
    nvml.gpus[1].xid_events = False  # a GPU that cannot report events is not blamed for one
    install(monkeypatch, nvml)
    watcher = XidWatcher()
    assert watcher.start() is None

    nvml.events.append((-1, XID_CRITICAL, 48))

    assert watcher.poll() == {0: [48], 2: [48]}
    watcher.close()


def test_ignored_xids_are_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = three_gpus()
    install(monkeypatch, nvml)
    watcher = XidWatcher(ignored=frozenset({79}))
    watcher.start()
    nvml.events.extend([(0, XID_CRITICAL, 79), (1, XID_CRITICAL, 13), (1, XID_CRITICAL, 13)])

    assert watcher.poll() == {1: [13]}
    watcher.close()


def test_xids_cannot_be_watched_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml([], init_error=NVMLError("Driver Not Loaded")))
    watcher = XidWatcher()

    assert watcher.start() == "NVML not available: Driver Not Loaded"
    assert watcher.poll() == {}
    watcher.close()


def test_xids_cannot_be_watched_when_no_gpu_supports_events(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml([FakeGpu(0x07, xid_events=False)])
    install(monkeypatch, nvml)
    watcher = XidWatcher()

    assert watcher.start() == "no GPU supports XID events"
    assert nvml.initialised == 0 and nvml.sets == 0


def test_xids_are_described() -> None:
    assert describe_xid(79) == "XID 79 (GPU has fallen off the bus)"
    assert describe_xid(1234) == "XID 1234"


# -- inventories ------------------------------------------------------------------------------------------------------


def test_the_inventory_node_of_our_name_or_the_only_one(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    dgx = ROOT / "examples" / "inventories" / "dgx-2socket-8gpu.yaml"
    two = ROOT / "examples" / "inventories" / "two-nodes-4gpu.yaml"

    fallback = InventoryDiscovery(dgx, "any-name")
    assert len(fallback().node.status.gpus) == 8
    fallback()
    # Said once: another agent reading the file reports the same GPUs, UUIDs included.
    told = [r.getMessage() for r in caplog.records if "no node 'any-name' in the inventory" in r.getMessage()]
    assert len(told) == 1 and "reporting its only node, 'dgx-0'" in told[0]
    with pytest.raises(SpecError, match="no node 'gpu-9' in the inventory"):
        InventoryDiscovery(two, "gpu-9")()


def test_gpus_marked_unhealthy_in_the_inventory_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "kind: Node\nmetadata: {name: sim-0}\nstatus:\n  cpus: [{id: 0}]\n"
        "  gpus: [{index: 0}, {index: 1, healthy: false}]\n"
    )

    found = InventoryDiscovery(path, "sim-0")()

    assert found.problems == {1: ["marked unhealthy in the simulated inventory"]}
    assert found.node.status.source == "simulated"
