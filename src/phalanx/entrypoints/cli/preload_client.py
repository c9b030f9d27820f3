"""The launcher's side of the preloaded command process (``preload``): hand a verb over, wait for its exit status.

Standard library only, like the launcher: this module is what every ``phalanx`` command loads first.

A verb is handed over when its state directory has a preloaded process listening on ``<state>/cli.sock`` (one
runs beside each control plane). The launcher sends its arguments, environment, working directory and umask,
with its standard input, output and error as file descriptors (``SCM_RIGHTS``): the command's process writes
to this terminal or pipe itself, so colours, widths, streaming and broken pipes behave as they do here.

The exchange is two-phase, so that a command never runs twice nor not at all: the process forked for the
command says ``ready``, and runs it only once this side answers ``go``; until then, anything unexpected (no
answer in time, a refusal such as another Python or changed code) leaves the command to this process. After
``go`` this side only forwards the signals a terminal sends (Ctrl-C, hang-up, terminate) and reads the exit
status; if it is killed itself, the command's process sees the connection close and is killed too.

``PHALANX_CLI_PRELOAD=0`` turns the hand-over off (the command runs here; a control plane started with it set
starts no preloaded process).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from phalanx.services.embedded.layout import StateLayout, default_state_dir  # standard library only

PRELOAD_ENV = "PHALANX_CLI_PRELOAD"
#: The verbs handed over. Not ``up``, ``down``, ``server`` and ``install`` (they start or stop the processes
#: themselves), nor ``sim`` (long numeric work, better in a process of its own).
HANDED_OVER = frozenset(
    {
        "run",
        "submit",
        "get",
        "describe",
        "logs",
        "halt",
        "resume",
        "delete",
        "explain",
        "convert",
        "status",
        "history",
        "dataset",
        "cache",
        "sweep",
        "token",
    }
)
#: Options of the ``phalanx`` group itself, before the verb, and whether each takes a value.
GLOBAL_OPTIONS = {"--server": True, "--token-file": True}
#: How long the launcher waits for the forked process's ``ready`` before it runs the command itself.
HANDSHAKE_SECONDS = 10.0
#: Signals passed on to the command's process: what a terminal or a supervisor sends to a command.
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Unix socket paths are limited to about 104 bytes on some systems (108 on Linux).
MAX_SOCKET_PATH = 104
HEADER_DIGITS = 10


def package_dir() -> str:
    """The directory of the ``phalanx`` package this process imported (both sides must run the same code)."""
    import phalanx

    return str(Path(phalanx.__file__).resolve().parent)


def verb_of(argv: list[str]) -> str | None:
    """The verb of ``phalanx ARGV`` after the group's own options, or None when something else comes first."""
    position = 0
    while position < len(argv):
        arg = argv[position]
        name = arg.partition("=")[0]
        if name in GLOBAL_OPTIONS:
            position += 1 if "=" in arg or not GLOBAL_OPTIONS[name] else 2
            continue
        return None if arg.startswith("-") else arg
    return None


def state_dir_of(argv: list[str]) -> Path:
    """The state directory the command names (its last ``--state-dir``), else the default one."""
    chosen: str | None = None
    for position, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--state-dir" and position + 1 < len(argv):
            chosen = argv[position + 1]
        elif arg.startswith("--state-dir="):
            chosen = arg.partition("=")[2]
    return Path(chosen).expanduser() if chosen else default_state_dir()


def request_of(argv: list[str]) -> dict[str, Any]:
    """What the preloaded process needs to run ``argv`` as this process would."""
    mask = os.umask(0o077)
    os.umask(mask)
    return {
        "argv": argv,
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "umask": mask,
        # A signal this process ignores (a background job of a script ignores Ctrl-C) the command ignores too.
        "ignored_signals": [int(sig) for sig in FORWARDED_SIGNALS if signal.getsignal(sig) == signal.SIG_IGN],
        "executable": sys.executable,
        "package": package_dir(),
        "encoding": {
            name: [getattr(stream, "encoding", None) or "utf-8", getattr(stream, "errors", None) or "strict"]
            for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout), ("stderr", sys.stderr))
        },
    }


def forward(argv: list[str]) -> int | None:
    """Run ``phalanx ARGV`` in the preloaded process and return its exit status; None to run it here instead."""
    if os.environ.get(PRELOAD_ENV, "1").strip() == "0" or verb_of(argv) not in HANDED_OVER:
        return None
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)  # a closed standard stream cannot be passed: run here, as without a preloaded process
        path = StateLayout(state_dir_of(argv)).cli_socket
        if len(str(path).encode()) >= MAX_SOCKET_PATH or not path.exists():
            return None
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:
        return None
    with connection:
        try:
            connection.settimeout(HANDSHAKE_SECONDS)
            connection.connect(str(path))
            payload = json.dumps(request_of(argv)).encode()
            socket.send_fds(connection, [f"{len(payload):0{HEADER_DIGITS}d}\n".encode()], [0, 1, 2])
            connection.sendall(payload)
            answers = connection.makefile("rb")
            ready = json.loads(answers.readline() or b"{}")
            if ready.get("ready") is not True:
                return None
            connection.sendall(b"go\n")
        except (OSError, ValueError):
            return None  # no "go" was sent: the forked process runs nothing
        except KeyboardInterrupt:
            return 130  # Ctrl-C before the command began: it never will (the forked process sees us go)
        connection.settimeout(None)
        return _wait_for_exit(connection, answers, int(ready.get("pid") or 0))


def _wait_for_exit(connection: socket.socket, answers: Any, pid: int) -> int:
    """Forward signals until the command's exit status arrives.

    Ctrl-Z (SIGTSTP) stops the command's process too, and ``fg`` (SIGCONT) continues it: they go to its pid,
    since a stopped process reads no message.
    """

    def suspend(signum: int, _: FrameType | None) -> None:
        if pid > 0:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stop here as the shell expects; SIGCONT resumes below
        signal.signal(signal.SIGTSTP, suspend)

    def resume(signum: int, _: FrameType | None) -> None:
        if pid > 0:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)

    def forward_signal(signum: int, _: FrameType | None) -> None:
        with contextlib.suppress(OSError):  # the command has ended: its status is on the way
            connection.sendall(f"signal {signum}\n".encode())

    previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}
    for signum in FORWARDED_SIGNALS:
        if signal.getsignal(signum) != signal.SIG_IGN:
            previous[signum] = signal.signal(signum, forward_signal)
    if signal.getsignal(signal.SIGTSTP) != signal.SIG_IGN:
        previous[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, suspend)
    previous[signal.SIGCONT] = signal.signal(signal.SIGCONT, resume)
    try:
        while True:
            try:
                line = answers.readline()
            except InterruptedError:
                continue
            except OSError:
                line = b""
            if not line:
                sys.stderr.write("error: the command's process ended without an exit status\n")
                return 1
            answer = json.loads(line)
            if "exit" in answer:
                return int(answer["exit"])
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
