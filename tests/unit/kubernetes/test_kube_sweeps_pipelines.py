"""Sweep, Pipeline and PipelineRun on Kubernetes: their CRDs take what users write and what the controllers write,
the objects read back equal, and the kubernetes backend serves them through the port (an in-memory API)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from phalanx.adapters.kubernetes.api import EVENTS, PIPELINERUNS, PIPELINES, SWEEPS, Resource, error_from
from phalanx.adapters.kubernetes.crds import crd_kind, custom_resource_definition
from phalanx.adapters.kubernetes.objects import (
    object_body,
    pipeline_from_object,
    pipeline_run_from_object,
    status_body,
    sweep_from_object,
)
from phalanx.adapters.kubernetes.structural import check_structural, validate_value
from phalanx.model.base import API_GROUP
from phalanx.model.errors import SpecError
from phalanx.model.pipelines import Pipeline, PipelineRun, PipelineRunStatus, parse_pipeline, parse_pipeline_run
from phalanx.model.sweeps import Sweep, SweepStatus, parse_sweep
from phalanx.services import port
from phalanx.services.kubernetes.operations import CLUSTER_NAMESPACED_KINDS, NOT_INSTALLED, KubeBackend
from phalanx.services.operations import OperationError
from phalanx.services.port import Written
from support.kind_samples import (
    pipeline_document,
    pipeline_run_document,
    pipeline_run_status,
    sweep_document,
    sweep_status,
)
from support.memory_kube_api import MemoryKubeApi

Kind = Sweep | Pipeline | PipelineRun
# kind -> (its resource, a full document, the status a controller writes or None, the parser, the reader)
KINDS: dict[str, tuple[Resource, Callable[[], dict[str, Any]], dict[str, Any] | None, Any, Any]] = {
    "Sweep": (SWEEPS, sweep_document, sweep_status(), parse_sweep, sweep_from_object),
    "Pipeline": (PIPELINES, pipeline_document, None, parse_pipeline, pipeline_from_object),
    "PipelineRun": (
        PIPELINERUNS,
        pipeline_run_document,
        pipeline_run_status(),
        parse_pipeline_run,
        pipeline_run_from_object,
    ),
}
NAMES = list(KINDS)


def schema_of(kind: str) -> dict[str, Any]:
    return custom_resource_definition(crd_kind(kind))["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def parsed(kind: str) -> Any:
    _, document, status, parse, _ = KINDS[kind]
    obj = parse(document())
    if status is not None:
        obj = obj.model_copy(update={"status": type(obj.status).model_validate(status)})
    return obj


def as_stored(body: dict[str, Any], status: dict[str, Any] | None) -> dict[str, Any]:
    """The object as the API server answers it: JSON on the wire, its own metadata added, the status written."""
    stored = json.loads(json.dumps(body))
    stored["metadata"].update(
        uid="0f0e", resourceVersion="42", generation=1, creationTimestamp="2026-11-26T22:00:00Z", managedFields=[{}]
    )
    if status is not None:
        stored["status"] = json.loads(json.dumps(status))
    return stored


# -- the CRDs --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", NAMES)
def test_the_schema_is_structural_and_takes_the_full_example_as_written(kind: str) -> None:
    schema = schema_of(kind)
    assert check_structural(schema) == []
    _, document, status, _, _ = KINDS[kind]
    written = document()
    if status is not None:
        written["status"] = status
    assert validate_value(written, schema) == []


@pytest.mark.parametrize("kind", NAMES)
def test_what_phalanx_posts_and_the_status_it_writes_are_accepted(kind: str) -> None:
    obj = parsed(kind)
    schema = schema_of(kind)
    assert validate_value(object_body(obj, namespaced=True), schema) == []
    if KINDS[kind][2] is not None:
        written = status_body(obj.to_dict(), obj.status)["status"]
        assert written and validate_value(written, schema["properties"]["status"], "status") == []


def test_a_pipeline_run_with_its_pipeline_inline_is_accepted() -> None:
    document = pipeline_run_document(pipeline=None)
    assert validate_value(document, schema_of("PipelineRun")) == []
    assert validate_value(object_body(parse_pipeline_run(document), namespaced=True), schema_of("PipelineRun")) == []


def test_fractions_stay_fractions_where_a_parameter_value_is_a_number_or_text() -> None:
    # An int-or-string schema (the quantities') would refuse 0.5: these are kept as written, checked by the model.
    document = sweep_document()
    document["spec"]["parameters"][3]["values"] = [0.5, 1, "x"]
    document["status"] = {"bestTrial": {"name": "t", "number": 0, "parameters": {"lr": 0.5, "o": "adam"}, "value": 1}}
    assert validate_value(document, schema_of("Sweep")) == []


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        pytest.param(("spec", "algorithm", "name"), "annealing", "must be one of", id="algorithm"),
        pytest.param(("spec", "parallelTrials"), 0, "must be >= 1", id="parallel"),
        pytest.param(("spec", "objective", "direction"), "up", "must be one of", id="direction"),
        pytest.param(("spec", "maxTrails"), 3, "unknown field", id="misspelt"),
        pytest.param(("spec", "parameters", 0, "min"), "small", "must be of type number", id="bound"),
    ],
)
def test_the_api_server_still_refuses_a_bad_sweep_where_the_schema_has_a_type(
    path: tuple[str | int, ...], value: Any, problem: str
) -> None:
    document: Any = sweep_document()
    target = document
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    problems = validate_value(document, schema_of("Sweep"))
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        pytest.param(
            "Sweep",
            [
                ("Phase", ".status.phase", "string"),
                ("Trials", ".status.trials.created", "integer"),
                ("Best", ".status.bestTrial.value", "number"),
                ("Age", ".metadata.creationTimestamp", "date"),
            ],
            id="Sweep",
        ),
        pytest.param("Pipeline", [("Age", ".metadata.creationTimestamp", "date")], id="Pipeline"),
        pytest.param(
            "PipelineRun",
            [
                ("Pipeline", ".spec.pipelineRef.name", "string"),
                ("Phase", ".status.phase", "string"),
                ("Age", ".metadata.creationTimestamp", "date"),
            ],
            id="PipelineRun",
        ),
    ],
)
def test_kubectl_get_shows_the_columns_users_look_for(kind: str, columns: list[tuple[str, str, str]]) -> None:
    version = custom_resource_definition(crd_kind(kind))["spec"]["versions"][0]
    shown = [(c["name"], c["jsonPath"], c["type"]) for c in version["additionalPrinterColumns"] if "priority" not in c]
    assert shown == columns


# -- reading objects back -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", NAMES)
def test_an_object_reads_back_equal_with_its_status_and_the_servers_metadata(kind: str) -> None:
    resource, _, status, _, read = KINDS[kind]
    obj = parsed(kind)
    stored = as_stored(object_body(obj, namespaced=True), status)
    back = read(stored)
    assert back.spec == obj.spec
    assert back.to_dict()["spec"] == obj.to_dict()["spec"]
    if status is not None:
        assert back.status == obj.status
    meta = back.metadata
    assert (meta.name, meta.namespace, meta.uid, meta.resource_version) == (
        obj.metadata.name,
        "default",
        "0f0e",
        "42",
    )
    assert meta.labels == obj.metadata.labels and meta.annotations == obj.metadata.annotations
    assert resource.kind == kind


@pytest.mark.parametrize("kind", ["Sweep", "PipelineRun"])
def test_a_status_written_past_the_model_reads_as_a_new_objects(kind: str) -> None:
    _, document, _, _, read = KINDS[kind]
    stored = as_stored(document(), {"phase": "Exploded", "trials": "many", "instances": 3})
    assert read(stored).status == (SweepStatus() if kind == "Sweep" else PipelineRunStatus())


@pytest.mark.parametrize(
    ("kind", "change", "where"),
    [
        pytest.param("Sweep", lambda d: d["spec"].update(maxTrials=0), "spec.maxTrials", id="Sweep"),
        pytest.param("Pipeline", lambda d: d["spec"].update(steps=[]), "spec.steps", id="Pipeline"),
        pytest.param(
            "PipelineRun",
            lambda d: d["spec"].update(pipelineSpec=pipeline_document()["spec"]),
            "spec",
            id="PipelineRun",
        ),
    ],
)
def test_a_spec_written_past_the_model_is_a_spec_error_naming_the_field(
    kind: str, change: Callable[[dict[str, Any]], None], where: str
) -> None:
    _, document, _, _, read = KINDS[kind]
    stored = as_stored(document(), None)
    change(stored)
    with pytest.raises(SpecError) as caught:
        read(stored)
    assert where in str(caught.value) and f"{kind.lower()}/" in str(caught.value)


# -- the kubernetes backend, through the port -------------------------------------------------------------------------


@pytest.fixture
def api() -> MemoryKubeApi:
    return MemoryKubeApi()


@pytest.mark.parametrize("kind", NAMES)
def test_the_backend_creates_reads_lists_replaces_and_deletes_each_kind(api: MemoryKubeApi, kind: str) -> None:
    resource, document, _, parse, _ = KINDS[kind]
    obj = parse(document())
    model: type[Kind] = type(obj)
    backend = KubeBackend(api)
    backend.create(obj)
    assert api.of(resource) and "status" not in api.objects[(resource.plural, "default", obj.metadata.name)]
    with pytest.raises(port.AlreadyExistsError):
        backend.create(obj)
    got = backend.get(model, "default", obj.metadata.name)
    assert got is not None and got.spec == obj.spec and got.metadata.uid
    assert [o.metadata.name for o in backend.list(model, "default")] == [obj.metadata.name]
    assert backend.list(model, "elsewhere") == []

    labelled = got.model_copy(update={"metadata": got.metadata.model_copy(update={"labels": {"new": "label"}})})
    backend.replace(labelled)
    again = backend.get(model, "default", obj.metadata.name)
    assert again is not None and again.metadata.labels == {"new": "label"} and again.spec == obj.spec
    with pytest.raises(port.ConflictError):
        backend.replace(labelled)  # read at the version before the replacement

    backend.delete(model, "default", obj.metadata.name, uid=again.metadata.uid)
    assert backend.get(model, "default", obj.metadata.name) is None
    with pytest.raises(port.NotFoundError):
        backend.delete(model, "default", obj.metadata.name)


@pytest.mark.parametrize("kind", ["Sweep", "PipelineRun"])
def test_status_goes_through_the_status_subresource_on_the_version_read(api: MemoryKubeApi, kind: str) -> None:
    resource, document, status, parse, _ = KINDS[kind]
    model: type[Sweep | PipelineRun] = Sweep if kind == "Sweep" else PipelineRun
    backend = KubeBackend(api)
    backend.create(parse(document()))
    read = backend.get(model, "default", parse(document()).metadata.name)
    assert read is not None
    wanted = type(read.status).model_validate(status)
    changes = {name: getattr(wanted, name) for name in type(wanted).model_fields}
    assert backend.write_status(read, changes) is Written.WROTE
    writes = [call for call in api.writes if call.subresource == "status"]
    assert [(call.verb, call.plural) for call in writes] == [("replace", resource.plural)]
    after = backend.get(model, "default", read.metadata.name)
    assert after is not None and after.status == wanted and after.spec == read.spec
    assert backend.write_status(after, changes) is Written.UNCHANGED
    assert backend.write_status(read, {"phase": "Failed"}) is Written.LOST  # read before the write above


@pytest.mark.parametrize("kind", ["Sweep", "PipelineRun"])
def test_events_about_an_object_are_recorded_and_read_back_by_its_uid(api: MemoryKubeApi, kind: str) -> None:
    _, document, _, parse, _ = KINDS[kind]
    model: type[Sweep | PipelineRun] = Sweep if kind == "Sweep" else PipelineRun
    backend = KubeBackend(api, component="phalanx-operator")
    backend.create(parse(document()))
    obj = backend.get(model, "default", parse(document()).metadata.name)
    assert obj is not None
    backend.record(obj, "TrialCreated", "created trial 0 with lr=0.01 (token s3://u:secret@h/x)")
    backend.record(obj, "Failed", "too many trials failed", warning=True)
    events = backend.events_of(obj)
    assert [(e.reason, e.type, e.object_kind, e.object_name) for e in events] == [
        ("TrialCreated", "Normal", kind, obj.metadata.name),
        ("Failed", "Warning", kind, obj.metadata.name),
    ]
    assert "secret" not in events[0].message
    assert all(o["involvedObject"]["uid"] == obj.metadata.uid for o in api.of(EVENTS))


def test_submit_moves_the_new_kinds_to_the_namespace_asked_for() -> None:
    assert {"Sweep", "Pipeline", "PipelineRun"} <= CLUSTER_NAMESPACED_KINDS


def test_a_missing_namespace_is_named_with_how_to_create_it(api: MemoryKubeApi) -> None:
    api.fail["create"] = [error_from(404, {"reason": "NotFound", "message": 'namespaces "ml" not found'})]
    with pytest.raises(OperationError, match=r"^cannot create sweep ml/lr-search: .*kubectl create namespace ml\)$"):
        KubeBackend(api).create(parse_sweep(sweep_document(namespace="ml")))


def test_an_install_older_than_the_client_says_to_update_it() -> None:
    api = MemoryKubeApi(unserved={"sweeps.phalanx.dev"})
    backend = KubeBackend(api)
    with pytest.raises(OperationError) as caught:
        backend.list(Sweep, "default")
    assert str(caught.value) == (
        "this cluster's Phalanx install does not serve sweeps.phalanx.dev (it is older than this client); update "
        "it: phalanx install --print | kubectl apply -f -"
    )
    with pytest.raises(OperationError, match=r"does not serve sweeps\.phalanx\.dev"):
        backend.get(Sweep, "default", "x")
    assert backend.list(Pipeline, "default") == []  # the other kinds are served


def test_a_cluster_without_phalanx_at_all_says_how_to_install_it() -> None:
    backend = KubeBackend(MemoryKubeApi(unserved={API_GROUP}))
    for kind in (Sweep, Pipeline, PipelineRun):
        with pytest.raises(OperationError) as caught:
            backend.get(kind, "default", "x")
        assert str(caught.value) == NOT_INSTALLED
