"""nodeSelector and tolerations on the embedded runtime: read against its nodes' labels and taints (issue 16).

A real control plane on the two simulated nodes of examples/inventories, with node-b given a label and node-a a
taint: a job selecting the label lands on node-b; a job that does not tolerate the taint avoids node-a, and one
that selects node-a without tolerating it waits, saying why; tolerating it, it runs there.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from conftest import REPO, Runtime, program_role, typed_job, wait_until
from phalanx.model.jobs import Phase

INVENTORY = REPO / "examples" / "inventories" / "two-nodes-4gpu.yaml"


def inventory(tmp_path: Path) -> Path:
    nodes = list(yaml.safe_load_all(INVENTORY.read_text()))
    by_name = {node["metadata"]["name"]: node for node in nodes}
    by_name["node-b"]["metadata"]["labels"]["pool"] = "fast"
    by_name["node-a"]["metadata"]["labels"]["pool"] = "reserved"
    by_name["node-a"].setdefault("spec", {})["taints"] = [{"key": "reserved", "value": "ops", "effect": "NoSchedule"}]
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump_all(nodes))
    return path


def job(name: str, hold: Path, **template: object) -> dict[str, object]:
    role = program_role(1, args=["--hold", str(hold)], cpu=1, memory="1Gi")
    role["template"].update(template)  # type: ignore[union-attr]
    return typed_job(name, "generic", {"worker": role})


def test_node_selector_and_tolerations_are_read_against_the_inventory(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane(extra=["--inventory", str(inventory(tmp_path))])

    runtime.submit(job("selected", tmp_path / "hold", nodeSelector={"pool": "fast"}))
    selected = runtime.wait_phase("selected", {Phase.RUNNING, Phase.SUCCEEDED})
    assert {p.node for p in selected.status.placements.values()} == {"node-b"}

    # node-a is tainted: without a toleration, a job selecting it waits and says why.
    runtime.submit(job("untolerated", tmp_path / "hold", nodeSelector={"pool": "reserved"}))
    runtime.wait_phase("untolerated", {Phase.QUEUED})
    with runtime.client() as client:
        message = wait_until(
            lambda: "taint" in (text := client.get("untolerated").status.message) and text,
            message="the waiting reason of the untolerated job",
        )
    assert "no taint it does not tolerate" in message, message
    assert "nodeSelector pool=reserved" in message, message

    tolerant = [{"key": "reserved", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}]
    runtime.submit(job("tolerated", tmp_path / "hold", nodeSelector={"pool": "reserved"}, tolerations=tolerant))
    tolerated = runtime.wait_phase("tolerated", {Phase.RUNNING, Phase.SUCCEEDED})
    assert {p.node for p in tolerated.status.placements.values()} == {"node-a"}
