"""State stores: where API objects, the change feed, events and leases live.

The embedded runtime uses ``SqliteStore`` (one SQLite file per state directory, shared by the control plane
daemon and CLI processes). Callers depend on the method set of ``SqliteStore`` and on the errors below; the
Kubernetes backend offers the same verbs over the API server. A stored row that no longer parses never makes a
listing fail: ``list`` leaves it out and the store quarantines it (``quarantined``).
"""

from phalanx.adapters.store._parsing import describe_error
from phalanx.adapters.store.errors import (
    AlreadyExistsError,
    ChangesExpiredError,
    ConflictError,
    NotFoundError,
    StoreError,
    StoreUnavailableError,
    UnreadableError,
)
from phalanx.adapters.store.records import (
    EVENT_KIND,
    UNKNOWN_KIND,
    UNREADABLE,
    Change,
    ChangeType,
    EventRecord,
    Lease,
    QuarantineRecord,
)
from phalanx.adapters.store.sqlite import SqliteStore

__all__ = [
    "EVENT_KIND",
    "UNKNOWN_KIND",
    "UNREADABLE",
    "AlreadyExistsError",
    "Change",
    "ChangeType",
    "ChangesExpiredError",
    "ConflictError",
    "EventRecord",
    "Lease",
    "NotFoundError",
    "QuarantineRecord",
    "SqliteStore",
    "StoreError",
    "StoreUnavailableError",
    "UnreadableError",
    "describe_error",
]
