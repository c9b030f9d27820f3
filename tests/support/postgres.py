"""A real PostgreSQL server for the tests: initdb in a temp dir, started on a free loopback port, stopped after.

The binaries come from PATH or ``/usr/lib/postgresql/<version>/bin``. PostgreSQL refuses to run as root, so
when the tests run as root the cluster directory is handed to an unprivileged user (``nobody`` by default,
``PHALANX_TEST_PG_USER`` to pick another) and every server command runs as that user through ``runuser``
(or ``setpriv`` where runuser is missing). The temp dir lives directly under the system temp dir, since
pytest's own base temporary directory (mode 0700) is not reachable by that user. Readiness is polled with a
deadline (``pg_ctl start -w`` plus a real connection), never a fixed sleep.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, pg_ctl) were not found on PATH or under /usr/lib/postgresql/*/bin. "
    "Install them, e.g. `apt-get install postgresql` (Debian/Ubuntu), `dnf install postgresql-server` "
    "(Fedora/RHEL) or `brew install postgresql` (macOS), then run the tests again."
)


class PostgresUnavailableError(RuntimeError):
    """The server could not be found or started; the message says how to fix it."""


@dataclass(frozen=True)
class PostgresServer:
    """A running test server: where it listens and the SQLAlchemy URL of its test database."""

    host: str
    port: int
    user: str
    password: str
    database: str

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the test database, as a user writes it (the adapter picks psycopg 3)."""
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{self.database}"


def find_bindir() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``, or ``PostgresUnavailableError`` with how to install them."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    raise PostgresUnavailableError(INSTALL_HINT)


def free_port() -> int:
    """A TCP port free on the loopback interface right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_user_prefix() -> tuple[list[str], str | None]:
    """The command prefix that runs a server command unprivileged, and that user (None: we are not root)."""
    if os.geteuid() != 0:
        return [], None
    user = os.environ.get("PHALANX_TEST_PG_USER", "nobody")
    if shutil.which("runuser"):
        return ["runuser", "-u", user, "--"], user
    if shutil.which("setpriv"):
        entry = pwd.getpwnam(user)
        return [
            "setpriv",
            f"--reuid={entry.pw_uid}",
            f"--regid={entry.pw_gid}",
            "--clear-groups",
            "--reset-env",
        ], user
    raise PostgresUnavailableError(
        "the tests run as root and PostgreSQL refuses to; neither runuser nor setpriv is available to run it as "
        "an unprivileged user: install util-linux, or run the tests as a normal user"
    )


def _run(argv: list[str], log: Path, timeout: float = 60.0) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        server_log = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        raise PostgresUnavailableError(
            f"{' '.join(argv)} failed with code {proc.returncode}:\n{proc.stdout}\n{proc.stderr}\n{server_log}"
        )


def _wait_connectable(server: PostgresServer, database: str, deadline: float) -> None:
    import psycopg

    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(
                host=server.host,
                port=server.port,
                user=server.user,
                password=server.password,
                dbname=database,
                connect_timeout=2,
            ):
                return
        except psycopg.OperationalError as exc:
            last = exc
            time.sleep(0.05)
    raise PostgresUnavailableError(f"PostgreSQL did not accept connections in time: {last}")


@contextmanager
def running_postgres(timeout: float = 60.0) -> Iterator[PostgresServer]:
    """Start a throwaway PostgreSQL server with a database ``phalanx_test``; stop it and remove it at the end."""
    bindir = find_bindir()
    prefix, user = _as_user_prefix()
    root = Path(tempfile.mkdtemp(prefix="phalanx-pg-"))
    data, log, pwfile = root / "data", root / "server.log", root / "pwfile"
    server = PostgresServer("127.0.0.1", free_port(), "phalanx", "s3cret", "phalanx_test")
    pwfile.write_text(server.password + "\n")
    if user is not None:
        entry = pwd.getpwnam(user)
        for path in (root, pwfile):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    os.chmod(root, 0o700)
    if user is not None and subprocess.run([*prefix, "test", "-w", str(root)], check=False).returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise PostgresUnavailableError(
            f"user {user} cannot reach {root} (a parent directory is closed to it); set TMPDIR to a directory "
            f"that {user} can traverse, e.g. /tmp, or PHALANX_TEST_PG_USER to another user"
        )
    started = False
    try:
        _run(
            [
                *prefix,
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                server.user,
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            log,
            timeout,
        )
        options = f"-p {server.port} -k {root} -c listen_addresses={server.host} -F"
        _run(
            [
                *prefix,
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(log),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            ],
            log,
            timeout,
        )
        started = True
        deadline = time.monotonic() + timeout
        _wait_connectable(server, "postgres", deadline)
        create_database(server, server.database)
        yield server
    finally:
        if started:
            subprocess.run(
                [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        shutil.rmtree(root, ignore_errors=True)


def create_database(server: PostgresServer, database: str) -> None:
    """Create the empty database ``database`` on ``server`` (connected to its ``postgres`` database)."""
    import psycopg

    with psycopg.connect(
        host=server.host,
        port=server.port,
        user=server.user,
        password=server.password,
        dbname="postgres",
        autocommit=True,
    ) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')


def fresh_database(server: PostgresServer, prefix: str = "test") -> str:
    """Make an empty database of its own on ``server`` (a test that migrates from empty); its SQLAlchemy URL."""
    import uuid

    database = f"{prefix}_{uuid.uuid4().hex[:12]}"
    create_database(server, database)
    return f"postgresql://{server.user}:{server.password}@{server.host}:{server.port}/{database}"
