"""Following a job: phase transitions as they happen, why it waits, and its replicas' logs, interleaved.

The follower works on the job's wire form (a dict) from a ``JobSource``: the control plane's local API (the
fast path of ``phalanx run``, which loads no model code) or the store directly. Waiting is a long poll on the
job's resourceVersion; while logs are shown its timeout is short, because log files are written by the
replicas, not the store. It prints through a rich console or, to a pipe, a ``PlainConsole`` (see ``output``),
and imports neither rich nor dataclasses itself: ``phalanx run`` pays for what it uses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from phalanx.entrypoints.cli.local_api import ApiError
from phalanx.entrypoints.cli.output import Writer, escape, print_replica_logs
from phalanx.entrypoints.cli.styles import STOP_FOLLOWING, phase_label, styled_phase

if TYPE_CHECKING:
    from rich.status import Status

LOG_POLL_SECONDS = 0.1
# Without logs to tail, only the job's own changes matter: a long poll may wait as long as the API allows.
PHASE_POLL_SECONDS = 30.0
ROLE_COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red")


class JobSource(Protocol):
    """Where the follower reads a job and its log files."""

    def job(self, *, after: str, wait: float) -> dict[str, Any]:
        """The job's wire form, once its resourceVersion differs from ``after`` or ``wait`` has passed."""
        ...

    def log_files(self) -> list[tuple[str, Path]]:
        """(replica, log path) of the latest attempt of each replica."""
        ...


class LogTailer:
    """Reads new complete lines from each replica's latest log file.

    While a job has at most ``MAX_KEPT_OPEN`` log files, they stay open between reads: a job deleted the
    moment it finishes (``ttlSecondsAfterFinished: 0``) takes its run directory with it, and an open file can
    still be read to its end. Beyond that many, each read opens and closes (file descriptors are limited).
    """

    MAX_KEPT_OPEN = 256

    def __init__(self) -> None:
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, bytes] = {}
        self.handles: dict[Path, BinaryIO] = {}

    def _chunk(self, path: Path, keep_open: bool) -> bytes:
        handle = self.handles.get(path)
        if handle is None:
            handle = open(path, "rb")  # noqa: SIM115 - kept open across reads, closed by close()
            if keep_open:
                self.handles[path] = handle
        try:
            handle.seek(self.offsets.get(path, 0))
            return handle.read()
        finally:
            if path not in self.handles:
                handle.close()

    def read(self, files: list[tuple[str, Path]]) -> list[tuple[str, str]]:
        """New (replica, line) pairs since the last call."""
        lines: list[tuple[str, str]] = []
        keep_open = len(files) <= self.MAX_KEPT_OPEN
        current = {path for _, path in files}
        for path in [p for p in self.handles if p not in current or not keep_open]:
            self.handles.pop(path).close()  # an earlier attempt's log, no longer followed
        for replica, path in files:
            try:
                chunk = self._chunk(path, keep_open)
            except OSError:
                continue
            self.offsets[path] = self.offsets.get(path, 0) + len(chunk)
            data = self.partial.pop(path, b"") + chunk
            *complete, rest = data.split(b"\n")
            if rest:
                self.partial[path] = rest
            lines.extend((replica, line.decode(errors="replace")) for line in complete)
        return lines

    def close(self) -> None:
        """Close the files kept open."""
        for handle in self.handles.values():
            handle.close()
        self.handles.clear()


