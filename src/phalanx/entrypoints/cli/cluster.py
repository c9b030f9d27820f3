"""The CLI's kubernetes backend: a session on a cluster, and what `run` and `logs` do there.

The verbs themselves are the commands of jobs.py and the other noun modules; this module holds what differs on
a cluster: connecting (with a message instead of a traceback for every expected failure), following a job
through the API server, and Pod logs. Following reuses the embedded runtime's follower (``follow.follow``) with
a ``ClusterJobSource``: the job comes from the API server, and each replica's Pod log is mirrored into a local
file the follower tails.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.entrypoints.cli.backends import BackendChoice
from phalanx.entrypoints.cli.follow import follow
from phalanx.entrypoints.cli.output import (
    escape,
    fail,
    operation_errors,
    print_replica_logs,
    print_submitted,
    writer,
)
from phalanx.entrypoints.cli.styles import STOP_FOLLOWING

if TYPE_CHECKING:
    from phalanx.entrypoints.kubernetes.client import KubernetesClient
    from phalanx.services.kubernetes.operations import KubeOperations

MIN_POLL_SECONDS = 0.5  # how often a follower asks the API server for the job when nothing changed
LOG_FETCH_SECONDS = 1.0  # how often a running Pod's log is fetched again, at most
FINISHED_POD_PHASES = frozenset({"Succeeded", "Failed"})


def connect(choice: BackendChoice, namespace: str | None) -> KubernetesClient:
    """A client for the cluster the choice selects.

    Raises:
        OperationError: lightkube is missing, or the kubeconfig or context cannot be used.
    """
    from phalanx.entrypoints.client import Client

    return Client.kubernetes(kubeconfig=choice.kubeconfig, context=choice.context, namespace=namespace)


@contextmanager
def cluster_session(choice: BackendChoice, namespace: str | None) -> Iterator[KubernetesClient]:
    """A cluster client for one command; every expected error becomes a message on stderr and an exit code."""
    from phalanx.services.operations import OperationError

    try:
        client = connect(choice, namespace)
    except OperationError as err:
        fail(str(err))
    with client, operation_errors():
        yield client


#: How many fetch periods a Pod whose log could not be read waits before it is asked again.
_RETRY_FACTOR = 3


@dataclass
class ClusterJobSource:
    """A job followed through the API server (``follow.JobSource``); Pod logs mirrored into ``directory``."""

    ops: KubeOperations
    namespace: str
    name: str
    directory: Path
    min_poll: float = MIN_POLL_SECONDS
    uid: str | None = None
    log_every: float = LOG_FETCH_SECONDS
    _complete: set[str] = field(default_factory=set)  # pods whose final log was mirrored
    _sizes: dict[Path, int] = field(default_factory=dict)
    _warned: bool = False
    _fetched: dict[str, float] = field(default_factory=dict)  # pod uid -> when its log was last fetched

    def job(self, *, after: str, wait: float) -> dict[str, Any]:
        """See JobSource: the job once its resourceVersion differs from ``after``, or after ``wait``."""
        deadline = time.monotonic() + (max(wait, self.min_poll) if after else 0.0)
        while True:
            obj = self.ops.job_object(self.namespace, self.name)
            meta = obj.get("metadata") or {}
            if self.uid is None:
                self.uid = meta.get("uid")
            remaining = deadline - time.monotonic()
            if meta.get("resourceVersion") != after or remaining <= 0:
                return obj
            time.sleep(min(self.min_poll, remaining))

    def log_files(self) -> list[tuple[str, Path]]:
        """See JobSource: each replica's Pod log, fetched and written to a local file per Pod and attempt."""
        files = []
        pods = self.ops.job_pods(self.namespace, self.name, self.uid)
        now = time.monotonic()
        every = self.log_every * max(1.0, len(pods) / 10)
        for pod in pods:
            meta = pod["metadata"]
            pod_name = str(meta.get("name"))
            short = pod_name.removeprefix(f"{self.name}-")
            attempt = (meta.get("labels") or {}).get("phalanx.dev/attempt", "0")
            path = self.directory / f"{pod_name}-a{attempt}.log"
            key = f"{meta.get('uid')}"
            phase = str((pod.get("status") or {}).get("phase") or "Pending")
            # A running Pod's whole log is fetched again at most every `every` seconds (at most about 10 requests
            # a second for a large job); a finished Pod's once more, at once, then never.
            if key not in self._complete and (
                phase in FINISHED_POD_PHASES or now - self._fetched.get(key, -math.inf) >= every
            ):
                self._fetched[key] = now
                log = self.ops.pod_log(pod, short)
                if log.error:
                    if not self._warned:  # once: on a cluster that serves no logs, every Pod would say the same
                        self._warned = True
                        writer(stderr=True).print(f"[dim]note: {escape(log.error)}; will try again[/]")
                    if phase in FINISHED_POD_PHASES:
                        self._complete.add(key)  # its last chance: a finished Pod's log is asked for once more
                    else:
                        # A kubelet that did not answer may answer later (a restart, a log not written yet):
                        # asked again, less often, so the lines are not lost for good.
                        self._fetched[key] = now + self.log_every * _RETRY_FACTOR
                    continue
                data = log.text.encode()
                if len(data) != self._sizes.get(path, -1):
                    path.write_bytes(data)
                    self._sizes[path] = len(data)
                if phase in FINISHED_POD_PHASES:
                    self._complete.add(key)
            files.append((short, path))
        return files


