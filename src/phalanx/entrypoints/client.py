"""The Python SDK: ``phalanx.Client`` with the CLI's verbs, for notebooks and scripts.

from phalanx import Client
client = Client()
client.up()
job = client.submit("examples/quickstart.yaml", replace_finished=True)[0]
final = client.wait(job.name)
print(final.status.phase, final.status.metrics)
run = client.wait_for(PipelineRun, "nightly", {"Succeeded", "Failed"}, timeout=3600)

``Client()`` is the embedded runtime of a state directory; ``Client.kubernetes(context=...)`` is a cluster, and
``Client(server=URL, token=...)`` (``Client.remote``) a Phalanx server (``entrypoints.remote_client``), with the
same verbs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from phalanx.adapters.store import SqliteStore
from phalanx.entrypoints.job_verbs import JobSpec, JobVerbs, spec_documents
from phalanx.model.datasets import Dataset
from phalanx.model.jobs import TrainingJob
from phalanx.model.pipelines import PipelineRun
from phalanx.model.sweeps import Sweep
from phalanx.services.embedded.daemon import LeaderInfo, start_control_plane, stop_control_plane
from phalanx.services.embedded.layout import StateLayout, default_state_dir
from phalanx.services.embedded.operations import EmbeddedOperations
from phalanx.services.operations import OperationError, Submitted

if TYPE_CHECKING:
    from phalanx.entrypoints.kubernetes.client import KubernetesClient
    from phalanx.entrypoints.remote_client import RemoteClient

KUBERNETES_EXTRA_HINT = "the kubernetes backend needs lightkube: pip install 'phalanx[kubernetes]'"
REMOTE_EXTRA_HINT = "talking to a Phalanx server needs httpx: pip install 'phalanx[remote]'"

Awaited = TypeVar("Awaited", TrainingJob, Sweep, PipelineRun, Dataset)
"""The kinds with a ``status.phase`` that ``Client.wait_for`` waits on."""


class WaitTimeoutError(TimeoutError):
    """The object did not reach the awaited state in time."""


@dataclass
class Client(JobVerbs):
    """Talks to the embedded runtime of one state directory; ``Client(server=URL, token=...)`` to a server."""

    state_dir: Path | None = None
    namespace: str = "default"
    ops: EmbeddedOperations = field(init=False, repr=False)
    server: str | None = None
    token: str | None = field(default=None, repr=False)

    def __new__(cls, *args: Any, server: str | None = None, token: str | None = None, **kwargs: Any) -> Any:
        """``Client(server=URL, token=...)`` is ``Client.remote(...)``, a client of that server; else this class."""
        if server is not None:
            if args or set(kwargs) - {"namespace"}:
                raise OperationError("Client(server=...) takes token= and namespace= only: the rest is the server's")
            return cls.remote(server, token=token, namespace=kwargs.get("namespace", "default"))
        return super().__new__(cls)

    def __post_init__(self) -> None:
        if self.token is not None:
            raise OperationError("token= is for a server: give server=URL too (Client(server=URL, token=...))")
        self.layout = StateLayout(Path(self.state_dir) if self.state_dir else default_state_dir())
        self.layout.ensure()
        self.store = SqliteStore(self.layout.database)
        self.ops = EmbeddedOperations(self.store, self.layout)

    @staticmethod
    def kubernetes(
        *,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        namespace: str | None = None,
        timeout: float = 30.0,
    ) -> KubernetesClient:
        """A client for the Phalanx of a Kubernetes cluster, with the same verbs (``up`` and ``down`` excepted).

        Args:
            kubeconfig: the kubeconfig file (default: in-cluster service account, ``$KUBECONFIG``, then
                ``~/.kube/config``).
            context: the kubeconfig context, which selects the cluster (default: the current one).
            namespace: the jobs' namespace (default: the context's, else ``default``).
            timeout: seconds one request may take.

        Raises:
            OperationError: lightkube is not installed, or the kubeconfig or context cannot be used.
        """
        try:
            from phalanx.entrypoints.kubernetes.client import KubernetesClient
        except ModuleNotFoundError as error:
            if error.name and error.name.split(".")[0] in ("lightkube", "httpx"):
                raise OperationError(KUBERNETES_EXTRA_HINT) from None
            raise
        return KubernetesClient(kubeconfig=kubeconfig, context=context, namespace=namespace, timeout=timeout)

    @staticmethod
    def remote(
        server: str | None = None, *, token: str | None = None, namespace: str = "default", timeout: float = 30.0
    ) -> RemoteClient:
        """A client for a Phalanx server (``phalanx server``), with the same verbs (``up`` and ``down`` excepted).

        Args:
            server: its URL, e.g. ``http://127.0.0.1:8080`` (default: ``$PHALANX_SERVER``, then the config file's).
            token: the bearer token (default: ``$PHALANX_TOKEN``, then the config file's; ``remote_settings``).
            namespace: the jobs' namespace.
            timeout: seconds one request may take.

        Raises:
            OperationError: httpx is not installed, no server is named, or the URL or config cannot be used.
        """
        try:
            from phalanx.entrypoints.remote_client import RemoteClient
        except ModuleNotFoundError as error:
            if error.name == "httpx":
                raise OperationError(REMOTE_EXTRA_HINT) from None
            raise
        return RemoteClient(server, token=token, namespace=namespace, timeout=timeout)

    def close(self) -> None:
        """Close the store connection."""
        self.store.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- control plane -----------------------------------------------------------------------------------

    def up(self, *, inventory: Path | None = None) -> LeaderInfo:
        """Start the local control plane in the background, or reuse the running one."""
        leader, _ = start_control_plane(self.layout, inventory=inventory)
        return leader

    def down(self) -> LeaderInfo | None:
        """Stop the local control plane (running replicas keep running and are adopted on the next `up`)."""
        return stop_control_plane(self.layout)

    # -- jobs ----------------------------------------------------------------------------------------------

    def submit(
        self, spec: JobSpec, *, replace_finished: bool = False, stand_ins: Mapping[str, Sequence[str]] | None = None
    ) -> list[Submitted]:
        """Validate and create the objects in a file or in mappings; nothing is created if any is invalid.

        Args:
            spec: a YAML/JSON file, or one or more mappings.
            replace_finished: a job of the same name that finished (Succeeded or Failed) is replaced, as
                ``phalanx run`` does; otherwise its name is refused.
            stand_ins: image -> the words of a local program that plays it, for replicas whose image the embedded
                runtime cannot run (``phalanx run --stand-in``; docs/kubeflow.md).

        Raises:
            SpecError: an invalid document (nothing is created).
            JobExistsError: a job of that name exists (and is active, or replacing was not asked for); an
                ``OperationError``, importable as ``phalanx.JobExistsError``.
        """
        documents, source = spec_documents(spec)
        return self.ops.submit(
            documents,
            submit_dir=Path(os.getcwd()),
            namespace=None if self.namespace == "default" else self.namespace,
            replace_finished=replace_finished,
            source=source,
            stand_ins=stand_ins,
        )

    def logs(self, name: str, replica: str | None = None) -> dict[str, str]:
        """The current log text of each replica (latest attempt)."""
        return {
            short: path.read_text(errors="replace") if path.exists() else ""
            for short, path in self.ops.log_files(self.namespace, name, replica)
        }

    def wait_for(self, kind: type[Awaited], name: str, phases: Collection[str], *, timeout: float = 600.0) -> Awaited:
        """Block until the object (of the client's namespace) is in one of ``phases`` and return it as read then.

        Woken by the store's changes (no fixed polling); an object not there yet is waited for too.

        Raises:
            WaitTimeoutError: it was not within ``timeout`` seconds (the message names it and its last phase).
        """
        wanted = {str(phase) for phase in phases}
        noun = "job" if kind is TrainingJob else kind.__name__.lower()
        deadline = time.monotonic() + timeout
        while True:
            seq = self.store.latest_seq()
            found = self.store.try_get(kind, self.namespace, name)
            if found is not None and str(found.status.phase) in wanted:
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                where = f"is still {found.status.phase}" if found is not None else "does not exist"
                awaited = ", ".join(sorted(wanted))
                what = f"{noun} {self.namespace}/{name}"
                raise WaitTimeoutError(f"{what} {where} after {timeout:g}s (waited for {awaited})")
            self.store.wait_for_change(seq, min(remaining, 1.0))

    def _change_mark(self) -> int | None:
        return self.store.latest_seq()

    def _pause(self, mark: int | None, seconds: float) -> None:
        # ``wait`` is woken by the store's next change, not by a fixed poll.
        self.store.wait_for_change(mark or 0, min(seconds, 1.0))
