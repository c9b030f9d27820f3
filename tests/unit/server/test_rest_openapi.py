"""The OpenAPI document: valid JSON, every route in it, every reference resolved, the plurals those of the CRDs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from phalanx.entrypoints.server.app import create_app
from phalanx.entrypoints.server.kinds import RESOURCES
from support.memory_backend import MemoryBackend

CRDS = Path(__file__).resolve().parents[3] / "deploy" / "crds"


def document() -> tuple[dict[str, Any], Any]:
    app = create_app(MemoryBackend())
    response = TestClient(app).get("/openapi.json")
    assert response.status_code == 200
    return json.loads(response.text), app


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in refs(value)]
    return []


def test_every_route_is_in_the_document_with_its_verbs() -> None:
    spec, app = document()
    routes = {
        (route.path, method.lower())
        for route in app.routes
        if isinstance(route, APIRoute) and route.include_in_schema
        for method in route.methods
    }
    listed = {(path, method) for path, item in spec["paths"].items() for method in item}
    assert listed == routes
    # Seven kinds: four routes each (list, create, read, delete), and five namespaced kinds list every namespace.
    kinds = {(path, method) for path, method in routes if not path.endswith("/history")}
    assert len(kinds) == 4 * len(RESOURCES) + sum(r.namespaced for r in RESOURCES) == 33


def test_every_reference_resolves_and_each_kind_has_its_schema() -> None:
    spec, _ = document()
    schemas = spec["components"]["schemas"]
    missing = {ref for ref in refs(spec) if ref.removeprefix("#/components/schemas/") not in schemas}
    assert missing == set()
    for resource in RESOURCES:
        assert {resource.kind, f"{resource.kind}List"} <= set(schemas)
        post = spec["paths"][next(p for p in spec["paths"] if p.endswith(f"/{resource.plural}"))]["post"]
        body = post["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{resource.kind}"}
    job = schemas["TrainingJob"]["properties"]
    assert {"apiVersion", "kind", "metadata", "spec", "status"} <= set(job)  # the wire's camelCase names
    assert set(schemas["Status"]["properties"]) >= {"apiVersion", "kind", "status", "message", "reason", "code"}


def test_the_plurals_and_scopes_are_those_of_deploy_crds() -> None:
    crds = [yaml.safe_load(path.read_text()) for path in sorted(CRDS.glob("*.yaml"))]
    shipped = {(c["spec"]["names"]["kind"], c["spec"]["names"]["plural"], c["spec"]["scope"]) for c in crds}
    served = {(r.kind, r.plural, "Namespaced" if r.namespaced else "Cluster") for r in RESOURCES}
    assert served == shipped


def test_no_page_that_loads_scripts_from_the_internet_is_served() -> None:
    client = TestClient(create_app(MemoryBackend()))
    assert client.get("/docs").status_code == 404
    assert client.get("/redoc").status_code == 404