def _timestamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def follow(
    source: JobSource,
    console: Writer,
    *,
    show_logs: bool = True,
    show_phases: bool = True,
    until_finished: bool = True,
    note_silent: bool = False,
) -> dict[str, Any]:
    """Print phase changes, waiting reasons and logs until the job finishes (or is halted); return it.

    With ``note_silent`` (`phalanx logs -f`), a replica that printed nothing is named in a note on stderr at the
    end, as `phalanx logs` names it, instead of being left out.
    """
    started = time.monotonic()
    printed: set[str] = set()
    started_wall = time.time()
    seen: set[tuple[str, str]] = set()
    said_waiting = ""
    tailer = LogTailer()
    colours: dict[str, str] = {}
    status_line: Status | None = None
    if console.is_terminal and show_phases and hasattr(console, "status"):
        status_line = console.status("", spinner="dots")
        status_line.start()
    version = ""
    # The live status line shows the time passed, so it wants answers as often as the log tail does.
    poll_seconds = LOG_POLL_SECONDS if show_logs or status_line is not None else PHASE_POLL_SECONDS
    try:
        while True:
            job = source.job(after=version, wait=poll_seconds if version else 0.0)
            version = job["metadata"].get("resourceVersion", "")
            status = job.get("status", {})
            phase = status.get("phase", "Pending")
            if show_logs:
                for replica, line in tailer.read(source.log_files()):
                    printed.add(replica)
                    colour = colours.setdefault(replica, ROLE_COLOURS[len(colours) % len(ROLE_COLOURS)])
                    console.print(f"[{colour}]{replica:>10}[/] | {escape(line)}", highlight=False)
            if show_phases:
                # Every condition records when its phase was last entered; a phase passed through between
                # two looks is still printed, in order.
                conditions = sorted(status.get("conditions", []), key=lambda c: _timestamp(c["lastTransitionTime"]))
                for condition in conditions:
                    key = (condition["type"], condition["lastTransitionTime"])
                    if key in seen:
                        continue
                    seen.add(key)
                    elapsed = max(0.0, _timestamp(condition["lastTransitionTime"]) - started_wall)
                    detail = condition.get("message") or condition.get("reason", "")
                    console.print(f"[dim]{elapsed:7.2f}s[/]  {phase_label(condition['type'])} {escape(detail)}")
                message = status.get("message", "")
                if phase == "Queued" and status.get("reason") == "Waiting" and message != said_waiting:
                    # Why it waits is not a phase change; say it whenever the scheduler's sentence changes.
                    said_waiting = message
                    elapsed = time.monotonic() - started
                    console.print(f"[dim]{elapsed:7.2f}s[/]  {phase_label('Queued')} {escape(message)}")
            if status_line is not None:
                status_line.update(f"{styled_phase(phase)}  {time.monotonic() - started:.1f}s")
            if phase in STOP_FOLLOWING or not until_finished:
                if show_logs:
                    files = source.log_files()
                    for replica, line in tailer.read(files):
                        printed.add(replica)
                        console.print(f"{replica:>10} | {escape(line)}", highlight=False)
                    if note_silent:
                        print_replica_logs([(replica, "", True) for replica, _ in files if replica not in printed])
                return job
    finally:
        tailer.close()
        if status_line is not None:
            status_line.stop()


class ApiConnectionLostError(Exception):
    """The local API's connection failed while following (the control plane stopped or stopped answering).

    A separate type, so that a failure to *print* (a closed pipe, also an OSError) is not mistaken for it.
    """


class ApiJobSource:
    """A job followed through the control plane's local API.

    ``when_gone`` answers for a job the API no longer finds (404): given the last version seen (None if none
    was), it returns the job's final form, e.g. from its events (a job with ``ttlSecondsAfterFinished: 0`` is
    deleted the moment it finishes, possibly before the follower saw it finish), or raises. Without it the
    ``ApiError`` propagates.
    """

    def __init__(
        self,
        api: Any,
        namespace: str,
        name: str,
        *,
        when_gone: Callable[[dict[str, Any] | None], dict[str, Any]] | None = None,
    ) -> None:
        self.api = api  # LocalApi; typed loosely so this module stays free of the client's imports
        self.namespace = namespace
        self.name = name
        self.when_gone = when_gone
        self.last: dict[str, Any] | None = None
        self.files: list[tuple[str, Path]] = []

    def job(self, *, after: str, wait: float) -> dict[str, Any]:
        """See JobSource."""
        try:
            self.last = dict(self.api.job(self.namespace, self.name, after=after, wait=wait))
        except OSError as err:  # ConnectionError, a timeout: the socket's, not the console's
            raise ApiConnectionLostError(str(err) or type(err).__name__) from err
        except ApiError as err:
            if err.status != 404 or self.when_gone is None:
                raise
            return self.when_gone(self.last)
        return self.last

    def log_files(self) -> list[tuple[str, Path]]:
        """See JobSource; a job that is gone keeps the files it had (the tailer may hold them open)."""
        try:
            self.files = list(self.api.log_files(self.namespace, self.name))
        except OSError as err:
            raise ApiConnectionLostError(str(err) or type(err).__name__) from err
        except ApiError as err:
            if err.status != 404 or self.when_gone is None:
                raise
        return self.files


class StoreJobSource:
    """A job followed by reading the store directly (when no control plane serves the API)."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client  # phalanx.entrypoints.client.Client
        self.name = name

    def job(self, *, after: str, wait: float) -> dict[str, Any]:
        """See JobSource."""
        deadline = time.monotonic() + wait
        while True:
            seq = self.client.store.latest_seq()
            job = self.client.get(self.name)
            remaining = deadline - time.monotonic()
            if job.metadata.resource_version != after or remaining <= 0:
                return dict(job.to_dict())
            self.client.store.wait_for_change(seq, remaining)

    def log_files(self) -> list[tuple[str, Path]]:
        """See JobSource."""
        return list(self.client.ops.log_files(self.client.namespace, self.name))
