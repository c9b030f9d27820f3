"""The SDK's verbs on one job, shared by ``phalanx.Client`` (embedded) and ``KubernetesClient``.

Each verb is one call to the one ``services.operations.Operations`` (over the embedded or the Kubernetes backend,
as ``services.operations.JobOperations``), which keeps the two clients' behaviour the same by construction.
"""

from __future__ import annotations

import builtins
import time
from pathlib import Path
from typing import Any

from phalanx.model.datasets import Dataset, DatasetPhase
from phalanx.model.jobs import STOPPED_PHASES, Phase, TrainingJob
from phalanx.model.loading import read_documents
from phalanx.model.queues import Queue
from phalanx.services.dataset_views import DatasetDescription, NodeCacheView
from phalanx.services.operations import JobDescription, JobOperations
from phalanx.services.queue_views import QueueDescription, QueueView

JobSpec = str | Path | dict[str, Any] | list[dict[str, Any]]


def spec_documents(spec: JobSpec) -> tuple[list[dict[str, Any]], str | None]:
    """What ``submit`` was given as documents, and the file they came from (None for mappings)."""
    if isinstance(spec, str | Path):
        path = Path(spec)
        return read_documents(path), str(path)
    return (spec if isinstance(spec, list) else [spec]), None


class JobVerbs:
    """get, list, describe, explain, halt, resume and delete, in the client's namespace; and the Queue verbs.

    Queues are cluster-scoped: the queue verbs do not depend on the client's namespace. They are created and
    replaced by ``submit`` (a ``kind: Queue`` document).
    """

    ops: JobOperations
    namespace: str

    def wait(self, name: str, *, until: set[Phase] | None = None, timeout: float = 600.0) -> TrainingJob:
        """Block until the job reaches one of ``until`` (default: finished or halted) and return it.

        Between looks it waits as the client can be woken (``_change_mark`` and ``_pause``).

        Raises:
            TimeoutError: it did not within ``timeout`` seconds (``phalanx.entrypoints.client.WaitTimeoutError``).
        """
        from phalanx.entrypoints.client import WaitTimeoutError

        targets = until or set(STOPPED_PHASES)
        deadline = time.monotonic() + timeout
        while True:
            mark = self._change_mark()
            job = self.get(name)
            if Phase(job.status.phase) in targets:
                return job
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeoutError(f"job {name} is still {job.status.phase} after {timeout:.0f}s")
            self._pause(mark, remaining)

    def _change_mark(self) -> int | None:
        """Where the client's changes stand before a look (None: it cannot tell; ``_pause`` then polls)."""
        return None

    def _pause(self, mark: int | None, seconds: float) -> None:
        """Wait at most ``seconds`` for a change after ``mark``."""
        raise NotImplementedError

    def get(self, name: str) -> TrainingJob:
        """One job."""
        return self.ops.get_job(self.namespace, name)

    def list(self) -> list[TrainingJob]:
        """The namespace's jobs."""
        return self.ops.list_jobs(self.namespace)

    def describe(self, name: str) -> JobDescription:
        """A job with its replicas (Pods on Kubernetes) and events."""
        return self.ops.describe(self.namespace, name)

    def explain(self, name: str) -> str:
        """Why the job is where it is, in one sentence."""
        return self.ops.explain(self.namespace, name)

    def halt(self, name: str) -> TrainingJob:
        """Stop every replica, keep outputs; the job goes Halting → Halted."""
        return self.ops.set_suspended(self.namespace, name, True)

    def resume(self, name: str) -> TrainingJob:
        """Queue a halted job again."""
        return self.ops.set_suspended(self.namespace, name, False)

    def delete(self, name: str) -> None:
        """Stop the job's replicas and remove it."""
        self.ops.delete_job(self.namespace, name)

    def queues(self) -> builtins.list[QueueView]:
        """Every Queue with what its jobs hold now, its admitted and its pending jobs."""
        return self.ops.queue_views()

    def get_queue(self, name: str) -> Queue:
        """One Queue (its ``status`` as the scheduler last wrote it)."""
        return self.ops.get_queue(name)

    def describe_queue(self, name: str) -> QueueDescription:
        """A Queue with its usage, admitted and pending jobs, and the other queues of its cohort."""
        return self.ops.describe_queue(name)

    def delete_queue(self, name: str) -> QueueView:
        """Delete a Queue; its admitted jobs keep running, and its jobs are no longer limited by a quota."""
        return self.ops.delete_queue(name)

    def datasets(self) -> builtins.list[Dataset]:
        """The namespace's Datasets (create them with ``submit``)."""
        return self.ops.list_datasets(self.namespace)

    def dataset(self, name: str) -> Dataset:
        """One Dataset, with its status (phase, version, size, files, lineage, nodes caching it)."""
        return self.ops.get_dataset(self.namespace, name)

    def wait_dataset(self, name: str, *, timeout: float = 600.0, poll_seconds: float = 0.2) -> Dataset:
        """Block until the Dataset's current spec is materialised (Ready) or Failed, and return it.

        A Dataset just given a new spec still shows the old spec's outcome until the control plane takes the new
        one up: that is not waited for (``Dataset.settled``).

        Raises:
            TimeoutError: it was neither within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            dataset = self.dataset(name)
            if dataset.settled:
                return dataset
            if time.monotonic() >= deadline:
                status = dataset.status
                if status.phase not in (DatasetPhase.READY, DatasetPhase.FAILED):
                    raise TimeoutError(f"dataset {name} is still {status.phase} after {timeout:g} s")
                raise TimeoutError(
                    f"dataset {name}'s new spec (generation {dataset.metadata.generation}) was not taken up within "
                    f"{timeout:g} s; its status ({status.phase}) is for generation {status.observed_generation}"
                )
            time.sleep(poll_seconds)

    def describe_dataset(self, name: str) -> DatasetDescription:
        """A Dataset, the jobs that read it and its events."""
        return self.ops.describe_dataset(self.namespace, name)

    def delete_dataset(self, name: str) -> Dataset:
        """Delete a Dataset that no unfinished job reads."""
        return self.ops.delete_dataset(self.namespace, name)

    def caches(self, node: str | None = None) -> builtins.list[NodeCacheView]:
        """Every node's dataset cache (or one node's): entries, pins and counters."""
        return self.ops.cache_views(node)

    def evict(
        self, *, key: str | None = None, dataset: str | None = None, node: str | None = None
    ) -> builtins.list[str]:
        """Evict an unpinned cache entry, or every entry of a Dataset (on Kubernetes, the node agents do)."""
        return self.ops.evict(key=key, dataset=dataset, node=node)


class PollingWait(JobVerbs):
    """``wait`` by asking for the job every ``poll_seconds``: the clients with no store to be woken by."""

    poll_seconds: float

    def _pause(self, mark: int | None, seconds: float) -> None:
        time.sleep(min(seconds, self.poll_seconds))
