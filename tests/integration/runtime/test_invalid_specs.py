"""Bad input through the real CLI and store: a field-path error with a fix, exit code 2, nothing created,
nothing already stored disturbed."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from conftest import Runtime, generic_job
from phalanx.entrypoints.client import Client
from phalanx.model.errors import SpecError
from phalanx.model.jobs import TrainingJob


def base() -> dict[str, Any]:
    return generic_job("bad")


def mutate(change: Callable[[dict[str, Any]], None], start: Callable[[], dict[str, Any]] = base) -> dict[str, Any]:
    document = copy.deepcopy(start())
    change(document)
    return document


def worker(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["replicas"]["worker"]["template"]


def pytorch() -> dict[str, Any]:
    doc = generic_job("bad", job_type="pytorch")
    doc["spec"]["replicas"]["master"] = copy.deepcopy(doc["spec"]["replicas"]["worker"])
    return doc


CASES: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "count-zero",
        mutate(lambda d: d["spec"]["replicas"]["worker"].update(count=0)),
        "spec.replicas.worker.count",
        "must be >= 1, got 0",
    ),
    (
        "unknown-type",
        mutate(lambda d: d["spec"].update(type="pytorh")),
        "spec.type",
        "did you mean 'pytorch'",
    ),
    (
        "misspelt-field",
        mutate(lambda d: d["spec"]["runPolicy"].update(backofLimit=2)),
        "spec.runPolicy.backofLimit",
        "did you mean 'backoffLimit'",
    ),
    (
        "bad-cpu",
        mutate(lambda d: worker(d)["resources"].update(cpu="2x")),
        "spec.replicas.worker.template.resources.cpu",
        "millicores",
    ),
    (
        "bad-memory-unit",
        mutate(lambda d: worker(d)["resources"].update(memory="4GB")),
        "spec.replicas.worker.template.resources.memory",
        "Gi",
    ),
    ("name-not-dns", mutate(lambda d: d["metadata"].update(name="My_Job")), "metadata.name", "'my-job'"),
    (
        "no-command",
        mutate(lambda d: worker(d).pop("command")),
        "spec.replicas.worker.template.command",
        "the program to run",
    ),
    (
        "role-not-in-type",
        mutate(lambda d: d["spec"]["replicas"].update(chef=d["spec"]["replicas"].pop("worker")), pytorch),
        "spec.replicas.chef",
        "has no role 'chef'",
    ),
    (
        "count-above-max",
        mutate(lambda d: d["spec"]["replicas"]["master"].update(count=2), pytorch),
        "spec.replicas.master.count",
        "at most 1",
    ),
    (
        "gpu-and-gpumilli",
        mutate(lambda d: worker(d)["resources"].update(gpu=1, gpuMilli=500)),
        "spec.replicas.worker.template.resources",
        "exclusive",
    ),
    (
        "gpumilli-too-big",
        mutate(lambda d: worker(d)["resources"].update(gpuMilli=1500)),
        "spec.replicas.worker.template.resources.gpuMilli",
        "<= 1000",
    ),
    (
        "minavailable-too-big",
        mutate(lambda d: d["spec"].update(scheduling={"minAvailable": 5})),
        "spec.scheduling.minAvailable",
        "must be <= the job's 1 replica(s)",
    ),
    (
        "bad-restart-policy",
        mutate(lambda d: d["spec"]["runPolicy"].update(restartPolicy="Sometimes")),
        "spec.runPolicy.restartPolicy",
        "'Never', 'OnFailure' or 'ExitCode'",
    ),
    (
        "outputs-escape",
        mutate(lambda d: d["spec"].update(outputs={"path": "../elsewhere"})),
        "spec.outputs.path",
        "without '..'",
    ),
    (
        "bad-env-name",
        mutate(lambda d: worker(d).update(env={"MY-VAR": "1"})),
        "spec.replicas.worker.template.env.MY-VAR",
        "valid variable name",
    ),
    (
        "reserved-env",
        mutate(lambda d: worker(d).update(env={"PHALANX_RANK": "1"})),
        "spec.replicas.worker.template.env.PHALANX_RANK",
        "reserved",
    ),
    (
        "mpi-without-launcher",
        mutate(lambda d: d["spec"].update(type="mpi")),
        "spec.replicas.launcher",
        "needs at least 1 'launcher'",
    ),
    (
        "unknown-priority-class",
        mutate(lambda d: d["spec"].update(scheduling={"priorityClass": "urgent"})),
        "spec.scheduling.priorityClass",
        "use one of low, normal, high, critical",
    ),
    ("no-roles", mutate(lambda d: d["spec"].update(replicas={})), "spec.replicas", "at least one role"),
    ("wrong-kind", mutate(lambda d: d.update(kind="TrainingJobs")), "kind", "TrainingJob"),
    (
        "negative-backoff",
        mutate(lambda d: d["spec"]["runPolicy"].update(backoffLimit=-1)),
        "spec.runPolicy.backoffLimit",
        "must be >= 0, got -1",
    ),
    (
        "bad-placement",
        mutate(lambda d: d["spec"].update(scheduling={"placement": "dense"})),
        "spec.scheduling.placement",
        "'pack'",
    ),
    ("missing-metadata", mutate(lambda d: d.pop("metadata")), "metadata", "required field is missing"),
    # Issue 13: each of these was admitted and then wedged or crashed the control plane.
    ("name-newline", mutate(lambda d: d["metadata"].update(name="bad\n")), "metadata.name", "DNS-1123"),
    (
        "role-parent-steps",
        mutate(lambda d: d["spec"]["replicas"].update({"../../x": d["spec"]["replicas"].pop("worker")})),
        "spec.replicas.../../x",
        "role name '../../x' is not a DNS-1123 label",
    ),
    (
        "cpu-huge",
        mutate(lambda d: worker(d)["resources"].update(cpu="999999999999999999999999999999")),
        "spec.replicas.worker.template.resources.cpu",
        "at most 1000000 cores per replica",
    ),
    (
        "memory-inf",
        mutate(lambda d: worker(d)["resources"].update(memory=float("inf"))),
        "spec.replicas.worker.template.resources.memory",
        "finite",
    ),
    (
        "deadline-huge",
        mutate(lambda d: d["spec"]["runPolicy"].update(activeDeadlineSeconds=10**12)),
        "spec.runPolicy.activeDeadlineSeconds",
        "must be <= 315360000",
    ),
    (
        "command-empty-program",
        mutate(lambda d: worker(d).update(command=[""])),
        "spec.replicas.worker.template.command[0]",
        "the program name is empty",
    ),
    (
        "env-value-from",
        mutate(lambda d: worker(d).update(env=[{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s"}}}])),
        "spec.replicas.worker.template.env[0].valueFrom.secretKeyRef.key",
        "Field required",
    ),
    # Issue 16: pod fields the embedded runtime cannot honour are refused naming them, never dropped.
    (
        "env-value-from-embedded",
        mutate(
            lambda d: worker(d).update(env=[{"name": "ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}])
        ),
        "spec.replicas.worker.template.env.ID.valueFrom.fieldRef",
        "no Pod uid",
    ),
    (
        "volume-mounts-embedded",
        mutate(
            lambda d: worker(d).update(
                volumes=[{"name": "data", "hostPath": {"path": "/data"}}],
                volumeMounts=[{"name": "data", "mountPath": "/mnt/data"}],
            )
        ),
        "spec.replicas.worker.template.volumeMounts[0]",
        "hostPath /data cannot appear at /mnt/data",
    ),
    (
        "affinity-embedded",
        mutate(lambda d: worker(d).update(affinity={"podAntiAffinity": {}})),
        "spec.replicas.worker.template.affinity",
        "use nodeSelector",
    ),
    (
        "outputs-dot",
        mutate(lambda d: d["spec"].update(outputs={"path": "."})),
        "spec.outputs.path",
        "subdirectory of the replica's working directory",
    ),
]


@pytest.fixture
def seeded(runtime: Runtime) -> TrainingJob:
    """A valid job already in the store, which no bad submission may disturb."""
    runtime.submit(generic_job("existing"))
    with runtime.client() as client:
        return client.get("existing")


@pytest.mark.parametrize(("document", "path", "fix"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_spec_names_the_field_and_creates_nothing(
    runtime: Runtime, seeded: TrainingJob, document: dict[str, Any], path: str, fix: str
) -> None:
    spec_file = runtime.write_job("bad", document)
    result = runtime.cli("submit", str(spec_file))
    assert result.returncode == 2, result.stdout + result.stderr
    flat = " ".join(result.stderr.split())
    assert f"{path}:" in flat, flat
    assert fix in flat, flat
    assert "nothing was created" in flat
    with runtime.client() as client:
        jobs = client.list()
    assert [j.metadata.name for j in jobs] == ["existing"]
    assert jobs[0].metadata.resource_version == seeded.metadata.resource_version


def assert_store_holds_only(runtime: Runtime, names: list[str]) -> None:
    with runtime.client() as client:
        assert sorted(j.metadata.name for j in client.ops.list_jobs(None)) == names  # every namespace


BAD_NAMESPACE = "error: namespace 'Team-A' is not a DNS-1123 label"


def test_a_bad_namespace_on_submit_is_refused_and_stores_nothing(runtime: Runtime, seeded: TrainingJob) -> None:
    spec_file = runtime.write_job("good", generic_job("good"))
    result = runtime.cli("submit", "-n", "Team-A", str(spec_file))
    assert result.returncode == 2, result.stdout + result.stderr
    flat = " ".join(result.stderr.split())
    assert BAD_NAMESPACE in flat and "e.g. 'team-a'" in flat, flat
    assert "Traceback" not in result.stderr
    assert_store_holds_only(runtime, ["existing"])


def test_a_bad_namespace_through_the_sdk_is_a_spec_error_and_stores_nothing(runtime: Runtime) -> None:
    with Client(state_dir=runtime.state_dir, namespace="Team-A") as client, pytest.raises(SpecError) as caught:
        client.submit(generic_job("good"))
    assert "namespace 'Team-A' is not a DNS-1123 label" in str(caught.value)
    assert_store_holds_only(runtime, [])


def test_a_dry_run_shows_the_namespace_it_was_given(runtime: Runtime) -> None:
    spec_file = runtime.write_job("good", generic_job("good"))
    result = runtime.cli("submit", "--dry-run", "-n", "team-x", str(spec_file), check=True)
    assert yaml.safe_load(result.stdout)["metadata"]["namespace"] == "team-x"
    refused = runtime.cli("submit", "--dry-run", "-n", "Team-X", str(spec_file))
    assert refused.returncode == 2 and "namespace 'Team-X' is not a DNS-1123 label" in refused.stderr


def test_poison_inputs_leave_a_running_control_plane_healthy(runtime: Runtime) -> None:
    """A bad -n and a huge quantity, through `run` with the control plane up, then a good job, then down/up."""
    plane = runtime.start_control_plane()
    good = runtime.write_job("good", generic_job("good"))
    bad_namespace = runtime.cli("run", "-n", "Team-A", str(good), "--no-logs")
    assert bad_namespace.returncode == 2, bad_namespace.stdout + bad_namespace.stderr
    assert BAD_NAMESPACE in " ".join(bad_namespace.stderr.split())
    huge = runtime.write_job("huge", mutate(lambda d: worker(d)["resources"].update(cpu="9" * 30)))
    refused = runtime.cli("run", str(huge), "--no-logs")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "spec.replicas.worker.template.resources.cpu" in refused.stderr
    assert "Traceback" not in bad_namespace.stderr + refused.stderr
    assert_store_holds_only(runtime, [])
    assert plane.process.poll() is None, plane.log()

    ran = runtime.cli("run", str(good), "--no-logs")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert plane.process.poll() is None, plane.log()
    assert "control plane stopped" in runtime.cli("down", check=True).stdout
    assert "control plane started" in runtime.cli("up", check=True).stdout
    again = runtime.write_job("again", generic_job("again"))
    try:
        assert runtime.cli("run", str(again), "--no-logs").returncode == 0
    finally:
        runtime.cli("down")


def test_at_least_fifteen_distinct_invalid_specs_are_covered() -> None:
    assert len({path for _, _, path, _ in CASES}) >= 15


def test_one_bad_document_in_a_file_creates_none_of_them(runtime: Runtime, seeded: TrainingJob) -> None:
    good = generic_job("good")
    bad = mutate(lambda d: d["spec"]["replicas"]["worker"].update(count=0))
    path = runtime.work_dir / "two.yaml"
    path.write_text(yaml.safe_dump_all([good, bad], sort_keys=False))
    result = runtime.cli("submit", str(path))
    assert result.returncode == 2
    assert "document 2" in result.stderr
    with runtime.client() as client:
        assert [j.metadata.name for j in client.list()] == ["existing"]


def test_text_that_is_not_yaml_is_reported_with_its_line(runtime: Runtime, seeded: TrainingJob) -> None:
    path = runtime.work_dir / "broken.yaml"
    path.write_text("metadata:\n  name: x\nspec: [unclosed\n")
    result = runtime.cli("submit", str(path))
    assert result.returncode == 2
    assert "not valid YAML at line" in " ".join(result.stderr.split())


def test_a_missing_file_is_a_clear_error(runtime: Runtime) -> None:
    result = runtime.cli("submit", "no-such-file.yaml")
    assert result.returncode == 2
    assert "file not found" in result.stderr
