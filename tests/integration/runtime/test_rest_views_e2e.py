"""The view routes of a real `phalanx server` over a real control plane (the simulated 8-GPU server of
examples/inventories), answering what the CLI shows of the same state: `get nodes` (GPUs and CPUs allocated),
`cache ls` (the entry a running job reads, pinned by it), `get queues` and `describe queue` (usage against quota,
what is borrowed, the job that waits and why); and a caller of another namespace seeing the same numbers with
no name of ours.

Everything is real: the control plane and the server are processes, tokens come from `phalanx token create`,
the test speaks HTTP (httpx) and reads the CLI's tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import yaml
from test_rest_server_e2e import make_token, start_server

from conftest import REPO, Runtime, parse_table, program_role, typed_job
from phalanx.model.jobs import Phase
from phalanx.model.resources import format_cpu

API = "/apis/phalanx.dev/v1alpha1"
INVENTORY = REPO / "examples" / "inventories" / "dgx-2socket-8gpu.yaml"


def queue_doc(name: str, gpus: int) -> dict[str, Any]:
    return {"kind": "Queue", "metadata": {"name": name}, "spec": {"quota": {"gpu": gpus}, "cohort": "research"}}


def holding_job(name: str, gpus: int, hold: Path, *, datasets: list[str] | None = None) -> dict[str, Any]:
    role = program_role(1, args=["--hold", str(hold)], cpu=1, memory="1Gi", gpu=gpus)
    job = typed_job(name, "generic", {"worker": role}, scheduling={"queue": "team-a"})
    if datasets:
        job["spec"]["datasets"] = [{"name": name} for name in datasets]
    return job


def test_nodes_caches_and_queue_usage_answer_what_the_cli_shows(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane(extra=["--inventory", str(INVENTORY)])
    base = start_server(runtime, tmp_path / "server.log")
    admin = httpx.Client(
        base_url=base, timeout=10, headers={"Authorization": f"Bearer {make_token(runtime, 'ops', 'admin', '*')}"}
    )
    stranger = httpx.Client(
        base_url=base,
        timeout=10,
        headers={"Authorization": f"Bearer {make_token(runtime, 'other', 'viewer', 'other')}"},
    )
    for queue in (queue_doc("team-a", 2), queue_doc("team-b", 2)):
        assert admin.post(f"{API}/queues", json=queue).status_code == 201

    data = tmp_path / "images"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a" * 3000)
    spec = runtime.work_dir / "images.yaml"
    spec.write_text(
        yaml.safe_dump({"kind": "Dataset", "metadata": {"name": "images"}, "spec": {"source": {"path": str(data)}}})
    )
    runtime.cli("dataset", "create", "-f", str(spec), check=True)  # returns once it is Ready

    # team-a borrows team-b's idle quota: 3 GPUs of its 2; a 2-GPU job of team-a then waits (one GPU of quota left).
    hold = tmp_path / "hold"
    runtime.submit(holding_job("big", 3, hold, datasets=["images"]))
    runtime.wait_phase("big", {Phase.RUNNING})
    runtime.submit(holding_job("waiter", 2, hold))
    waiting = runtime.wait_waiting("waiter")

    # -- nodes: `phalanx get nodes` ---------------------------------------------------------------------------
    (row,) = parse_table(runtime.cli("get", "nodes", check=True).stdout)
    listed = admin.get(f"{API}/nodes")
    assert listed.status_code == 200, listed.text
    (node,) = listed.json()["items"]
    gpus, allocation = node["status"]["gpus"], node["allocation"]
    assert node["metadata"]["name"] == row["NAME"] == "dgx-0"
    assert f"{allocation['gpus']}/{len(gpus)}" == row["GPU ALLOC"] == "3/8"
    assert f"{format_cpu(allocation['cpuMilli'])}/{len(node['status']['cpus'])}" == row["CPU ALLOC"]
    assert ", ".join(sorted({gpu["model"] for gpu in gpus})) == row["GPU MODEL"]
    assert all(gpu["healthy"] for gpu in gpus) and row["UNHEALTHY"] == "-"
    assert any(gpu["nvlinks"] for gpu in gpus)  # the DGX's NVLink peers, as the inventory gives them
    with runtime.client() as client:
        placed = sorted(client.get("big").status.placements["big-worker-0"].gpus)
    held = {gpu["index"]: gpu["holders"] for gpu in allocation["gpuHolders"]}
    assert sorted(held) == placed
    assert {holder["job"] for holders in held.values() for holder in holders} == {"default/big"}
    assert admin.get(f"{API}/nodes/dgx-0").json()["allocation"] == allocation

    # -- the node's cache: `phalanx cache ls` ------------------------------------------------------------------
    (entry,) = parse_table(runtime.cli("cache", "ls", check=True).stdout, "KEY")
    cache = admin.get(f"{API}/nodes/dgx-0/caches")
    assert cache.status_code == 200, cache.text
    (served,) = cache.json()["entries"]
    assert (
        (served["key"], served["dataset"], ", ".join(served["pinnedBy"]))
        == (
            entry["KEY"],
            entry["DATASET"],
            entry["PINNED BY"],
        )
        == (served["key"], "default/images", "default/big")
    )
    assert served["bytes"] == 3000 and cache.json()["counters"]["default/images"]["misses"] == 1

    # -- the queue: `phalanx get queues`, `describe queue` ---------------------------------------------------
    rows = {row["NAME"]: row for row in parse_table(runtime.cli("get", "queues", check=True).stdout)}
    usage = admin.get(f"{API}/queues/team-a/usage")
    assert usage.status_code == 200, usage.text
    body = usage.json()
    gpu = body["resources"]["gpu"]
    assert (gpu["used"], gpu["quota"], gpu["borrowed"]) == (3000, 2000, 1000)
    assert rows["team-a"]["GPU"] == "3/2 (+1)"
    assert (
        (str(body["admitted"]), str(body["pending"]))
        == (rows["team-a"]["ADMITTED"], rows["team-a"]["PENDING"])
        == ("1", "1")
    )
    (pending,) = body["pendingJobs"]
    assert (pending["name"], pending["phase"], pending["waitingFor"]) == ("waiter", "Queued", waiting.status.message)
    described = " ".join(runtime.cli("describe", "queue", "team-a", check=True).stdout.split())
    assert waiting.status.message.split(";")[0] in described

    # -- another tenant: the same numbers, none of our names ----------------------------------------------------
    theirs = stranger.get(f"{API}/nodes/dgx-0").json()["allocation"]
    assert theirs["gpus"] == 3 and {h["job"] for g in theirs["gpuHolders"] for h in g["holders"]} == {"in use"}
    their_cache = stranger.get(f"{API}/nodes/dgx-0/caches").json()
    assert [(e["dataset"], e["pinnedBy"]) for e in their_cache["entries"]] == [("hidden", ["in use"])]
    their_queue = stranger.get(f"{API}/queues/team-a/usage").json()
    assert (their_queue["pendingJobs"], their_queue["otherPending"], their_queue["otherAdmitted"]) == ([], 1, 1)
    for path in ("/nodes", "/nodes/dgx-0/caches", "/queues/team-a/usage"):
        text = stranger.get(f"{API}{path}").text
        assert "big" not in text and "waiter" not in text and "images" not in text, path
        assert httpx.get(f"{base}{API}{path}", timeout=10).status_code == 401

    hold.write_text("go")
    runtime.wait_phase("big", {Phase.SUCCEEDED, Phase.FAILED})
