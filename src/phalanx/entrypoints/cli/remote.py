"""The CLI against a Phalanx server (``phalanx --server URL VERB``): the session, and what `run` and `logs` do there.

The verbs are the commands of jobs.py and the other noun modules, over ``entrypoints.remote_client``; this module
holds what differs: connecting (a sentence, not a traceback, for a bad URL, a token file others may read, a server
that does not answer, a token it refuses), following a job through the server (``follow.follow`` with a
``ServerJobSource``: each replica's log mirrored from the server into a local file the follower tails, as on a
cluster), and logs (``logs -f --replica`` streams the server's ``log?follow=true``).
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.entrypoints.cli.follow import follow
from phalanx.entrypoints.cli.output import escape, fail, operation_errors, print_replica_logs, print_submitted, writer
from phalanx.entrypoints.cli.styles import STOP_FOLLOWING

if TYPE_CHECKING:
    from phalanx.entrypoints.remote_client import RemoteClient
    from phalanx.entrypoints.remote_settings import ServerSettings

MIN_POLL_SECONDS = 0.5  # how often a follower asks the server for the job when nothing changed


@contextmanager
def remote_session(settings: ServerSettings, namespace: str | None) -> Iterator[RemoteClient]:
    """A server client for one command; every expected error becomes a message on stderr and an exit code."""
    from phalanx.services.operations import OperationError

    try:
        from phalanx.entrypoints.remote_client import RemoteClient
    except ModuleNotFoundError as error:
        if error.name == "httpx":
            fail("--server needs httpx: pip install 'phalanx[remote]'")
        raise
    try:
        client = RemoteClient(
            settings.server, token=settings.token, namespace=namespace or "default", token_source=settings.token_source
        )
    except OperationError as err:
        fail(str(err), 2)
    with client, operation_errors():
        yield client


@dataclass
class ServerJobSource:
    """A job followed through the server (``follow.JobSource``); replica logs mirrored into ``directory``."""

    client: RemoteClient
    name: str
    directory: Path
    min_poll: float = MIN_POLL_SECONDS
    _sizes: dict[str, int] = field(default_factory=dict)
    _replicas: list[str] = field(default_factory=list)  # ROLE-INDEX of each replica, by the job last read

    def job(self, *, after: str, wait: float) -> dict[str, Any]:
        """See JobSource: the job once its resourceVersion differs from ``after``, or after ``wait``."""
        deadline = time.monotonic() + (max(wait, self.min_poll) if after else 0.0)
        while True:
            job = self.client.get(self.name)
            self._replicas = [f"{role}-{i}" for role, spec in job.spec.replicas.items() for i in range(spec.count)]
            obj = job.to_dict()
            remaining = deadline - time.monotonic()
            if (obj.get("metadata") or {}).get("resourceVersion") != after or remaining <= 0:
                return obj
            time.sleep(min(self.min_poll, remaining))

    def log_files(self) -> list[tuple[str, Path]]:
        """See JobSource: each replica's log as the server has it, written to a local file when it grew."""
        files = []
        for short in self._replicas:  # one request a replica: the job was just read (``job``)
            text = self.client.backend.log_text(self.client.namespace, self.name, short)
            path = self.directory / f"{short}.log"
            data = text.encode()
            if len(data) != self._sizes.get(short, -1):
                path.write_bytes(data)
                self._sizes[short] = len(data)
            files.append((short, path))
        return files


def follow_on_server(client: RemoteClient, name: str, *, show_logs: bool, show_phases: bool = True) -> Any:
    """Follow a job until it finishes or is halted: phases, waiting reasons and (if asked) logs; its object."""
    with tempfile.TemporaryDirectory(prefix="phalanx-logs-") as directory:
        source = ServerJobSource(client, name, Path(directory), min_poll=client.poll_seconds)
        return follow(source, writer(), show_logs=show_logs, show_phases=show_phases, note_silent=not show_phases)


def run_on_server(client: RemoteClient, file: Path, *, detach: bool, logs: bool) -> int:
    """`phalanx run` against a server: submit, follow; the exit code (0 succeeded, 1 failed, 3 halted)."""
    from phalanx.entrypoints.cli.running import summary

    console = writer()
    console.print(f"[dim]{escape(f'server {client.server}; namespace {client.namespace}')}[/]")
    submitted = client.submit(file, replace_finished=True)
    print_submitted(submitted)
    jobs = [s for s in submitted if s.kind == "TrainingJob"]
    if detach:
        return 0
    if not jobs:  # a Sweep or PipelineRun is followed as on the other backends
        from phalanx.entrypoints.cli.follow_flows import flow_made, follow_flow

        flow = flow_made([(s.kind, s.namespace, s.name) for s in submitted], console)
        return 0 if flow is None else follow_flow(client.ops, *flow, console)
    final = follow_on_server(client, jobs[0].name, show_logs=logs)
    summary(final, console)
    phase = (final.get("status") or {}).get("phase")
    return 0 if phase == "Succeeded" else 3 if phase == "Halted" else 1


def print_logs(client: RemoteClient, job: str, replica: str | None, *, follow_logs: bool) -> None:
    """`phalanx logs` against a server: each replica's log, or one followed as the server streams it."""
    if follow_logs and replica is None:
        client.get(job)  # a missing job is an error, not an empty follow
        follow_on_server(client, job, show_logs=True, show_phases=False)
        return
    if follow_logs:
        assert replica is not None
        client.logs(job, replica)  # a replica the job does not have is named, with the ones it has
        for chunk in client.follow_log(job, replica):  # the replica's own bytes, as they come: no markup
            sys.stdout.write(chunk)
            sys.stdout.flush()
        return
    logs = client.logs(job, replica)
    phase = str(client.get(job).status.phase)
    ended = phase in STOP_FOLLOWING
    print_replica_logs([(short, text, ended) for short, text in logs.items()], job=job, phase=phase)
