"""GPU discovery through a fake ``pynvml`` module: no driver is needed, and none is present in CI."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from phalanx.adapters.devices import check_health, discover_gpus, discover_local_node
from phalanx.adapters.devices import inventory as inventory_module
from phalanx.adapters.devices.nvml import normalize_bus_id, pci_numa_node
from phalanx.model.nodes import GpuInfo

GIB = 1 << 30
SWITCH = "switch"


class NVMLError(Exception):
    pass


class FakeNotSupportedError(NVMLError):
    pass


class FakeGpuIsLostError(NVMLError):
    pass


class FakeLibraryNotFoundError(NVMLError):
    def __str__(self) -> str:
        return "NVML Shared Library Not Found"


@dataclass
class FakeGpu:
    bus_id: str
    name: str = "NVIDIA A100-SXM4-80GB"
    memory: int = 80 * GIB
    links: list[str] = field(default_factory=list)  # remote bus id per NVLink, or SWITCH
    retired_pending: bool = False
    ecc_supported: bool = True
    uncorrected_ecc: int = 0
    lost: bool = False


def fake_pynvml(gpus: list[FakeGpu], *, init_error: Exception | None = None) -> types.ModuleType:
    """A module with the subset of the pynvml API that the adapter uses."""
    module = types.ModuleType("pynvml")
    state = {"initialised": 0}

    def device(handle: int) -> FakeGpu:
        gpu = gpus[handle]
        if gpu.lost:
            raise FakeGpuIsLostError()
        return gpu

    def nvml_init() -> None:
        if init_error is not None:
            raise init_error
        state["initialised"] += 1

    def nvml_shutdown() -> None:
        state["initialised"] -= 1

    def link_state(handle: int, link: int) -> int:
        gpu = device(handle)
        if link >= len(gpu.links):
            raise FakeNotSupportedError()
        return 1

    def remote_pci(handle: int, link: int) -> Any:
        remote = device(handle).links[link]
        return types.SimpleNamespace(busId=b"00000000:FF:00.0" if remote == SWITCH else remote.encode())

    def remote_type(handle: int, link: int) -> int:
        return 2 if device(handle).links[link] == SWITCH else 0

    def retired_pending(handle: int) -> int:
        return 1 if device(handle).retired_pending else 0

    def ecc(handle: int, error_type: int, counter_type: int) -> int:
        gpu = device(handle)
        if not gpu.ecc_supported:
            raise FakeNotSupportedError()
        return gpu.uncorrected_ecc

    def remapped_rows(handle: int) -> tuple[int, int, int, int]:
        raise FakeNotSupportedError()

    module.__dict__.update(
        NVMLError=NVMLError,
        NVMLError_NotSupported=FakeNotSupportedError,
        NVMLError_GpuIsLost=FakeGpuIsLostError,
        NVML_FEATURE_ENABLED=1,
        NVML_NVLINK_MAX_LINKS=12,
        NVML_NVLINK_DEVICE_TYPE_SWITCH=2,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0,
        nvmlInit=nvml_init,
        nvmlShutdown=nvml_shutdown,
        nvmlDeviceGetCount=lambda: len(gpus),
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=gpus[h].bus_id),
        nvmlDeviceGetUUID=lambda h: f"GPU-{device(h).bus_id[-7:-2].replace(':', '')}",
        nvmlDeviceGetName=lambda h: device(h).name.encode(),  # old bindings return bytes
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=device(h).memory),
        nvmlDeviceGetNvLinkState=link_state,
        nvmlDeviceGetNvLinkRemotePciInfo=remote_pci,
        nvmlDeviceGetNvLinkRemoteDeviceType=remote_type,
        nvmlDeviceGetRetiredPagesPendingStatus=retired_pending,
        nvmlDeviceGetTotalEccErrors=ecc,
        nvmlDeviceGetRemappedRows=remapped_rows,
    )
    module.state = state  # type: ignore[attr-defined]
    return module


def bus(n: int) -> str:
    return f"00000000:{n:02X}:00.0"


@pytest.fixture
def fake_sys(tmp_path: Path) -> Path:
    """NUMA nodes of the fake GPUs' PCI functions: the first two on node 0, the next on node 1, then -1."""
    sys_root = tmp_path / "sys"
    for n, node in ((0x07, "0"), (0x0F, "0"), (0x47, "1"), (0x4E, "-1")):
        device = sys_root / "bus" / "pci" / "devices" / f"0000:{n:02x}:00.0"
        device.mkdir(parents=True)
        (device / "numa_node").write_text(f"{node}\n")
    return sys_root


def install(monkeypatch: pytest.MonkeyPatch, module: types.ModuleType | None) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", module)


def test_missing_pynvml_gives_no_gpus_and_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, None)  # a None entry makes `import pynvml` raise ImportError

    gpus, reason = discover_gpus()

    assert gpus == []
    assert reason is not None
    assert reason.startswith("NVML not available:")
    assert "pip install" in reason


def test_missing_driver_gives_no_gpus_and_the_nvml_message(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, fake_pynvml([], init_error=FakeLibraryNotFoundError()))

    assert discover_gpus() == ([], "NVML not available: NVML Shared Library Not Found")


