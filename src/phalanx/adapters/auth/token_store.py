"""API tokens of the embedded backend, in their own SQLite file (``tokens.db`` in the state directory).

A token is ``phx_`` and 32 random bytes (``secrets.token_urlsafe``); it is returned once, by ``create``, and only
its SHA-256 is stored. A secret of 256 random bits needs no slow hash: nobody can guess one from its digest, and
a fast hash keeps each request's lookup cheap. ``authenticate`` looks the digest up, compares it again with
``hmac.compare_digest`` (so no comparison of ours leaks how much of a digest matched), and answers the token's
``core.auth.Grant``, or None for anything else: malformed, unknown, revoked (the row is gone) or expired.

Nothing is cached: each call reads the file (on a connection kept per thread, each statement its own read
transaction), so a token revoked by one process is refused by every other at once. ``last used`` is recorded
to the minute: writing the file on every request of a busy server would queue its requests behind SQLite's one
writer for a date nobody reads to the second.

The file is the owner's alone (0600, in the 0700 state directory), like the state store.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from phalanx.adapters.private_files import make_private_dirs, open_private, tighten
from phalanx.adapters.sqlite_wal import switch_to_wal
from phalanx.core.auth import Grant, Role, check_namespaces, check_role
from phalanx.core.auth.lifetimes import MAX_LIFETIME
from phalanx.model.names import check_dns_label

TOKEN_PREFIX = "phx_"  # nosec B105  # a name or message, not a secret
_SECRET_BYTES = 32
# token_urlsafe(32) is 43 characters of [A-Za-z0-9_-]; anything else cannot be one of ours.
_TOKEN_LENGTH = len(TOKEN_PREFIX) + 43
_URLSAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
LAST_USED_RESOLUTION = timedelta(minutes=1)
BUSY_TIMEOUT_S = 10.0
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    name TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    namespaces TEXT NOT NULL,
    digest TEXT NOT NULL UNIQUE,
    created_us INTEGER NOT NULL,
    expires_us INTEGER,
    last_used_us INTEGER
)
"""


class TokenStoreError(Exception):
    """A refusal or failure of the token store, as one sentence for the user."""


class TokenExistsError(TokenStoreError):
    """A token of that name exists already."""


class TokenNotFoundError(TokenStoreError):
    """No token has that name."""


@dataclass(frozen=True)
class TokenInfo:
    """What ``list`` shows of a token: never the secret, nor its digest."""

    name: str
    role: Role
    namespaces: frozenset[str]
    created: datetime
    expires: datetime | None
    last_used: datetime | None


def _utc_now() -> datetime:
    return datetime.now(UTC)


