"""The preloaded command process: ``phalanx`` verbs run in a fork of a process that has imported them already.

A command's own work (ask the store or the control plane, print a table) takes milliseconds; starting Python,
typer, rich, pydantic and the models takes a few hundred on a busy 2-core machine. So each control plane starts
one of these beside it (``python -m phalanx.entrypoints.cli.preload``): it imports what the commands need,
then, for each connection on ``<state>/cli.sock``, forks a child that becomes the command. The child takes the
launcher's standard streams (received as file descriptors), arguments, environment, working directory and
umask, and runs the launcher's own dispatch (``launcher.dispatch``), so a verb behaves exactly as it does in a
process of its own. The exchange with the launcher is in ``preload_client``.

The server stays single-threaded, so a fork never copies a lock another thread holds; it opens no database
and writes nothing before it forks. It refuses (and the launcher then runs the command itself) a launcher of
another Python or another copy of the package, and a package whose files changed since it started: it then
starts itself again with the new code. It serves while the control plane that started it lives, and one at a
time per state directory (``<state>/cli.lock``); only its owner may connect (the state directory is 0700, and
the peer's uid is checked).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gc
import importlib
import io
import json
import logging
import os
import signal
import socket
import struct
import subprocess  # nosec B404  # starts this module's own process
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from phalanx.entrypoints.cli.preload_client import HEADER_DIGITS, MAX_SOCKET_PATH, PRELOAD_ENV, package_dir
from phalanx.services.embedded.layout import StateLayout

log = logging.getLogger(__name__)

#: What the commands import on first use, imported once here (``python -X importtime`` of each verb).
PRELOADED = (
    "phalanx.entrypoints.cli.main",
    "phalanx.entrypoints.cli.launcher",
    "phalanx.entrypoints.cli.fast_submit",
    "phalanx.entrypoints.cli.running",
    "phalanx.entrypoints.cli.render",
    "phalanx.entrypoints.cli.follow",
    "phalanx.entrypoints.client",
    "phalanx.entrypoints.job_verbs",
    "phalanx.services.embedded.operations",
    "phalanx.adapters.store",
    "phalanx.services.history",
    "phalanx.adapters.history.store",  # SQLAlchemy and Alembic: most of what `phalanx history` costs
    "phalanx.model.loading",
    "rich.console",
    "rich.table",
    "rich.markup",
    "yaml",
)
MAX_REQUEST_BYTES = 4 << 20
#: Seconds a connection has to send its request, and a child to hear ``go``, before it is dropped.
REQUEST_SECONDS = 5.0
ACCEPT_SECONDS = 1.0
#: How long a new server waits for the lock: the one before it notices its control plane is gone within a second.
LOCK_WAIT_SECONDS = 3.0
SO_PEERCRED_FORMAT = "3i"  # struct ucred: pid, uid, gid


def code_signature(root: Path) -> tuple[int, int]:
    """How many ``.py`` files the package has and their newest change: a reinstall or an edit changes it."""
    count, newest = 0, 0
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        stack.append(Path(entry.path))
                elif entry.name.endswith(".py"):
                    count += 1
                    newest = max(newest, entry.stat().st_mtime_ns)
    return count, newest


def warm() -> None:
    """Import what the commands need, then keep the imported objects out of the collector's way.

    ``gc.freeze`` spares the children the collector's walks over these objects, which would also copy the
    pages they live on into each child.
    """
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError as err:  # an optional extra: the command imports (or misses) it itself
            log.debug("not preloaded: %s (%s)", name, err)
    from phalanx.entrypoints.cli.main import built_command

    built_command()
    gc.collect()
    gc.freeze()


class PreloadServer:
    """Serves ``layout.cli_socket`` while ``parent_pid`` lives; each request forks a child that runs the command."""

    def __init__(self, layout: StateLayout, parent_pid: int) -> None:
        self.layout = layout
        self.parent_pid = parent_pid
        self.package = package_dir()
        self.signature = code_signature(Path(self.package))
        self.listener: socket.socket | None = None
        self.lock_fd: int | None = None

    def bind(self) -> bool:
        """Take the state directory's socket; False when another preloaded process holds it or it cannot be made."""
        path = self.layout.cli_socket
        if len(str(path).encode()) >= MAX_SOCKET_PATH:
            log.warning("state directory path too long for a Unix socket; commands are not preloaded")
            return False
        lock = os.open(self.layout.cli_lock, os.O_WRONLY | os.O_CREAT, 0o600)
        if not _lock_within(lock, LOCK_WAIT_SECONDS):
            os.close(lock)
            return False  # another control plane's preloaded process serves this directory
        self.lock_fd = lock
        # The lock is released when this process ends, however it ends: never closed before then.
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # left by a process that was killed
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_mask = os.umask(0o177)
        try:
            listener.bind(str(path))
        except OSError as err:
            listener.close()
            log.warning("cannot serve preloaded commands on %s: %s", path, err)
            return False
        finally:
            os.umask(old_mask)
        listener.listen(64)
        listener.settimeout(ACCEPT_SECONDS)
        self.listener = listener
        return True

    def serve(self) -> str:
        """Accept until the parent is gone or the code changed; returns why it stopped (``parent``, ``code``)."""
        assert self.listener is not None  # nosec B101  # bind() came first
        try:
            while os.getppid() == self.parent_pid:
                _reap()
                try:
                    connection, _ = self.listener.accept()
                except TimeoutError:
                    continue
                except InterruptedError:
                    continue
                with connection:
                    if self._handle(connection) == "code":
                        return "code"
            return "parent"
        finally:
            self.close()

    def close(self) -> None:
        """Stop listening and remove the socket."""
        if self.listener is not None:
            self.listener.close()
            self.listener = None
            with contextlib.suppress(FileNotFoundError):
                self.layout.cli_socket.unlink()

    def _handle(self, connection: socket.socket) -> str:
        """Read one request and fork its command, or refuse it; ``code`` when the package changed."""
        fds: list[int] = []
        try:
            connection.settimeout(REQUEST_SECONDS)
            uid = struct.unpack(
                SO_PEERCRED_FORMAT,
                connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize(SO_PEERCRED_FORMAT)),
            )[1]
            if uid != os.getuid():
                return "refused"
            request, fds = _read_request(connection)
            refusal = self._refusal(request, fds)
            if refusal is not None:
                _send(connection, {"declined": refusal})
                return "code" if refusal.startswith("the package changed") else "refused"
            sys.stdout.flush()
            sys.stderr.flush()
            if os.fork() == 0:
                code = 1
                try:
                    assert self.listener is not None and self.lock_fd is not None  # nosec B101  # serving
                    self.listener.close()
                    # The lock is the server's: a command still running when the server is gone must not hold it.
                    os.close(self.lock_fd)
                    code = run_command(connection, fds, request)
                finally:
                    os._exit(code)
            return "forked"
        except (OSError, ValueError, KeyError) as err:
            log.debug("a preloaded command request failed: %s", err)
            return "failed"
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _refusal(self, request: dict[str, Any], fds: list[int]) -> str | None:
        if len(fds) != 3:
            return "the standard streams did not arrive"
        if request.get("executable") != sys.executable or request.get("package") != self.package:
            return "another Python or another copy of the package"
        if code_signature(Path(self.package)) != self.signature:
            return "the package changed since the preloaded process started"
        return None