def test_nvlink_pairs_numa_and_names(monkeypatch: pytest.MonkeyPatch, fake_sys: Path) -> None:
    # GPUs 0-1 joined by 2 links, GPUs 2-3 by 4 links; no link across the pairs.
    gpus = [
        FakeGpu(bus(0x07), links=[bus(0x0F)] * 2),
        FakeGpu(bus(0x0F), links=[bus(0x07)] * 2),
        FakeGpu(bus(0x47), links=[bus(0x4E)] * 4),
        FakeGpu(bus(0x4E), links=[bus(0x47)] * 4),
    ]
    module = fake_pynvml(gpus)
    install(monkeypatch, module)

    found, reason = discover_gpus(fake_sys)

    assert reason is None
    assert [gpu.index for gpu in found] == [0, 1, 2, 3]
    assert {gpu.model for gpu in found} == {"NVIDIA-A100-SXM4-80GB"}
    assert [gpu.numa for gpu in found] == [0, 0, 1, 0]  # numa_node -1 maps to 0
    assert [gpu.nvlinks for gpu in found] == [{1: 2}, {0: 2}, {3: 4}, {2: 4}]
    assert all(gpu.memory == 80 * GIB and gpu.healthy for gpu in found)
    # The PCI address a DRA slice publishes (resource.kubernetes.io/pciBusID), in sysfs's form.
    assert [gpu.pci_bus_id for gpu in found] == ["0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0"]
    assert module.state["initialised"] == 0  # every nvmlInit was paired with nvmlShutdown


def test_nvswitch_links_connect_every_switched_gpu(monkeypatch: pytest.MonkeyPatch, fake_sys: Path) -> None:
    gpus = [FakeGpu(bus(n), links=[SWITCH] * 6) for n in (0x07, 0x0F, 0x47)] + [FakeGpu(bus(0x4E))]
    install(monkeypatch, fake_pynvml(gpus))

    found, _ = discover_gpus(fake_sys)

    assert found[0].nvlinks == {1: 6, 2: 6}
    assert found[2].nvlinks == {0: 6, 1: 6}
    assert found[3].nvlinks == {}  # a PCIe-only GPU joins no NVLink domain


def test_unhealthy_gpus_are_reported_not_hidden(monkeypatch: pytest.MonkeyPatch, fake_sys: Path) -> None:
    gpus = [
        FakeGpu(bus(0x07), retired_pending=True),
        FakeGpu(bus(0x0F), ecc_supported=False),  # consumer GPU: no ECC is not a fault
        FakeGpu(bus(0x47), uncorrected_ecc=3),
        FakeGpu(bus(0x4E), lost=True),
    ]
    install(monkeypatch, fake_pynvml(gpus))

    found, _ = discover_gpus(fake_sys)

    assert [gpu.healthy for gpu in found] == [False, True, False, False]
    assert found[3] == GpuInfo(index=3, healthy=False, numa=0)


def test_check_health_explains_problems(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, fake_pynvml([FakeGpu(bus(0x07), retired_pending=True, uncorrected_ecc=2)]))

    health = check_health(0)

    assert not health.healthy
    assert any("retired memory pages" in problem for problem in health.problems)
    assert any("2 uncorrected ECC" in problem for problem in health.problems)


def test_check_health_of_a_lost_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, fake_pynvml([FakeGpu(bus(0x07), lost=True)]))

    health = check_health(0)

    assert not health.healthy
    assert health.problems == ["GPU has fallen off the bus (NVML: GPU is lost)"]


@pytest.mark.parametrize(
    ("nvml", "sysfs"),
    [
        ("00000000:07:00.0", "0000:07:00.0"),
        ("0000:AB:00.1", "0000:ab:00.1"),
        ("00000001:07:00.0", "0001:07:00.0"),
    ],
)
def test_bus_ids_are_normalised_to_sysfs_names(nvml: str, sysfs: str) -> None:
    assert normalize_bus_id(nvml) == sysfs


def test_unknown_pci_device_is_numa_zero(tmp_path: Path) -> None:
    assert pci_numa_node("00000000:99:00.0", tmp_path) == 0


# -- the local node ------------------------------------------------------------------------------------------


def test_local_node_without_gpus_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, None)

    node = discover_local_node("workstation")

    assert node.metadata.name == "workstation"
    assert node.status.source == "sysfs"
    assert node.status.cpus and node.status.memory > 0
    assert node.metadata.annotations["phalanx.dev/gpu-discovery"].startswith("NVML not available")


def test_local_node_with_gpus_is_nvml_and_labelled(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = [GpuInfo(index=0, model="NVIDIA-H100-80GB-HBM3", memory=80 * GIB)]
    monkeypatch.setattr(inventory_module, "discover_gpus", lambda: (gpus, None))
    monkeypatch.setattr("socket.gethostname", lambda: "GPU_Box-07.lab.example.com")

    node = discover_local_node()

    assert node.metadata.name == "gpu-box-07-lab-example-com"
    assert node.status.source == "nvml"
    assert node.status.gpus == gpus
    assert node.metadata.labels["phalanx.dev/gpu-model"] == "NVIDIA-H100-80GB-HBM3"
    assert "phalanx.dev/gpu-discovery" not in node.metadata.annotations
