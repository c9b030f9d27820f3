"""Each cluster component's health port answers /metrics in Prometheus' text format, beside the probes."""

from __future__ import annotations

import socket
import threading

import httpx
from prometheus_client.parser import text_string_to_metric_families

from phalanx import __version__
from phalanx.entrypoints.kubernetes.common import serve_health


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def test_metrics_name_the_component_its_readiness_and_its_process() -> None:
    ready = threading.Event()
    port = free_port()
    server = serve_health(port, ready.is_set, "operator")
    assert server is not None
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
            first = http.get("/metrics")
            assert first.status_code == 200
            assert first.headers["content-type"].startswith("text/plain")
            found = samples(first.text)
            assert found["phalanx_component_info"] == [({"component": "operator", "version": __version__}, 1.0)]
            assert found["phalanx_component_ready"] == [({}, 0.0)]
            assert found["process_resident_memory_bytes"][0][1] > 0
            assert http.get("/readyz").status_code == 503

            ready.set()
            assert samples(http.get("/metrics").text)["phalanx_component_ready"] == [({}, 1.0)]
            assert http.get("/readyz").status_code == 200
            assert http.get("/healthz").status_code == 200
    finally:
        server.shutdown()
        server.server_close()


def test_two_servers_in_one_process_keep_their_own_metrics() -> None:
    ports = free_port(), free_port()
    servers = [serve_health(ports[0], lambda: True, "scheduler"), serve_health(ports[1], lambda: False, "node-agent")]
    try:
        second = samples(httpx.get(f"http://127.0.0.1:{ports[1]}/metrics").text)
        assert second["phalanx_component_info"][0][0]["component"] == "node-agent"
        assert second["phalanx_component_ready"] == [({}, 0.0)]
    finally:
        for server in servers:
            assert server is not None
            server.shutdown()
            server.server_close()


def test_a_guarded_metrics_port_answers_the_guards_refusal_and_still_the_probes() -> None:
    """With a guard (``--metrics-access rbac``), /metrics answers its refusal as text; the probes answer anyone."""
    port = free_port()

    def guard(authorization: str | None) -> tuple[int, str] | None:
        return None if authorization == "Bearer good" else (401 if authorization is None else 403, "why not")

    server = serve_health(port, lambda: True, "operator", guard=guard)
    assert server is not None
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
            refused = http.get("/metrics")
            assert (refused.status_code, refused.text) == (401, "why not\n")
            assert refused.headers["www-authenticate"].startswith("Bearer")
            forbidden = http.get("/metrics", headers={"Authorization": "Bearer other"})
            assert (forbidden.status_code, forbidden.text) == (403, "why not\n")
            served = http.get("/metrics", headers={"Authorization": "Bearer good"})
            assert served.status_code == 200
            assert samples(served.text)["phalanx_component_ready"] == [({}, 1.0)]
            assert http.get("/healthz").status_code == 200
            assert http.get("/readyz").status_code == 200
    finally:
        server.shutdown()
        server.server_close()