def _lock_within(fd: int, seconds: float) -> bool:
    """Take the exclusive lock on ``fd``, waiting up to ``seconds`` (the previous server may be ending)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)  # flock has no timed wait; a server that is ending releases it within a second


def _reap() -> None:
    """Collect the children that have ended (their launchers already have their status)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _read_request(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    header, fds, _, _ = socket.recv_fds(connection, HEADER_DIGITS + 1, 3)
    while len(header) < HEADER_DIGITS + 1:
        more = connection.recv(HEADER_DIGITS + 1 - len(header))
        if not more:
            raise ValueError("the request ended early")
        header += more
    if not header[:HEADER_DIGITS].isdigit() or int(header[:HEADER_DIGITS]) > MAX_REQUEST_BYTES:
        raise ValueError("not a request")
    length = int(header[:HEADER_DIGITS])
    payload = bytearray()
    while len(payload) < length:
        chunk = connection.recv(min(65536, length - len(payload)))
        if not chunk:
            raise ValueError("the request ended early")
        payload += chunk
    request = json.loads(payload)
    if not isinstance(request, dict):
        raise ValueError("not a request")
    return request, list(fds)


def _send(connection: socket.socket, message: dict[str, Any]) -> None:
    connection.sendall(json.dumps(message).encode() + b"\n")


def run_command(connection: socket.socket, fds: list[int], request: dict[str, Any]) -> int:
    """In the forked child: become the launcher's process, wait for ``go``, run the command; its exit status."""
    ignored = {int(signum) for signum in request.get("ignored_signals") or []}
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_IGN if signum in ignored else signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN if signal.SIGINT in ignored else signal.default_int_handler)
    try:
        os.chdir(request["cwd"])
    except OSError as err:
        _send(connection, {"declined": f"cannot enter the working directory: {err}"})
        return 0
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    os.umask(int(request["umask"]))
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in dict(request["env"]).items()})
    argv = [str(arg) for arg in request["argv"]]
    sys.argv = ["phalanx", *argv]
    _adopt_streams(request.get("encoding") or {})
    logging.root.handlers.clear()  # as in a process of its own: warnings through logging's last resort
    logging.root.setLevel(logging.WARNING)
    _send(connection, {"ready": True, "pid": os.getpid()})
    reader = connection.makefile("rb")
    if reader.readline() != b"go\n":
        return 0  # the launcher runs the command itself
    connection.settimeout(None)
    try:
        threading.Thread(target=_follow_launcher, args=(reader,), daemon=True).start()
        from phalanx.entrypoints.cli.launcher import dispatch

        code = dispatch(argv)
    except KeyboardInterrupt:  # Ctrl-C before the command's own handling began: what it answers to Ctrl-C
        code = 130
    except Exception:  # what Python does with an exception nothing caught: its traceback, status 1
        traceback.print_exc()
        code = 1
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    with contextlib.suppress(OSError):
        _send(connection, {"exit": code})
    return code