def digest_of(token: str) -> str:
    """The SHA-256 (hex) of a token: what the store keeps instead of it."""
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    """The tokens of one state directory.

    Args:
        path: the SQLite file (``StateLayout.tokens_database``); created, 0600, on first use.
        now: the clock that dates tokens and decides expiry (injected so that tests need not wait).
    """

    def __init__(self, path: Path, *, now: Callable[[], datetime] = _utc_now) -> None:
        self._path = path
        self._now = now
        self._ready = False
        self._local = threading.local()
        self._inherited: list[sqlite3.Connection] = []

    def create(self, name: str, role: str, namespaces: Iterable[str], *, expires: timedelta | None = None) -> str:
        """Store a new token and return it: the only time the secret is seen.

        Args:
            name: a DNS label naming the token (for ``list`` and ``revoke``).
            role: ``viewer``, ``editor`` or ``admin``.
            namespaces: the namespaces it reaches, or ``["*"]`` for every one.
            expires: its lifetime from now (``core.auth.parse_lifetime``); None: it never expires.

        Raises:
            ValueError: the name, role, namespaces or expiry are not valid (nothing is stored).
            TokenExistsError: a token of that name exists.
        """
        check_dns_label(name, "token name")
        checked_role = check_role(role)
        checked = check_namespaces(namespaces)
        if expires is not None and not timedelta(0) < expires <= MAX_LIFETIME:
            raise ValueError("expires must be a lifetime of more than nothing and at most 3650d, such as 30d")
        created = self._now()
        token = TOKEN_PREFIX + secrets.token_urlsafe(_SECRET_BYTES)
        row = (
            name,
            checked_role.value,
            json.dumps(sorted(checked)),
            digest_of(token),
            _micros(created),
            _micros(created + expires) if expires else None,
        )
        with self._connect() as conn:
            try:
                conn.execute(
                    "INSERT INTO tokens (name, role, namespaces, digest, created_us, expires_us) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    row,
                )
            except sqlite3.IntegrityError:
                raise TokenExistsError(
                    f"a token named {name!r} exists already; revoke it first (`phalanx token revoke {name}`) "
                    "or choose another name"
                ) from None
        return token

    def list(self) -> list[TokenInfo]:
        """Every token, by name, expired ones included (their expiry says so)."""
        with self._connect(write=False) as conn:
            rows = conn.execute(
                "SELECT name, role, namespaces, created_us, expires_us, last_used_us FROM tokens ORDER BY name"
            ).fetchall()
        return [
            TokenInfo(
                name=name,
                role=Role(role),
                namespaces=frozenset(json.loads(namespaces)),
                created=_from_micros(created),
                expires=_from_micros(expires) if expires is not None else None,
                last_used=_from_micros(last_used) if last_used is not None else None,
            )
            for name, role, namespaces, created, expires, last_used in rows
        ]

    def revoke(self, name: str) -> None:
        """Delete the token: every process refuses it from the next request on.

        Raises:
            TokenNotFoundError: no token has that name.
        """
        with self._connect() as conn:
            if conn.execute("DELETE FROM tokens WHERE name = ?", (name,)).rowcount == 0:
                raise TokenNotFoundError(f"no token named {name!r}; `phalanx token list` shows the tokens")

    def authenticate(self, token: str) -> Grant | None:
        """The grant of a valid token; None when it is malformed, unknown, revoked or expired.

        Records when the token was last used (to the minute).
        """
        if not _looks_like_a_token(token):
            return None
        try:
            return self._authenticate(token)
        except TokenStoreError as err:
            if not _io_error(err):
                raise
            # A read that met an I/O error (seen once in 8 runs of 200 clients over two server processes, never
            # reproduced alone) is tried once more on a fresh connection: it changes nothing, so a retry is safe.
            self.close()
            return self._authenticate(token)

    def _authenticate(self, token: str) -> Grant | None:
        digest = digest_of(token)
        now = self._now()
        with self._connect(write=False) as conn:
            row = conn.execute(
                "SELECT name, role, namespaces, digest, expires_us, last_used_us FROM tokens WHERE digest = ?",
                (digest,),
            ).fetchone()
            if row is None:
                return None
            name, role, namespaces, stored, expires_us, last_used_us = row
            if not hmac.compare_digest(stored, digest):
                return None
            now_us = _micros(now)
            if expires_us is not None and now_us >= expires_us:
                return None
            if last_used_us is None or now_us - last_used_us >= LAST_USED_RESOLUTION // _MICROSECOND:
                # Best effort: a token stays valid when the store is too busy to date its use this minute.
                with suppress(sqlite3.OperationalError):
                    conn.execute("UPDATE tokens SET last_used_us = ? WHERE name = ?", (now_us, name))
        return Grant(Role(role), frozenset(json.loads(namespaces)), name=name)

    def close(self) -> None:
        """Close this thread's connection (others close when their thread ends); the store stays usable."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.close()
        self._local.conn = None

    @contextmanager
    def _connect(self, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        """This thread's connection for one call; the file is made on first use.

        ``write``: the call runs in one ``BEGIN IMMEDIATE`` transaction, committed when it succeeds. Otherwise each
        statement commits on its own and readers take no lock (WAL), so authenticating never queues; each
        statement reads the file as it is then, so a revoke is seen by the next one.
        """
        conn = self._connection()
        try:
            if write:
                conn.execute("BEGIN IMMEDIATE")
            yield conn
            if write:
                conn.execute("COMMIT")
        except sqlite3.OperationalError as err:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            code = getattr(err, "sqlite_errorname", None)
            why = f"{err}, {code}" if code else str(err)
            raise TokenStoreError(f"the token store {self._path} cannot be used for now ({why}); try again") from err
        except BaseException:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    def _connection(self) -> sqlite3.Connection:
        """This thread's connection, kept open: opening one per call cost a millisecond (WAL set-up each time)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            return conn
        if conn is not None:
            # Inherited through fork: SQLite forbids using or closing it in the child, so it is kept, untouched.
            self._inherited.append(conn)
        if not self._ready:
            self._prepare()
        try:
            conn = sqlite3.connect(str(self._path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as err:
            raise TokenStoreError(f"cannot open the token store {self._path} ({err})") from err
        self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _prepare(self) -> None:
        """Create the file 0600 (in a 0700 directory) and its table; idempotent, safe in two processes at once."""
        try:
            make_private_dirs(self._path.parent)
            os.close(open_private(self._path, os.O_RDWR))
            tighten(self._path)
            conn = sqlite3.connect(str(self._path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except (OSError, sqlite3.Error) as err:
            raise TokenStoreError(f"cannot create the token store {self._path} ({err})") from err
        try:
            switch_to_wal(conn, timeout_s=BUSY_TIMEOUT_S)
            conn.execute("BEGIN IMMEDIATE")
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            if version > SCHEMA_VERSION:
                raise TokenStoreError(
                    f"the token store {self._path} was written by a newer Phalanx (schema {version}); upgrade"
                )
            conn.execute(_SCHEMA)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except sqlite3.Error as err:
            raise TokenStoreError(f"cannot prepare the token store {self._path} ({err})") from err
        finally:
            conn.close()
        self._ready = True


def _io_error(err: TokenStoreError) -> bool:
    """Whether SQLite failed with an I/O error (``SQLITE_IOERR`` and its extended codes)."""
    return str(getattr(err.__cause__, "sqlite_errorname", "")).startswith("SQLITE_IOERR")


def _looks_like_a_token(token: str) -> bool:
    return (
        len(token) == _TOKEN_LENGTH and token.startswith(TOKEN_PREFIX) and set(token[len(TOKEN_PREFIX) :]) <= _URLSAFE
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _micros(moment: datetime) -> int:
    """Microseconds since the epoch of an aware datetime (a naive one would be read as local time)."""
    if moment.tzinfo is None:
        raise ValueError(f"{moment.isoformat()} has no time zone; token times are in UTC")
    return (moment - _EPOCH) // _MICROSECOND


def _from_micros(micros: int) -> datetime:
    return _EPOCH + micros * _MICROSECOND
