"""The HTTP backend (``services.remote``) against the real REST app, in process: the SDK's verbs over the wire, and
each status the server answers turned into the port's error with one sentence.

The app is ``create_app`` over the memory backend with the tenancy tests' tokens; the client is
``RemoteClient`` with the app's in-process transport (FastAPI's TestClient's), so every call is a real request
through the routes, their authorization and their Statuses.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from test_rest_tenancy import Tokens, job

from phalanx.adapters.rest.client import RestError, UnreachableError
from phalanx.entrypoints.client import Client
from phalanx.entrypoints.remote_client import RemoteClient
from phalanx.entrypoints.server.app import create_app
from phalanx.entrypoints.server.tokens import token_authorizer
from phalanx.model.datasets import Dataset
from phalanx.model.errors import SpecError
from phalanx.model.jobs import TrainingJob
from phalanx.services.operations import JobExistsError, OperationError
from phalanx.services.port import AlreadyExistsError, ConflictError, NotFoundError, Written
from phalanx.services.remote.operations import AccessError, port_error
from support.memory_backend import MemoryBackend

SERVER = "http://testserver"


@pytest.fixture
def served() -> Iterator[tuple[MemoryBackend, httpx.BaseTransport]]:
    backend = MemoryBackend()
    app = create_app(backend, authorize=token_authorizer(Tokens()))  # type: ignore[arg-type]
    with TestClient(app) as client:
        yield backend, client._transport  # the app, served in process: every call goes through its routes


def remote(served: tuple[MemoryBackend, httpx.BaseTransport], token: str | None, namespace: str = "ml") -> RemoteClient:
    return RemoteClient(SERVER, token=token, namespace=namespace, transport=served[1])


def test_the_sdk_verbs_run_over_the_api(served: tuple[MemoryBackend, httpx.BaseTransport]) -> None:
    backend, _ = served
    client = remote(served, "editor-ml")
    created = client.submit(job("first"))
    assert [(s.kind, s.namespace, s.name) for s in created] == [("TrainingJob", "ml", "first")]
    stored = backend.get(TrainingJob, "ml", "first")
    assert stored is not None
    assert client.get("first").metadata.uid == stored.metadata.uid
    assert [j.metadata.name for j in client.list()] == ["first"]
    backend.record(stored, "Queued", "waiting for quota")
    described = client.describe("first")
    assert [(e.reason, e.message) for e in described.events] == [("Queued", "waiting for quota")]
    assert described.replicas == []
    assert client.explain("first") == backend.pending
    assert client.halt("first").spec.run_policy.suspend is True
    assert client.resume("first").spec.run_policy.suspend is False
    assert stored.metadata.uid is not None
    backend.logs[stored.metadata.uid] = {"worker-0": "one\ntwo"}
    assert client.logs("first") == {"worker-0": "one\ntwo"}
    client.delete("first")
    assert backend.get(TrainingJob, "ml", "first") is None


def test_a_finished_job_is_replaced_when_asked(served: tuple[MemoryBackend, httpx.BaseTransport]) -> None:
    backend, _ = served
    client = remote(served, "editor-ml")
    client.submit(job("again"))
    first = backend.get(TrainingJob, "ml", "again")
    assert first is not None
    with pytest.raises(JobExistsError, match="already exists"):
        client.submit(job("again"), replace_finished=True)  # still active: never replaced
    assert backend.write_status(first, {"phase": "Succeeded"}) is Written.WROTE
    replaced = client.submit(job("again"), replace_finished=True)
    assert [s.replaced for s in replaced] == [True]
    second = backend.get(TrainingJob, "ml", "again")
    assert second is not None and second.metadata.uid != first.metadata.uid


def test_queues_are_listed_for_a_token_that_may_not_list_every_namespaces_jobs(
    served: tuple[MemoryBackend, httpx.BaseTransport],
) -> None:
    remote(served, "admin-all").submit(
        {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "gpus"}, "spec": {}}
    )
    views = remote(served, "viewer-ml").queues()  # its jobs cannot be listed cluster-wide: the queue's status says
    assert [view.queue.metadata.name for view in views] == ["gpus"]


def test_submitting_an_existing_dataset_gives_it_the_new_spec_and_a_stale_write_conflicts(
    served: tuple[MemoryBackend, httpx.BaseTransport],
) -> None:
    backend, _ = served
    client = remote(served, "editor-ml")
    dataset = {"kind": "Dataset", "metadata": {"name": "images"}, "spec": {"source": {"url": "file:///v1"}}}
    assert [s.configured for s in client.submit(dataset)] == [False]
    dataset["spec"]["source"]["url"] = "file:///v2"
    assert [s.configured for s in client.submit(dataset)] == [True]  # as kubectl apply: the spec replaced
    stored = backend.get(Dataset, "ml", "images")
    assert stored is not None and stored.spec.source.url == "file:///v2"
    client.submit({**dataset, "spec": {"source": {"url": "file:///v3"}}})  # moves the version on
    with pytest.raises(ConflictError, match="changed since resourceVersion"):
        client.backend.replace(stored)  # the version read is gone
    current = backend.get(Dataset, "ml", "images")
    assert current is not None and current.spec.source.url == "file:///v3"


def test_404_is_not_found_and_a_read_answers_none(served: tuple[MemoryBackend, httpx.BaseTransport]) -> None:
    client = remote(served, "viewer-ml")
    assert client.backend.get(TrainingJob, "ml", "absent") is None
    with pytest.raises(OperationError, match=r"^job ml/absent not found; ml has no jobs$"):
        client.get("absent")
    with pytest.raises(NotFoundError):
        remote(served, "editor-ml").backend.delete_job("ml", "absent")


def test_409_already_exists_is_the_ports_error(served: tuple[MemoryBackend, httpx.BaseTransport]) -> None:
    backend, _ = served
    client = remote(served, "editor-ml")
    client.submit(job("taken"))
    stored = backend.get(TrainingJob, "ml", "taken")
    assert stored is not None
    with pytest.raises(AlreadyExistsError, match="trainingjob ml/taken already exists"):
        client.backend.create(stored)


def test_409_of_a_finished_job_halted_is_the_servers_sentence(
    served: tuple[MemoryBackend, httpx.BaseTransport],
) -> None:
    backend, _ = served
    client = remote(served, "editor-ml")
    client.submit(job("done"))
    stored = backend.get(TrainingJob, "ml", "done")
    assert stored is not None
    assert backend.write_status(stored, {"phase": "Failed"}) is Written.WROTE
    with pytest.raises(OperationError, match=r"^job ml/done is Failed; it cannot be halted or resumed$"):
        client.backend.set_suspend(stored, True)


def test_422_is_a_spec_error_at_the_servers_field_paths(served: tuple[MemoryBackend, httpx.BaseTransport]) -> None:
    backend, _ = served
    client = remote(served, "editor-ml")
    document = job("elsewhere")
    document["spec"]["scheduling"] = {
        "schedulerName": "volcano"
    }  # the client lets it through; the server's door refuses it
    with pytest.raises(SpecError) as refused:
        client.submit(document)
    assert [e.path for e in refused.value.errors] == ["spec.scheduling.schedulerName"]
    assert "this runtime has none" in refused.value.errors[0].message
    assert backend.list(TrainingJob) == []


@pytest.mark.parametrize(
    ("token", "sentence"),
    [
        (
            "viewer-ml",
            f"the server at {SERVER} refused the token given to the client (forbidden): the viewer token viewer-ml "
            "for namespaces ml cannot create trainingjobs in ml: needs editor",
        ),
        (
            "editor-cv",
            f"the server at {SERVER} refused the token given to the client (forbidden): the editor token editor-cv "
            # submit looks the name up first
            "for namespaces cv cannot get trainingjobs in ml: it reaches namespaces cv only",
        ),
        ("revoked", f"the server at {SERVER} does not accept the token given to the client: it is unknown, expired"),
    ],
    ids=["viewer writing", "other namespace", "unknown token"],
)
def test_401_and_403_say_which_token_and_what_it_may_not_do(
    served: tuple[MemoryBackend, httpx.BaseTransport], token: str, sentence: str
) -> None:
    backend, _ = served
    with pytest.raises(AccessError) as refused:
        remote(served, token).submit(job("sneaky"))
    assert str(refused.value).startswith(sentence)
    assert backend.list(TrainingJob) == []


def test_no_answer_is_one_sentence_naming_the_url() -> None:
    with RemoteClient("http://127.0.0.1:9", token="t") as client, pytest.raises(OperationError) as failed:
        client.get("x")
    assert str(failed.value).startswith("cannot reach the server at http://127.0.0.1:9 (")
    assert str(failed.value).endswith("; check --server (or PHALANX_SERVER) and that `phalanx server` runs there")


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("127.0.0.1:8080", "is not http(s)://HOST[:PORT]"),
        ("http://127.0.0.1:99999", "port that is not a number from 1 to 65535"),
        ("http://127.0.0.1:8080/apis", "has a path"),
    ],
)
def test_a_bad_url_is_refused_before_anything_is_sent(url: str, words: str) -> None:
    with pytest.raises(OperationError, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        RemoteClient(url, token="t")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (RestError(404, {"message": "gone"}), NotFoundError),
        (RestError(409, {"message": "taken", "reason": "AlreadyExists"}), AlreadyExistsError),
        (RestError(409, {"message": "in use", "reason": "Conflict"}), OperationError),
        (RestError(422, {"message": "bad", "details": {"causes": [{"field": "spec.x", "message": "no"}]}}), SpecError),
        (RestError(401, {"message": "who?"}), AccessError),
        (RestError(403, {"message": "no"}), AccessError),
        (RestError(503, {"message": "busy"}), OperationError),
        (RestError(502, {}), OperationError),
        (UnreachableError("cannot reach the server at http://h"), OperationError),
    ],
    ids=["404", "409 exists", "409 refused", "422", "401", "403", "503", "502 no Status", "no answer"],
)
def test_each_status_is_the_ports_error(error: RestError | UnreachableError, expected: type[Exception]) -> None:
    mapped = port_error(error, server="http://h", token_source="the token in $PHALANX_TOKEN")
    assert type(mapped) is expected
    assert not isinstance(mapped, ConflictError) or expected is AlreadyExistsError
    if isinstance(mapped, SpecError):
        assert [(e.path, e.message) for e in mapped.errors] == [("spec.x", "no")]
    if isinstance(error, RestError) and error.code == 502:
        assert str(mapped) == "the server at http://h answered 502: the server answered HTTP 502"


def test_the_sdk_client_given_a_server_is_a_client_of_that_server(tmp_path: Path) -> None:
    with Client(server="http://127.0.0.1:8080", token="t", namespace="ml") as client:
        assert isinstance(client, RemoteClient)
        assert (client.server, client.namespace) == ("http://127.0.0.1:8080", "ml")
    with Client(state_dir=tmp_path) as local:  # no server: the embedded runtime, as always
        assert type(local) is Client
    with pytest.raises(OperationError, match=r"^token= is for a server: give server=URL too"):
        Client(state_dir=tmp_path, token="t")
