"""A fake ``pynvml``: the subset that discovery, the health check and the XID watcher use (tests only)."""

from __future__ import annotations

import types
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

XID_CRITICAL = 0x8  # NVML's event type of critical XID errors


class NVMLError(Exception):
    pass


class FakeTimeoutError(NVMLError):
    pass


class FakeNotSupportedError(NVMLError):
    pass


class FakeGpuIsLostError(NVMLError):
    pass


@dataclass
class FakeGpu:
    bus: int
    lost: bool = False
    retired_pending: bool = False
    xid_events: bool = True


@dataclass
class FakeNvml:
    """The subset of pynvml the discovery, health check and XID watcher use; ``events`` are (gpu, type, xid)."""

    gpus: list[FakeGpu]
    events: deque[tuple[int, int, int]] = field(default_factory=deque)
    initialised: int = 0
    sets: int = 0
    init_error: Exception | None = None

    def module(self) -> types.ModuleType:
        module = types.ModuleType("pynvml")

        def device(handle: int) -> FakeGpu:
            gpu = self.gpus[handle]
            if gpu.lost:
                raise FakeGpuIsLostError("GPU is lost")
            return gpu

        def init() -> None:
            if self.init_error is not None:
                raise self.init_error
            self.initialised += 1

        def shutdown() -> None:
            self.initialised -= 1

        def wait(event_set: object, timeout_ms: int) -> Any:
            assert timeout_ms == 0  # never blocks the agent's cycle
            if not self.events:
                raise FakeTimeoutError("Timeout")
            gpu, kind, xid = self.events.popleft()
            return types.SimpleNamespace(device=gpu, eventType=kind, eventData=xid)

        def index_of(handle: int) -> int:
            if handle < 0:
                raise FakeNotSupportedError("unknown device")
            return handle

        def register(handle: int, mask: int, event_set: object) -> None:
            if not device(handle).xid_events:
                raise FakeNotSupportedError("Not Supported")

        def create_set() -> object:
            self.sets += 1
            return object()

        def free_set(event_set: object) -> None:
            self.sets -= 1

        def not_supported(*args: Any) -> Any:
            raise FakeNotSupportedError("Not Supported")

        module.__dict__.update(
            NVMLError=NVMLError,
            NVMLError_GpuIsLost=FakeGpuIsLostError,
            NVML_FEATURE_ENABLED=1,
            NVML_NVLINK_MAX_LINKS=2,
            nvmlEventTypeXidCriticalError=XID_CRITICAL,
            nvmlInit=init,
            nvmlShutdown=shutdown,
            nvmlDeviceGetCount=lambda: len(self.gpus),
            nvmlDeviceGetHandleByIndex=lambda index: index,
            nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=f"00000000:{self.gpus[h].bus:02X}:00.0"),
            nvmlDeviceGetUUID=lambda h: f"GPU-{device(h).bus}",
            nvmlDeviceGetName=lambda h: (device(h), "NVIDIA H100 80GB HBM3")[1],
            nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=(device(h), 80 << 30)[1]),
            nvmlDeviceGetNvLinkState=not_supported,
            nvmlDeviceGetNvLinkRemotePciInfo=not_supported,
            nvmlDeviceGetRetiredPagesPendingStatus=lambda h: int(device(h).retired_pending),
            nvmlDeviceGetTotalEccErrors=lambda h, *args: (device(h), 0)[1],
            nvmlDeviceGetRemappedRows=not_supported,
            nvmlDeviceGetSupportedEventTypes=lambda h: (device(h), XID_CRITICAL | 0x4)[1],
            nvmlDeviceRegisterEvents=register,
            nvmlEventSetCreate=create_set,
            nvmlEventSetFree=free_set,
            nvmlEventSetWait_v2=wait,
            nvmlDeviceGetIndex=index_of,
        )
        return module


def make_fake_sys(root: Path) -> Path:
    """A fake /sys: two NUMA nodes of two CPUs each; GPU 0 (bus 0x07) on node 0, GPUs 1-2 (0x47, 0x4E) on node 1."""
    cpu_root = root / "devices" / "system" / "cpu"
    for cpu in range(4):
        topology = cpu_root / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "core_id").write_text(f"{cpu % 2}\n")
        (topology / "physical_package_id").write_text(f"{cpu // 2}\n")
    (cpu_root / "present").write_text("0-3\n")
    (cpu_root / "online").write_text("0-3\n")
    for numa, cpus in ((0, "0-1"), (1, "2-3")):
        node = root / "devices" / "system" / "node" / f"node{numa}"
        node.mkdir(parents=True)
        (node / "cpulist").write_text(cpus + "\n")
    for bus, numa in ((0x07, 0), (0x47, 1), (0x4E, 1)):
        device = root / "bus" / "pci" / "devices" / f"0000:{bus:02x}:00.0"
        device.mkdir(parents=True)
        (device / "numa_node").write_text(f"{numa}\n")
    return root


def three_gpus() -> FakeNvml:
    """Three healthy GPUs on the buses of ``make_fake_sys``."""
    return FakeNvml([FakeGpu(0x07), FakeGpu(0x47), FakeGpu(0x4E)])