def _adopt_streams(encoding: dict[str, list[str]]) -> None:
    """New ``sys.std*`` on descriptors 0-2 (now the launcher's), buffered as Python buffers its own."""

    def spec(name: str) -> tuple[str, str]:
        chosen = encoding.get(name) or ["utf-8", "strict"]
        return str(chosen[0]), str(chosen[1])

    enc, errors = spec("stdin")
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=enc, errors=errors)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        enc, errors = spec(name)
        raw = io.FileIO(fd, "w", closefd=False)
        # As Python itself: stdout is line-buffered on a terminal and block-buffered elsewhere; stderr per line.
        line_buffering = name == "stderr" or raw.isatty()
        stream = io.TextIOWrapper(io.BufferedWriter(raw), encoding=enc, errors=errors, line_buffering=line_buffering)
        setattr(sys, name, stream)


def _follow_launcher(reader: Any) -> None:
    """Deliver the launcher's forwarded signals; if the launcher goes away, go with it."""
    while True:
        try:
            line = reader.readline()
        except OSError:
            line = b""
        if not line:
            os.kill(os.getpid(), signal.SIGKILL)  # the launcher was killed: so is its command, as in one process
            return
        word, _, number = line.decode("ascii", "replace").strip().partition(" ")
        if word == "signal" and number.isdigit():
            # To the main thread, which runs the command: a signal sent to the process from this thread would
            # land on this thread, and the main one would not see it until its blocking call returned.
            signal.pthread_kill(threading.main_thread().ident or 0, int(number))


def start_preload(layout: StateLayout) -> subprocess.Popen[bytes] | None:
    """Start the preloaded process for the calling control plane (None when ``PHALANX_CLI_PRELOAD=0``).

    Its log lines go where the control plane's go. Numeric libraries get one thread each: a process that forks
    must not have threads, and the commands do no numeric work worth more.
    """
    if os.environ.get(PRELOAD_ENV, "1").strip() == "0":
        return None
    command = [sys.executable, "-m", "phalanx.entrypoints.cli.preload", "--state-dir", str(layout.root)]
    environment = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    try:
        return subprocess.Popen(  # nosec B603  # a list of arguments, no shell
            [*command, "--parent", str(os.getpid())], stdin=subprocess.DEVNULL, env=environment, cwd=str(layout.root)
        )
    except OSError as err:
        log.warning("commands are not preloaded: %s", err)
        return None


def stop_preload(process: subprocess.Popen[bytes] | None) -> None:
    """Stop the preloaded process (commands it forked finish on their own)."""
    if process is None:
        return
    process.terminate()
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def main(argv: list[str] | None = None) -> int:
    """Serve preloaded commands for a state directory while the process ``--parent`` lives."""
    parser = argparse.ArgumentParser(prog="phalanx-preload", description=__doc__)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--parent", type=int, required=True, help="the control plane's pid: serve while it lives")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = PreloadServer(StateLayout(args.state_dir), args.parent)
    if not server.bind():
        return 0
    warm()
    log.info("preloaded commands on %s", server.layout.cli_socket)
    if server.serve() == "code":
        log.info("the package changed: starting the preloaded process again with the new code")
        os.execv(sys.executable, [sys.executable, "-m", "phalanx.entrypoints.cli.preload", *sys.argv[1:]])  # nosec B606
    return 0


if __name__ == "__main__":
    sys.exit(main())
