"""GPUs of this machine through NVML: model, memory, NUMA node, NVLink peers, health and critical XID errors.

Owns every call into ``pynvml`` (the ``nvidia-ml-py`` package). NVML is optional: Phalanx must install and run
on a laptop with no NVIDIA driver, so ``pynvml`` is imported lazily, inside the functions, and any failure to
import or initialise it turns into an empty GPU list plus a one-line reason, never an exception.

NUMA placement comes from sysfs (``/sys/bus/pci/devices/<bus id>/numa_node``) rather than from NVML, because
that file is what the kernel uses to place memory and it exists for every PCI device on every driver version.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from phalanx.model.nodes import GpuInfo

# NVML's NVML_NVLINK_DEVICE_TYPE_SWITCH; older bindings lack the constant.
_NVLINK_DEVICE_TYPE_SWITCH = 2


@dataclass(frozen=True)
class GpuHealth:
    """The result of a health check: healthy unless a problem was found."""

    healthy: bool
    problems: list[str] = field(default_factory=list)


class NvmlUnavailableError(RuntimeError):
    """NVML cannot be used here: no ``pynvml`` package, no driver, or no permission."""


def _load_pynvml() -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError as err:
        raise NvmlUnavailableError(
            f"NVML not available: the pynvml module cannot be imported ({err}); "
            "install it with `pip install 'phalanx[gpu]'`"
        ) from None


@contextmanager
def _nvml_session() -> Iterator[ModuleType]:
    """Initialise NVML for the duration of a block; NVML reference-counts init/shutdown pairs."""
    pynvml = _load_pynvml()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise NvmlUnavailableError(f"NVML not available: {_text(err)}") from None
    except OSError as err:
        # A broken libnvidia-ml.so surfaces as OSError from ctypes rather than as an NVMLError.
        raise NvmlUnavailableError(f"NVML not available: {err}") from None
    try:
        yield pynvml
    finally:
        with suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _text(value: Any) -> str:
    """NVML strings arrive as ``bytes`` from old bindings and ``str`` from new ones."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def normalize_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:07:00.0`` → sysfs's ``0000:07:00.0`` (4-digit domain, lowercase)."""
    bus_id = bus_id.strip().lower()
    domain, sep, rest = bus_id.partition(":")
    if not sep:
        return bus_id
    return f"{domain[-4:].rjust(4, '0')}:{rest}"


def pci_numa_node(bus_id: str, sys_root: Path = Path("/sys")) -> int:
    """Return the NUMA node of a PCI device; ``-1`` (single-node machines) and unknown map to 0."""
    path = sys_root / "bus" / "pci" / "devices" / normalize_bus_id(bus_id) / "numa_node"
    try:
        node = int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return 0
    return max(node, 0)


