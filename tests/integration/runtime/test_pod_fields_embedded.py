"""Pod fields with a meaning on the embedded runtime, on a real control plane (issue 16).

nodeSelector and tolerations are read against its nodes' labels and taints: on the two simulated nodes of
examples/inventories, with node-b given a label and node-a a label and a taint, a job selecting node-b's label
lands there; one selecting node-a without tolerating its taint waits, saying why; tolerating it, it runs there.
An env ``valueFrom.fieldRef`` reads the replica's own metadata. The fields it refuses are refused by the real CLI
(here, and in test_invalid_specs.py).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from conftest import REPO, Runtime, program_role, read_envs, typed_job, wait_until
from phalanx.model.jobs import Phase
from phalanx.model.replicas import Replica

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


def test_an_env_field_ref_reads_the_replicas_own_metadata(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane(extra=["--inventory", str(inventory(tmp_path))])
    envs = tmp_path / "env"
    role = program_role(2, args=["--env-dir", str(envs)], cpu=1, memory="1Gi")
    refs = {
        "POD_NAME": "metadata.name",
        "POD_NAMESPACE": "metadata.namespace",
        "NODE": "spec.nodeName",
        "POD_IP": "status.podIP",
        "TEAM": "metadata.labels['team']",
        "ROLE": "metadata.labels['phalanx.dev/role']",
        "NOTE": "metadata.annotations['note']",
        "ABSENT": "metadata.labels['absent']",
    }
    role["template"].update(  # type: ignore[union-attr]
        env=[{"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}} for name, path in refs.items()],
        metadata={"labels": {"team": "vision"}, "annotations": {"note": "from the template"}},
    )
    runtime.submit(typed_job("refs", "generic", {"worker": role}))
    runtime.wait_phase("refs", {Phase.SUCCEEDED})
    for replica, env in read_envs(envs).items():
        name = f"refs-{replica}"
        assert {key: env[key] for key in refs} == {
            "POD_NAME": name,
            "POD_NAMESPACE": "default",
            "NODE": "node-b",  # node-a is tainted
            "POD_IP": "127.0.0.1",
            "TEAM": "vision",
            "ROLE": "worker",
            "NOTE": "from the template",
            "ABSENT": "",
        }
    assert len(read_envs(envs)) == 2

    # A field an embedded replica does not have is refused by the real CLI, naming it; nothing is created.
    uid = typed_job("uid", "generic", {"worker": program_role(1)})
    uid["spec"]["replicas"]["worker"]["template"]["env"] = [  # type: ignore[index]
        {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}
    ]
    spec = runtime.write_job("uid", uid)
    result = runtime.cli("submit", str(spec))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "spec.replicas.worker.template.env.UID.valueFrom.fieldRef: an embedded replica has no Pod uid" in (
        " ".join(result.stderr.split())
    )


def test_a_host_path_at_its_own_path_and_shared_memory_at_dev_shm_are_kept(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane()
    shared = tmp_path / "shared"
    shared.mkdir()
    role = program_role(1, args=["--env-dir", str(shared)], cpu=1, memory="1Gi")
    role["template"].update(  # type: ignore[union-attr]
        volumes=[
            {"name": "shared", "hostPath": {"path": str(shared)}},
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
        ],
        volumeMounts=[{"name": "shared", "mountPath": str(shared)}, {"name": "shm", "mountPath": "/dev/shm"}],
    )
    runtime.submit(typed_job("mounts", "generic", {"worker": role}))
    runtime.wait_phase("mounts", {Phase.SUCCEEDED})
    # The replica wrote into the host directory at the path it was given.
    assert set(read_envs(shared)) == {"worker-0"}


def test_secrets_and_configmaps_are_files_of_the_state_directory_read_at_launch(
    runtime: Runtime, tmp_path: Path
) -> None:
    runtime.start_control_plane()
    envs = tmp_path / "env"
    role = program_role(1, args=["--env-dir", str(envs)], cpu=1, memory="1Gi")
    role["template"].update(  # type: ignore[union-attr]
        env=[
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub-token", "key": "token"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "m", "optional": True}}},
        ],
        envFrom=[{"prefix": "CFG_", "configMapRef": {"name": "train-config"}}],
    )
    config = runtime.state_dir / "configmaps" / "default" / "train-config"
    config.mkdir(parents=True)
    (config / "epochs").write_text("3")
    (config / "not-a-name").write_text("skipped")
    runtime.submit(typed_job("secret", "generic", {"worker": role}))

    # Like a Pod naming a Secret that does not exist yet, the replica waits, saying which file to create.
    secret = runtime.state_dir / "secrets" / "default" / "hub-token"
    with runtime.client() as client:
        message = wait_until(
            lambda: next(
                (r.status.message for r in client.store.list(Replica) if "waiting for secret" in r.status.message),
                None,
            ),
            message="the replica to wait for its secret",
        )
    assert f"create {secret / 'token'}" in message, message
    described = " ".join(runtime.cli("describe", "job", "secret", check=True).stdout.split())
    assert "waiting for secret default/hub-token" in described, described
    assert runtime.cli("get", "job", "secret", "-o", "yaml", check=True).stdout.count("s3cr3t") == 0

    secret.mkdir(parents=True)
    (secret / "token").write_text("s3cr3t")
    runtime.wait_phase("secret", {Phase.SUCCEEDED})
    env = read_envs(envs)["worker-0"]
    assert env["TOKEN"] == "s3cr3t"
    assert env["CFG_epochs"] == "3"
    assert "MODE" not in env  # optional and absent: not set, as on Kubernetes
    assert not any(key.startswith("CFG_not") for key in env)
    # The value was read at launch, never stored with the job or its replicas.
    with runtime.client() as client:
        stored = [r.model_dump_json() for r in client.store.list(Replica)]
    assert not any("s3cr3t" in text for text in stored)
