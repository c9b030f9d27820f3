"""The Python SDK against a Kubernetes cluster: ``phalanx.Client.kubernetes()``, the same verbs as ``Client()``.

from phalanx import Client
with Client.kubernetes(context="my-cluster", namespace="team-a") as client:
    client.submit("examples/quickstart.yaml")
    job = client.wait("quickstart")
    print(job.status.phase)

The phalanx-operator and phalanx-scheduler on the cluster run the jobs; this client only talks to the API server
(``services.kubernetes.operations``). It needs the ``kubernetes`` extra (``pip install 'phalanx[kubernetes]'``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from phalanx.adapters.kubernetes.api import KubeApi, KubeApiError, load_kubeconfig
from phalanx.entrypoints.job_verbs import JobSpec, PollingWait, spec_documents
from phalanx.services.kubernetes.operations import KubeOperations
from phalanx.services.operations import OperationError, Submitted


class KubernetesClient(PollingWait):
    """Talks to the Phalanx of one cluster: the kubeconfig's context selects it."""

    ops: KubeOperations

    def __init__(
        self,
        *,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        namespace: str | None = None,
        timeout: float = 30.0,
        poll_seconds: float = 0.5,
    ) -> None:
        """Connect (lazily: nothing is requested until a verb is called).

        Args:
            kubeconfig: the kubeconfig file (default: in-cluster service account, ``$KUBECONFIG``, then
                ``~/.kube/config``).
            context: the kubeconfig context, which selects the cluster and user (default: the current one).
            namespace: the jobs' namespace (default: the context's namespace, else ``default``).
            timeout: seconds one request may take.
            poll_seconds: how often ``wait`` looks at the job.

        Raises:
            OperationError: no usable kubeconfig, or no such context.
        """
        try:
            selected = load_kubeconfig(kubeconfig, context)
            self.api = KubeApi.from_kubeconfig(kubeconfig, context, timeout=timeout)
        except KubeApiError as error:
            raise OperationError(f"{error.message}; pass --kubeconfig FILE and --context NAME") from None
        self.kubeconfig = kubeconfig
        self.context: str = str(selected.context_name)
        self.server: str = str(selected.cluster.server)
        self.namespace: str = namespace or str(selected.namespace) or "default"
        self.poll_seconds = poll_seconds
        self.ops = KubeOperations(self.api, server=self.server, poll_seconds=poll_seconds)

    def close(self) -> None:
        """Close the connection pool."""
        self.api.close()

    def __enter__(self) -> KubernetesClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- control plane -----------------------------------------------------------------------------------

    def up(self, **_: Any) -> None:
        """There is no local control plane to start on a cluster.

        Raises:
            OperationError: always; install Phalanx on the cluster instead.
        """
        raise OperationError(
            "up is for the embedded backend; on Kubernetes: phalanx install --print | kubectl apply -f -"
        )

    def down(self) -> None:
        """There is no local control plane to stop on a cluster.

        Raises:
            OperationError: always.
        """
        raise OperationError("down is for the embedded backend; the cluster's Phalanx keeps running")

    # -- jobs ----------------------------------------------------------------------------------------------

    def submit(
        self, spec: JobSpec, *, replace_finished: bool = False, stand_ins: Mapping[str, Sequence[str]] | None = None
    ) -> list[Submitted]:
        """Validate and create the objects in a file or in mappings; nothing is created if any is invalid.

        ``stand_ins`` are refused: on a cluster every replica runs its image.
        """
        documents, source = spec_documents(spec)
        return self.ops.submit(
            documents,
            namespace=None if self.namespace == "default" else self.namespace,
            replace_finished=replace_finished,
            source=source,
            stand_ins=stand_ins,
        )

    def logs(self, name: str, replica: str | None = None) -> dict[str, str]:
        """The current log text of each replica's Pod (latest attempt)."""
        return {log.replica: log.text for log in self.ops.logs(self.namespace, name, replica)}
