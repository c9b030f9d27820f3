"""The state store's quarantine verbs: rows that cannot be read, and objects a step of the control plane fails on.

A mixin of ``SqliteStore`` (which provides the connection, transaction and kind helpers declared at the top),
kept apart so that ``sqlite.py`` holds the object verbs. The records live in the ``quarantine`` table; each is
about one ``resourceVersion`` of its row and stops applying once the row changes (see ``QuarantineRecord``).
"""

from __future__ import annotations

import builtins
import logging
import threading
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from sqlite3 import Connection
from typing import TypeVar

from pydantic import BaseModel

from phalanx.adapters.store import _rows
from phalanx.adapters.store.errors import StoreError
from phalanx.adapters.store.records import UNKNOWN_KIND, UNREADABLE, QuarantineRecord, to_micros, to_utc

T = TypeVar("T", bound=BaseModel)
log = logging.getLogger(__name__)


class QuarantineVerbs:
    """``quarantine``, ``quarantined``, ``release`` and ``audit``, and the recording of rows that do not parse."""

    # Unreadable rows this store already recorded: (kind, namespace, name) -> (resourceVersion, problem).
    _noted: dict[tuple[str, str, str], tuple[int, str]]
    _noted_lock: threading.Lock
    _now: Callable[[], datetime]

    def _start_quarantine(self) -> None:
        self._noted = {}
        self._noted_lock = threading.Lock()

    # Provided by SqliteStore.
    def _writing(self, action: str) -> AbstractContextManager[Connection]:
        raise NotImplementedError

    def _translated(self, action: str) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _connection(self) -> Connection:
        raise NotImplementedError

    def _kind_of(self, cls: type[BaseModel]) -> str:
        raise NotImplementedError

    def list(
        self, cls: type[T], namespace: str | None = None, *, labels: Mapping[str, str | None] | None = None
    ) -> builtins.list[T]:
        raise NotImplementedError

    def quarantine(
        self, cls: type[BaseModel], namespace: str, name: str, *, reason: str, message: str, retry_at: datetime | None
    ) -> QuarantineRecord | None:
        """Set an object aside at its current version: a step failed on it (``reason``) with ``message``.

        The record applies until the row changes or ``retry_at`` passes (the step's business: see
        ``QuarantineRecord``). Returns it, or None when the object is gone.
        """
        return self._set_aside(self._kind_of(cls), namespace, name, None, reason, message, retry_at)

    def quarantined(self, kind: str | None = None) -> builtins.list[QuarantineRecord]:
        """The quarantine records that apply (their row exists at the version they are about), by kind and name."""
        with self._translated("read the quarantine"):
            return _rows.select_quarantine(self._connection(), kind)

    def release(self, cls: type[BaseModel], namespace: str, name: str) -> None:
        """Drop the object's quarantine record (a step succeeded on it again); nothing happens when it has none."""
        kind = self._kind_of(cls)
        with self._writing(f"release {kind} {namespace}/{name} from quarantine") as conn:
            _rows.delete_quarantine(conn, kind, namespace, name)

    def audit(self, classes: Collection[type[BaseModel]]) -> builtins.list[QuarantineRecord]:
        """Read every row: quarantine those that do not parse and those of kinds not in ``classes``.

        Returns:
            Every quarantine record that applies afterwards (``quarantined()``).
        """
        for cls in classes:
            self.list(cls)
        known = sorted({self._kind_of(cls) for cls in classes})
        marks = ", ".join("?" * len(known))
        sql = f"SELECT kind, namespace, name, resource_version FROM objects WHERE kind NOT IN ({marks})"  # nosec B608  # only ? marks and constants are formatted in; values are parameters
        with self._translated("look for objects of unknown kinds"):
            rows = self._connection().execute(sql, known).fetchall()
        for kind, namespace, name, version in rows:
            problem = f"kind {kind!r} is not one this Phalanx knows ({', '.join(known)})"
            self._note_unreadable(str(kind), str(namespace), str(name), int(version), problem, reason=UNKNOWN_KIND)
        return self.quarantined()

    def _note_unreadable(
        self, kind: str, namespace: str, name: str, version: int, problem: str, *, reason: str = UNREADABLE
    ) -> None:
        """Record (once per row version) that a row cannot be read; never raises: reads must go on."""
        key = (kind, namespace, name)
        if reason == UNREADABLE:
            problem = f"its stored row cannot be read: {problem}"
        with self._noted_lock:
            if self._noted.get(key) == (version, problem):
                return
        try:
            current = [r for r in self.quarantined(kind) if (r.namespace, r.name) == (namespace, name)]
            if not (current and (current[0].reason, current[0].message) == (reason, problem)):
                if self._set_aside(kind, namespace, name, version, reason, problem, None) is None:
                    return
                log.info("quarantined %s %s/%s: %s", kind, namespace, name, problem)
        except StoreError as err:  # e.g. locked or read-only: the next reader records it
            log.debug("cannot record that %s %s/%s cannot be read: %s", kind, namespace, name, err)
            return
        with self._noted_lock:
            self._noted[key] = (version, problem)

    def _set_aside(
        self,
        kind: str,
        namespace: str,
        name: str,
        version: int | None,
        reason: str,
        message: str,
        retry_at: datetime | None,
    ) -> QuarantineRecord | None:
        """Write the row's record at ``version`` (None: its current one); None when the row is gone or moved on."""
        now = self._now()
        with self._writing(f"quarantine {kind} {namespace}/{name}") as conn:
            row = _rows.select_object(conn, kind, namespace, name)
            if row is None or (version is not None and row[0] != version):
                return None
            record = QuarantineRecord(kind, namespace, name, row[0], reason, message, to_utc(now), retry_at)
            retry = None if retry_at is None else to_micros(retry_at)
            _rows.write_quarantine(conn, record, since=to_micros(now), retry_at=retry)
        return record
