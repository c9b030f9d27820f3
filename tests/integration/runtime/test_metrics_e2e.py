"""`curl /metrics` on a real control plane started by `phalanx up --listen`, after real jobs ran through it.

The control plane is a real process on the simulated 8-GPU server, started by the real CLI (the daemon path);
the test talks HTTP only (httpx) with tokens made by the real `phalanx token create`, and takes what it compares
against from elsewhere: the admissions and preemptions from the jobs' events in the store, the phases from
`phalanx get jobs -A -o json`. Jobs: one that holds all 8 GPUs and is preempted by a critical one (so it is
admitted twice), the critical one, which succeeds, and one that fails.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from test_rest_server_e2e import start_server

from conftest import REPO, Runtime, generic_job, program_role, typed_job, wait_until
from phalanx.model.jobs import Phase
from support.postgres import free_port

API = "/apis/phalanx.dev/v1alpha1"
INVENTORY = REPO / "examples" / "inventories" / "dgx-2socket-8gpu.yaml"
Series = dict[tuple[tuple[str, str], ...], float]


def scrape(http: httpx.Client) -> dict[str, Series]:
    response = http.get("/metrics")
    assert response.status_code == 200, response.text
    found: dict[str, Series] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def total(series: Series) -> float:
    return sum(series.values())


def make_token(runtime: Runtime, name: str, role: str, namespace: str) -> str:
    return runtime.cli("token", "create", name, "--role", role, "--namespace", namespace, check=True).stdout.strip()


def test_metrics_of_a_control_plane_serving_the_api_count_what_happened(runtime: Runtime, tmp_path: Path) -> None:
    port = free_port()
    started = runtime.cli("up", "--listen", f"127.0.0.1:{port}", "--inventory", str(INVENTORY), check=True)
    assert f"REST API and /metrics on http://127.0.0.1:{port}" in started.stdout, started.stdout
    reader = make_token(runtime, "prometheus", "viewer", "*")
    partial = make_token(runtime, "team", "viewer", "default")
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10, headers={"Authorization": f"Bearer {reader}"})

    hold = tmp_path / "low.hold"
    low = typed_job(
        "low",
        "generic",
        {"worker": program_role(1, args=["--hold", str(hold)], cpu=1, memory="1Gi", gpu=8)},
        scheduling={"priorityClass": "low"},
    )
    runtime.submit(low)
    runtime.wait_phase("low", {Phase.RUNNING})
    critical = typed_job(
        "critical",
        "generic",
        {"worker": program_role(1, cpu=1, memory="1Gi", gpu=8)},
        scheduling={"priorityClass": "critical"},
    )
    runtime.submit(critical)
    runtime.submit(generic_job("broken", args=["--crash-always"], run_policy={"backoffLimit": 0}))
    runtime.wait_phase("critical", {Phase.SUCCEEDED})
    runtime.wait_phase("broken", {Phase.FAILED})
    # The victim runs again once the critical job is done, and holds its 8 GPUs until released.
    runtime.wait_phase("low", {Phase.RUNNING})

    with runtime.client() as client:
        reasons = Counter(
            event.reason
            for name in ("low", "critical", "broken")
            for event in client.store.list_events("TrainingJob", "default", name)
        )
    assert reasons["Preempted"] == 1, reasons
    assert reasons["Scheduled"] == 4, reasons  # low twice, critical and broken once each

    listed = http.get(f"{API}/namespaces/default/trainingjobs")
    assert listed.status_code == 200
    # The history the control plane records into is served too, as `phalanx server` serves it.
    recorded = wait_until(
        lambda: (
            {(r["name"], r["phase"]) for r in http.get(f"{API}/namespaces/default/history").json()["items"]}
            >= {("critical", "Succeeded"), ("broken", "Failed")}
        ),
        timeout=30,
        message="the ended jobs in the served history",
        interval=0.2,
    )
    assert recorded
    assert http.get(f"{API}/namespaces/default/trainingjobs/low").status_code == 200
    found = scrape(http)

    assert total(found["phalanx_admissions_total"]) == reasons["Scheduled"]
    assert total(found["phalanx_preemptions_total"]) == reasons["Preempted"]
    assert found["phalanx_admission_latency_seconds_count"] == found["phalanx_admissions_total"]
    assert found["phalanx_queueing_seconds_count"] == found["phalanx_admissions_total"]
    cycles = total(found["phalanx_scheduling_cycle_seconds_count"])
    assert cycles >= 3, cycles  # admissions of low, critical and low again were decided in separate cycles
    assert total(found["phalanx_scheduling_cycle_seconds_sum"]) > 0

    shown = json.loads(runtime.cli("get", "jobs", "-A", "-o", "json", check=True).stdout)
    items = shown["items"] if isinstance(shown, dict) else shown
    phases = Counter((item["metadata"]["namespace"], item["status"]["phase"]) for item in items)
    assert phases == Counter({("default", "Running"): 1, ("default", "Succeeded"): 1, ("default", "Failed"): 1})
    assert {
        (dict(labels)["namespace"], dict(labels)["phase"]): value for labels, value in found["phalanx_jobs"].items()
    } == {key: float(count) for key, count in phases.items()}

    model = "NVIDIA-A100-SXM4-80GB"
    assert found["phalanx_gpus"] == {(("model", model), ("node", "dgx-0")): 8.0}
    assert found["phalanx_gpus_allocated"] == {(("model", model), ("node", "dgx-0")): 8.0}  # low holds them all
    assert len(found["phalanx_gpu_healthy"]) == 8 and set(found["phalanx_gpu_healthy"].values()) == {1.0}

    latency = found["phalanx_api_request_seconds_count"]
    routes = {(dict(labels)["method"], dict(labels)["route"], dict(labels)["code"]) for labels in latency}
    assert ("GET", f"{API}/namespaces/{{namespace}}/trainingjobs", "200") in routes
    assert ("GET", f"{API}/namespaces/{{namespace}}/trainingjobs/{{name}}", "200") in routes

    refused = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {partial}"}, timeout=10)
    assert refused.status_code == 403, refused.text
    assert "needs a token for all namespaces" in refused.json()["message"]
    assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).status_code == 401

    hold.write_text("")
    runtime.wait_phase("low", {Phase.SUCCEEDED})
    wait_until(
        lambda: total(scrape(http)["phalanx_gpus_allocated"]) == 0,
        timeout=30,
        message="the GPUs low held to be given back",
    )
    assert runtime.cli("down", check=True).returncode == 0


def test_a_separate_phalanx_server_serves_the_state_and_its_requests_not_the_schedulers_counts(
    runtime: Runtime, tmp_path: Path
) -> None:
    runtime.start_control_plane()
    base = start_server(runtime, tmp_path / "server.log", "--no-auth")
    runtime.submit(generic_job("one"))
    runtime.wait_phase("one", {Phase.SUCCEEDED})
    http = httpx.Client(base_url=base, timeout=10)
    assert http.get(f"{API}/namespaces/default/trainingjobs/one").status_code == 200
    found = scrape(http)
    assert found["phalanx_jobs"] == {(("namespace", "default"), ("phase", "Succeeded"), ("queue", "default")): 1.0}
    # Admissions happen in the control plane's process: this server has none to count, and does not pretend to.
    assert "phalanx_admissions_total" not in found and "phalanx_scheduling_cycle_seconds_count" not in found
    latency = found["phalanx_api_request_seconds_count"]
    item = f"{API}/namespaces/{{namespace}}/trainingjobs/{{name}}"
    assert latency[(("code", "200"), ("method", "GET"), ("route", item))] == 1.0
