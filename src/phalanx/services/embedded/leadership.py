"""One leader per state directory, held by a lease in the store.

The lease records the holder's host, pid and process start time. A control plane that finds the lease held by
a process that no longer exists on this host takes it over at once (after ``kill -9`` there is no need to
wait for the lease to expire); a holder on another host, or one still alive, is waited out.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from phalanx.adapters.store import Lease, SqliteStore

LEASE_NAME = "controlplane"


def process_start_ticks(pid: int) -> int | None:
    """Start time of a process in clock ticks since boot (field 22 of /proc/<pid>/stat), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def holder_is_dead(lease: Lease) -> bool:
    """Whether the lease's holder is a process of this host that is no longer running."""
    info = lease.holder_info or {}
    if info.get("host") != socket.gethostname():
        return False
    pid, ticks = info.get("pid"), info.get("start_ticks")
    if not isinstance(pid, int):
        return False
    return process_start_ticks(pid) != ticks


@dataclass
class Leadership:
    """Acquires and renews the control-plane lease for this process."""

    store: SqliteStore
    ttl_seconds: float = 5.0
    holder: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}")

    @property
    def info(self) -> dict[str, object]:
        """What the lease says about its holder."""
        pid = os.getpid()
        return {"host": socket.gethostname(), "pid": pid, "start_ticks": process_start_ticks(pid)}

    def acquire(self) -> bool:
        """Take the lease if it is free, expired, ours, or held by a dead process of this host."""
        return self.store.try_acquire_lease(
            LEASE_NAME, self.holder, self.ttl_seconds, holder_info=self.info, is_holder_dead=holder_is_dead
        )

    def renew(self) -> bool:
        """Extend the lease; False means another process holds it now and we must stop leading."""
        return self.store.renew_lease(LEASE_NAME, self.holder)

    def release(self) -> None:
        """Give the lease up so a standby takes over at once."""
        self.store.release_lease(LEASE_NAME, self.holder)