def follow_on_cluster(
    client: KubernetesClient, name: str, *, show_logs: bool, show_phases: bool = True, note_silent: bool = False
) -> Any:
    """Follow a job until it finishes or is halted: phases, waiting reasons and (if asked) logs; return its object."""
    with tempfile.TemporaryDirectory(prefix="phalanx-logs-") as directory:
        source = ClusterJobSource(client.ops, client.namespace, name, Path(directory), min_poll=client.poll_seconds)
        return follow(source, writer(), show_logs=show_logs, show_phases=show_phases, note_silent=note_silent)


def run_on_cluster(
    client: KubernetesClient,
    file: Path,
    *,
    detach: bool,
    logs: bool,
    stand_ins: dict[str, list[str]] | None = None,
) -> int:
    """`phalanx run` on a cluster: validate, submit, follow; the exit code (0 succeeded, 1 failed, 3 halted)."""
    from phalanx.entrypoints.cli.running import summary

    console = writer()
    where = escape(f"cluster {client.server} (context {client.context}); namespace {client.namespace}")
    console.print(f"[dim]{where}[/]")
    submitted = client.submit(file, replace_finished=True, stand_ins=stand_ins)
    jobs = [s for s in submitted if s.kind == "TrainingJob"]
    print_submitted(submitted)
    if detach:
        return 0
    if not jobs:
        from phalanx.entrypoints.cli.follow_flows import flow_made, follow_flow

        flow = flow_made([(s.kind, s.namespace, s.name) for s in submitted], console)
        if flow is None:
            return 0
        return follow_flow(client.ops, *flow, console)
    final = follow_on_cluster(client, jobs[0].name, show_logs=logs)
    summary(final, console)
    phase = (final.get("status") or {}).get("phase")
    return 0 if phase == "Succeeded" else 3 if phase == "Halted" else 1


def print_logs(client: KubernetesClient, job: str, replica: str | None, *, follow_logs: bool) -> int:
    """`phalanx logs` on a cluster; 1 when a log could not be read (the others are printed)."""
    if follow_logs:
        client.ops.get_job(client.namespace, job)  # a missing job is an error, not an empty follow
        if replica is None:
            follow_on_cluster(client, job, show_logs=True, show_phases=False, note_silent=True)
            return 0
        return _follow_one(client, job, replica)
    logs = client.ops.logs(client.namespace, job, replica)
    for log in logs:
        if log.error:
            writer(stderr=True).print(f"[bold red]error:[/] {escape(log.error)}")
    readable = [(log.replica, log.text, log.phase in FINISHED_POD_PHASES) for log in logs if not log.error]
    phase = "" if logs else str(client.ops.get_job(client.namespace, job).status.phase)
    print_replica_logs(readable, prefix=len(logs) > 1, job=job if not logs else "", phase=phase)
    return 1 if any(log.error for log in logs) else 0


def _follow_one(client: KubernetesClient, job: str, replica: str) -> int:
    """`logs -f --replica`: new lines of one replica until the job finishes."""
    from phalanx.entrypoints.cli.follow import LogTailer

    tailer = LogTailer()
    console = writer()
    with tempfile.TemporaryDirectory(prefix="phalanx-logs-") as directory:
        source = ClusterJobSource(client.ops, client.namespace, job, Path(directory), min_poll=client.poll_seconds)
        version, said = "", False
        while True:
            obj = source.job(after=version, wait=client.poll_seconds)
            version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            files = [(short, path) for short, path in source.log_files() if replica in (short, f"{job}-{short}")]
            for _, line in tailer.read(files):
                said = True
                console.print(escape(line), highlight=False)
            if (obj.get("status") or {}).get("phase") in STOP_FOLLOWING:
                if not said:  # named, not left out, as `logs` without -f does
                    print_replica_logs([(replica, "", True)])
                return 0
