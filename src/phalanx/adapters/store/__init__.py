"""State stores: where API objects, the change feed, events and leases live.

The embedded runtime uses ``SqliteStore`` (one SQLite file per state directory, shared by the control plane
daemon and CLI processes). Callers depend on the method set of ``SqliteStore`` and on the errors below; the
Kubernetes backend offers the same verbs over the API server.
"""

from phalanx.adapters.store.errors import (
    AlreadyExistsError,
    ChangesExpiredError,
    ConflictError,
    NotFoundError,
    StoreError,
    StoreUnavailableError,
)
from phalanx.adapters.store.records import EVENT_KIND, Change, ChangeType, EventRecord, Lease
from phalanx.adapters.store.sqlite import SqliteStore

__all__ = [
    "EVENT_KIND",
    "AlreadyExistsError",
    "Change",
    "ChangeType",
    "ChangesExpiredError",
    "ConflictError",
    "EventRecord",
    "Lease",
    "NotFoundError",
    "SqliteStore",
    "StoreError",
    "StoreUnavailableError",
]
