"""The in-memory Kubernetes API of the unit tests answers as the API server and ``KubeApi`` do where the services
rely on it: same verbs and signatures, preconditions, generateName, the status subresource, merge patches."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from phalanx.adapters.kubernetes.api import (
    NODES,
    PODS,
    TRAININGJOBS,
    ConflictError,
    KubeApi,
    NotFoundError,
)
from support.memory_kube_api import MemoryKubeApi


def job(name: str = "ddp", **status: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": name, "namespace": "ml"}, "spec": {"type": "pytorch"}}
    if status:
        body["status"] = status
    return body


def test_every_public_verb_has_the_adapters_signature() -> None:
    verbs = [name for name, member in vars(KubeApi).items() if callable(member) and not name.startswith("_")]
    assert {"get", "list", "watch", "create", "replace", "replace_status", "patch", "delete", "logs"} <= set(verbs)
    for name in verbs:
        ours = inspect.signature(getattr(MemoryKubeApi, name))
        assert ours == inspect.signature(getattr(KubeApi, name)), f"MemoryKubeApi.{name} drifted from KubeApi.{name}"
        assert getattr(MemoryKubeApi, name) is not getattr(KubeApi, name), f"MemoryKubeApi.{name} would use HTTP"


def test_a_replace_on_a_stale_version_is_a_conflict_and_a_missing_object_not_found() -> None:
    api = MemoryKubeApi()
    created = api.create(TRAININGJOBS, job())
    updated = api.replace(TRAININGJOBS, {**created, "spec": {"type": "mpi"}})
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert updated["metadata"]["generation"] == 2, "a spec change moves the generation"

    with pytest.raises(ConflictError) as caught:
        api.replace(TRAININGJOBS, created)
    assert not caught.value.already_exists
    with pytest.raises(ConflictError) as caught:
        api.replace_status(TRAININGJOBS, {**created, "status": {"phase": "Queued"}})
    assert caught.value.reason == "Conflict"
    with pytest.raises(NotFoundError):
        api.replace(TRAININGJOBS, job("other"))
    assert api.get(TRAININGJOBS, "ddp", "ml")["spec"] == {"type": "mpi"}


def test_creating_an_existing_name_already_exists_and_generate_name_makes_a_new_one() -> None:
    api = MemoryKubeApi()
    api.create(TRAININGJOBS, job())
    with pytest.raises(ConflictError) as caught:
        api.create(TRAININGJOBS, job())
    assert caught.value.already_exists

    event = {"metadata": {"generateName": "ddp.", "namespace": "ml"}, "reason": "Scheduled"}
    first, second = api.create(PODS, event), api.create(PODS, event)
    assert first["metadata"]["name"].startswith("ddp.") and len(first["metadata"]["name"]) > len("ddp.")
    assert first["metadata"]["name"] != second["metadata"]["name"]
    assert first["metadata"]["uid"] != second["metadata"]["uid"]


def test_status_and_object_are_written_separately() -> None:
    api = MemoryKubeApi()
    created = api.create(TRAININGJOBS, job(phase="Pending"))
    version = created["metadata"]["resourceVersion"]
    status_only = {"metadata": {"name": "ddp", "namespace": "ml", "resourceVersion": version}}
    written = api.replace_status(TRAININGJOBS, {**status_only, "status": {"phase": "Queued"}})
    assert (written["spec"], written["status"]) == ({"type": "pytorch"}, {"phase": "Queued"})
    assert written["metadata"]["generation"] == 1, "a status write does not move the generation"

    rewritten = api.replace(TRAININGJOBS, {**written, "status": {"phase": "Failed"}, "spec": {"type": "mpi"}})
    assert rewritten["status"] == {"phase": "Queued"}, "a write of the object keeps its status"

    patched = api.patch(TRAININGJOBS, "ddp", {"status": {"reason": "Waiting"}}, "ml", subresource="status")
    assert patched["status"] == {"phase": "Queued", "reason": "Waiting"}
    assert api.patch(TRAININGJOBS, "ddp", {"status": {"phase": "x"}}, "ml")["status"]["phase"] == "Queued"


def test_a_merge_patch_merges_removes_and_checks_the_version_it_carries() -> None:
    api = MemoryKubeApi()
    api.put(NODES, {"metadata": {"name": "gpu-0", "labels": {"a": "1", "b": "2"}}})
    version = api.get(NODES, "gpu-0")["metadata"]["resourceVersion"]
    patched = api.patch(NODES, "gpu-0", {"metadata": {"resourceVersion": version, "labels": {"a": None, "c": "3"}}})
    assert patched["metadata"]["labels"] == {"b": "2", "c": "3"}
    same = api.patch(NODES, "gpu-0", {"metadata": {"labels": {"c": "3"}}})
    assert same["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"], "a no-op is no new version"

    with pytest.raises(ConflictError):
        api.patch(NODES, "gpu-0", {"metadata": {"resourceVersion": version, "labels": {"d": "4"}}})
    with pytest.raises(NotFoundError):
        api.patch(NODES, "gpu-1", {"metadata": {"labels": {"d": "4"}}})
    assert [call.name for call in api.calls if call.verb == "patch"] == ["gpu-0", "gpu-0", "gpu-0", "gpu-1"]
    assert [call.name for call in api.writes_to("nodes")] == ["gpu-0", "gpu-0"], "a refused write is not a write"


def test_selectors_uid_preconditions_and_logs() -> None:
    api = MemoryKubeApi()
    for name, labels in (("a", {"job": "x", "role": "w"}), ("b", {"job": "x"}), ("c", {"job": "y"})):
        api.create(PODS, {"metadata": {"name": name, "namespace": "ml", "labels": labels}})
    names = {
        selector: [pod["metadata"]["name"] for pod in api.list(PODS, "ml", label_selector=selector)[0]]
        for selector in ("job=x", "job!=x", "role", "!role", "job in (x, y),role", "job notin (x)")
    }
    assert names == {
        "job=x": ["a", "b"],
        "job!=x": ["c"],
        "role": ["a"],
        "!role": ["b", "c"],
        "job in (x, y),role": ["a"],
        "job notin (x)": ["c"],
    }
    assert [pod["kind"] for pod in api.list(PODS, field_selector="metadata.name=b")[0]] == ["Pod"]

    uid = api.get(PODS, "a", "ml")["metadata"]["uid"]
    with pytest.raises(ConflictError):
        api.delete(PODS, "a", "ml", uid="an-earlier-pod")
    api.logs_text["a"] = "one\ntwo\n"
    assert api.logs("ml", "a", tail_lines=1) == "two\n"
    api.delete(PODS, "a", "ml", uid=uid)
    with pytest.raises(NotFoundError):
        api.logs("ml", "a")
    assert [call.verb for call in api.calls[-3:]] == ["logs", "delete", "logs"]