def _health_of(pynvml: ModuleType, handle: Any) -> GpuHealth:
    """Query the signals that mean "do not schedule here"; an unsupported query is no evidence of trouble."""
    problems: list[str] = []

    def query(call: Any, *args: Any) -> Any:
        try:
            return call(handle, *args)
        except pynvml.NVMLError as err:
            lost = getattr(pynvml, "NVMLError_GpuIsLost", None)
            if lost is not None and isinstance(err, lost):
                problems.append("GPU has fallen off the bus (NVML: GPU is lost)")
            # NotSupported (no ECC on consumer GPUs) and other query failures are no evidence of trouble.
            return None

    pending = query(pynvml.nvmlDeviceGetRetiredPagesPendingStatus)
    if pending is not None and pending == getattr(pynvml, "NVML_FEATURE_ENABLED", 1):
        problems.append("retired memory pages are pending; the GPU needs a reset")
    remapped = query(getattr(pynvml, "nvmlDeviceGetRemappedRows", _absent))
    if remapped is not None:
        _corrected, _uncorrected, is_pending, failed = remapped
        if is_pending:
            problems.append("memory row remapping is pending; the GPU needs a reset")
        if failed:
            problems.append("memory row remapping failed")
    uncorrected = query(
        pynvml.nvmlDeviceGetTotalEccErrors,
        getattr(pynvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
        getattr(pynvml, "NVML_VOLATILE_ECC", 0),
    )
    if uncorrected:
        problems.append(f"{uncorrected} uncorrected ECC error(s) since the driver loaded")
    # Deduplicate: a lost GPU fails every query.
    unique = list(dict.fromkeys(problems))
    return GpuHealth(healthy=not unique, problems=unique)


def _absent(handle: Any) -> None:
    """Stands in for NVML calls that older bindings do not have."""
    return None


def check_health(index: int) -> GpuHealth:
    """Check one GPU for pending page retirement, row-remapping failure and uncorrected ECC errors.

    Queries the device does not support (consumer GPUs have no ECC) are skipped, not counted as failures.

    Raises:
        NvmlUnavailableError: NVML cannot be used on this machine.

    """
    with _nvml_session() as pynvml:
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as err:
            return GpuHealth(healthy=False, problems=[f"cannot open GPU {index}: {_text(err)}"])
        return _health_of(pynvml, handle)


def _nvlink_peers(
    pynvml: ModuleType, handle: Any, index_by_bus: dict[str, int], own_index: int
) -> tuple[dict[int, int], int]:
    """Links per peer GPU, and the number of links that go to an NVSwitch instead of a GPU."""
    peers: dict[int, int] = {}
    switch_links = 0
    max_links = int(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18))
    enabled = getattr(pynvml, "NVML_FEATURE_ENABLED", 1)
    for link in range(max_links):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link) != enabled:
                continue
            remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
        except pynvml.NVMLError:
            # Links beyond what this GPU has, or GPUs without NVLink, answer NotSupported/InvalidArgument.
            continue
        peer = index_by_bus.get(normalize_bus_id(_text(remote.busId)))
        if peer is not None and peer != own_index:
            peers[peer] = peers.get(peer, 0) + 1
            continue
        remote_type = getattr(pynvml, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
        if remote_type is None:
            continue
        try:
            if remote_type(handle, link) == getattr(
                pynvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", _NVLINK_DEVICE_TYPE_SWITCH
            ):
                switch_links += 1
        except pynvml.NVMLError:
            continue
    return peers, switch_links


def discover_gpus(sys_root: Path = Path("/sys")) -> tuple[list[GpuInfo], str | None]:
    """Every GPU NVML sees, with NVLink peers and health.

    GPUs whose NVLinks go to NVSwitches (DGX/HGX boards) reach every other switch-attached GPU at full link
    count, so each such pair is recorded with the smaller of the two GPUs' switch link counts.

    Returns:
        The GPUs ordered by index, and ``None``; or an empty list and a reason such as
        ``"NVML not available: NVML Shared Library Not Found"``. Never raises for a missing driver.

    """
    try:
        with _nvml_session() as pynvml:
            return _discover(pynvml, sys_root), None
    except NvmlUnavailableError as err:
        return [], str(err)


def _discover(pynvml: ModuleType, sys_root: Path) -> list[GpuInfo]:
    count = int(pynvml.nvmlDeviceGetCount())
    handles: dict[int, Any] = {}
    bus_ids: dict[int, str] = {}
    broken: dict[int, str] = {}
    for index in range(count):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            handles[index] = handle
            bus_ids[index] = normalize_bus_id(_text(pynvml.nvmlDeviceGetPciInfo(handle).busId))
        except pynvml.NVMLError as err:
            broken[index] = _text(err)
    index_by_bus = {bus: index for index, bus in bus_ids.items()}

    gpus: dict[int, GpuInfo] = {}
    switch_links: dict[int, int] = {}
    for index in range(count):
        if index not in handles or index in broken:
            # Keep a broken GPU visible (unhealthy) so operators see it and the scheduler avoids it.
            gpus[index] = GpuInfo(index=index, healthy=False)
            continue
        handle = handles[index]
        try:
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            name = _text(pynvml.nvmlDeviceGetName(handle))
            memory = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        except pynvml.NVMLError:
            gpus[index] = GpuInfo(index=index, healthy=False, numa=pci_numa_node(bus_ids[index], sys_root))
            continue
        peers, switch_links[index] = _nvlink_peers(pynvml, handle, index_by_bus, index)
        health = _health_of(pynvml, handle)
        gpus[index] = GpuInfo(
            index=index,
            uuid=uuid,
            pci_bus_id=normalize_bus_id(bus_ids[index]),
            model="-".join(name.split()) or "unknown",
            memory=memory,
            numa=pci_numa_node(bus_ids[index], sys_root),
            healthy=health.healthy,
            nvlinks=peers,
        )
    switched = {index: links for index, links in switch_links.items() if links > 0}
    for index, links in switched.items():
        nvlinks = dict(gpus[index].nvlinks)
        for peer, peer_links in switched.items():
            if peer != index:
                nvlinks[peer] = nvlinks.get(peer, 0) + min(links, peer_links)
        gpus[index] = gpus[index].model_copy(update={"nvlinks": nvlinks})
    return [gpus[index] for index in sorted(gpus)]


# XIDs that report a fault of the application (an illegal memory access, a page fault, a preempted or hung
# context), not of the GPU: the NVIDIA device plugin's default list of XIDs that leave a GPU healthy.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
# NVML's nvmlEventTypeXidCriticalError.
_XID_CRITICAL_ERROR = 0x8
# The most events one poll drains; a GPU flooding events must not stall the caller.
_MAX_EVENTS_PER_POLL = 1000
_XID_MEANINGS = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


def describe_xid(xid: int) -> str:
    """``"XID 79 (GPU has fallen off the bus)"``; the number alone for XIDs without a well-known meaning."""
    meaning = _XID_MEANINGS.get(xid)
    return f"XID {xid} ({meaning})" if meaning else f"XID {xid}"


class XidWatcher:
    """Critical XID errors per GPU, from NVML's event API, as the NVIDIA device plugin watches them.

    ``start`` registers every GPU that supports it for ``XidCriticalError`` events; each ``poll`` drains what
    arrived since (without waiting) and returns every XID seen since ``start``, per GPU index. A GPU that
    reported a critical XID stays listed until the watcher is closed: the errors it reports need a GPU reset,
    after which the watcher's owner restarts. XIDs in ``ignored`` (by default :data:`APPLICATION_XIDS`) are
    dropped. NVML stays initialised between ``start`` and ``close``.
    """

    def __init__(self, ignored: frozenset[int] = APPLICATION_XIDS) -> None:
        self.ignored = ignored
        self.watched: set[int] = set()
        self.seen: dict[int, list[int]] = {}
        self._pynvml: ModuleType | None = None
        self._event_set: Any = None

    @property
    def started(self) -> bool:
        """True between a successful ``start`` and ``close``."""
        return self._event_set is not None

    def start(self) -> str | None:
        """Register for events; returns why XIDs cannot be watched here (None when they can, on some GPU)."""
        if self.started:
            return None
        try:
            pynvml = _load_pynvml()
        except NvmlUnavailableError as err:
            return str(err)
        try:
            pynvml.nvmlInit()
        except (pynvml.NVMLError, OSError) as err:
            return f"NVML not available: {_text(err)}"
        try:
            event_set = pynvml.nvmlEventSetCreate()
        except (pynvml.NVMLError, AttributeError) as err:
            with suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()
            return f"NVML events not available: {_text(err)}"
        self._pynvml, self._event_set = pynvml, event_set
        mask = int(getattr(pynvml, "nvmlEventTypeXidCriticalError", _XID_CRITICAL_ERROR))
        try:
            count = int(pynvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as err:
            self.close()
            return f"NVML cannot count GPUs: {_text(err)}"
        for index in range(count):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                if not int(pynvml.nvmlDeviceGetSupportedEventTypes(handle)) & mask:
                    continue
                pynvml.nvmlDeviceRegisterEvents(handle, mask, event_set)
            except pynvml.NVMLError:
                # Unsupported (some virtual GPUs) or a broken GPU, which the other checks report.
                continue
            self.watched.add(index)
        if not self.watched:
            self.close()
            return "no GPU supports XID events"
        return None

    def poll(self) -> dict[int, list[int]]:
        """Drain the events that arrived; every critical XID seen since ``start``, by GPU index."""
        pynvml = self._pynvml
        if pynvml is None or self._event_set is None:
            return {index: list(xids) for index, xids in self.seen.items()}
        mask = int(getattr(pynvml, "nvmlEventTypeXidCriticalError", _XID_CRITICAL_ERROR))
        for _ in range(_MAX_EVENTS_PER_POLL):
            try:
                data = pynvml.nvmlEventSetWait_v2(self._event_set, 0)
            except pynvml.NVMLError:
                # Timeout: nothing (more) to read. Any other failure is retried at the next poll.
                break
            if not int(data.eventType) & mask:
                continue
            xid = int(data.eventData)
            if xid in self.ignored:
                continue
            try:
                indices = [int(pynvml.nvmlDeviceGetIndex(data.device))]
            except pynvml.NVMLError:
                # An event NVML cannot attribute: every watched GPU is suspect, as the device plugin decides.
                indices = sorted(self.watched)
            for index in indices:
                xids = self.seen.setdefault(index, [])
                if xid not in xids:
                    xids.append(xid)
        return {index: list(xids) for index, xids in self.seen.items()}

    def close(self) -> None:
        """Free the event set and release NVML; what was seen is kept."""
        pynvml, event_set = self._pynvml, self._event_set
        self._pynvml = self._event_set = None
        if pynvml is None:
            return
        if event_set is not None:
            with suppress(pynvml.NVMLError):
                pynvml.nvmlEventSetFree(event_set)
        with suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
