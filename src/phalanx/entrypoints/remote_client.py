"""The Python SDK against a Phalanx server: ``phalanx.Client.remote(server=..., token=...)``, the same verbs.

from phalanx import Client
with Client.remote(server="http://127.0.0.1:8080", token=token, namespace="ml") as client:
    client.submit("examples/quickstart.yaml")
    print(client.wait("quickstart").status.phase)

Every verb is the one ``Operations`` over ``services.remote.HttpBackend``: the server validates, authorizes and
runs. Without ``token``, the token comes from ``$PHALANX_TOKEN`` or the config file (``remote_settings``). It needs
httpx (the ``remote`` extra). ``up`` and ``down`` are the local control plane's: refused with a sentence.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from phalanx.adapters.rest.client import RestClient, ServerUrlError
from phalanx.entrypoints.job_verbs import JobSpec, PollingWait, spec_documents
from phalanx.entrypoints.remote_settings import SettingsError, environment, server_settings
from phalanx.model.names import check_dns_label
from phalanx.services.operations import OperationError, Submitted, no_replica_logs
from phalanx.services.remote.operations import HttpBackend, RemoteOperations

LOCAL_ONLY = "is the local control plane's; the server at {server} runs its own (its owner starts and stops it)"


class RemoteClient(PollingWait):
    """Talks to one Phalanx server with one token."""

    ops: RemoteOperations

    def __init__(
        self,
        server: str | None = None,
        *,
        token: str | None = None,
        namespace: str = "default",
        timeout: float = 30.0,
        poll_seconds: float = 0.5,
        transport: Any = None,
        token_source: str | None = None,
    ) -> None:
        """Prepare the connection (nothing is sent until a verb is called).

        Args:
            server: the server's URL (default: ``$PHALANX_SERVER``, then the config file's ``server``).
            token: the bearer token (default: ``$PHALANX_TOKEN``, then the config file's ``token``).
            namespace: the jobs' namespace.
            timeout: seconds one request may take.
            poll_seconds: how often ``wait`` asks for the job.
            transport: an httpx transport (tests: the app in process); default: the network.
            token_source: where ``token`` came from, for the sentence when the server refuses it (the CLI's
                ``--token-file F``); default: the client was given it.

        Raises:
            OperationError: no server named anywhere, a bad URL or namespace, or a config file that cannot be used.
        """
        try:
            check_dns_label(namespace, "namespace")
            settings = server_settings(environment(), server=server, token=token)
            if settings is None:
                raise OperationError("no server named: pass server=URL (or set $PHALANX_SERVER)")
            self.rest = RestClient(settings.server, settings.token, timeout=timeout, transport=transport)
        except (SettingsError, ServerUrlError) as err:
            raise OperationError(str(err)) from None
        except ValueError as err:  # the namespace
            raise OperationError(str(err)) from None
        self.server = self.rest.server
        self.namespace = namespace
        self.poll_seconds = poll_seconds
        source = token_source if token_source and token is not None else settings.token_source
        self.backend = HttpBackend(self.rest, token_source=source)
        self.ops = RemoteOperations(self.backend)

    def close(self) -> None:
        """Close the connection pool."""
        self.rest.close()

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- control plane -----------------------------------------------------------------------------------

    def up(self, **_: Any) -> None:
        """There is no local control plane to start for a server.

        Raises:
            OperationError: always.
        """
        raise OperationError("up " + LOCAL_ONLY.format(server=self.server))

    def down(self) -> None:
        """There is no local control plane to stop for a server.

        Raises:
            OperationError: always.
        """
        raise OperationError("down " + LOCAL_ONLY.format(server=self.server))

    # -- jobs ----------------------------------------------------------------------------------------------

    def submit(
        self, spec: JobSpec, *, replace_finished: bool = False, stand_ins: Mapping[str, Sequence[str]] | None = None
    ) -> list[Submitted]:
        """Validate, then create the objects on the server (which validates them again); nothing if one is invalid.

        ``stand_ins`` are refused: a stand-in is a program of this machine, and the server runs jobs on its own.
        """
        if stand_ins:
            raise OperationError(
                "--stand-in names a program of this machine, and the server runs jobs on its own; leave it out"
            )
        documents, source = spec_documents(spec)
        return self.ops.submit(
            documents,
            namespace=None if self.namespace == "default" else self.namespace,
            replace_finished=replace_finished,
            source=source,
        )

    def replicas(self, name: str) -> list[str]:
        """The job's replicas by its spec, ROLE-INDEX (the names ``logs`` takes)."""
        job = self.get(name)
        return [f"{role}-{i}" for role, spec in job.spec.replicas.items() for i in range(spec.count)]

    def logs(self, name: str, replica: str | None = None) -> dict[str, str]:
        """The current log text of each replica (latest attempt), as the server has it.

        Raises:
            OperationError: no such job, or no such replica.
        """
        job = self.get(name)
        names = self.replicas(name)
        if replica is not None:
            short = replica.removeprefix(f"{name}-")
            if short not in names:
                raise no_replica_logs(job, replica, "no log")
            names = [short]
        return {short: self.backend.log_text(self.namespace, name, short) for short in names}

    def follow_log(self, name: str, replica: str) -> Iterator[str]:
        """One replica's log as it is written, until the job stops (the server's ``log?follow=true``)."""
        return self.backend.follow_log(self.namespace, name, replica.removeprefix(f"{name}-"))
