"""The one validation door of the model layer (issue 13): names, quantities, durations, counts, NUL bytes,
``valueFrom``, output paths and JobType templates are refused at validation with their field path, before anything
can reach the store, the scheduler's int64 arrays or ``datetime`` arithmetic.

Every case is a document mutated from a valid job; each names the field path and a fragment of the fix.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from phalanx.model.bounds import MAX_REPLICA_CPU_MILLI, MAX_REPLICA_MEMORY
from phalanx.model.errors import SpecError, from_validation_error
from phalanx.model.loading import builtin_jobtypes, parse_dataset, parse_jobtype, parse_queue
from phalanx.model.meta import ObjectMeta, check_dns_label
from phalanx.model.nodes import Node
from phalanx.model.validation import parse_job, validate_job
from phalanx.services.operations import validate_documents

JOBTYPES = builtin_jobtypes()


def good() -> dict[str, Any]:
    return {
        "metadata": {"name": "j"},
        "spec": {
            "type": "generic",
            "replicas": {"worker": {"count": 1, "template": {"command": ["python", "train.py"]}}},
        },
    }


def mutate(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    document = copy.deepcopy(good())
    change(document)
    return document


def template(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["replicas"]["worker"]["template"]


def resources(**values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: template(d).update(resources=values)


def run_policy(**values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["spec"].update(runPolicy=values)


def role(name: str) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["spec"]["replicas"].update({name: d["spec"]["replicas"].pop("worker")})


def many_roles(roles: int, count: int) -> Callable[[dict[str, Any]], None]:
    def change(d: dict[str, Any]) -> None:
        spec = d["spec"]["replicas"].pop("worker")
        d["spec"]["replicas"] = {f"r{i}": {**spec, "count": count} for i in range(roles)}

    return change


def errors_of(document: Any) -> list[str]:
    with pytest.raises(SpecError) as caught:
        validate_job(document, JOBTYPES)
    return [str(e) for e in caught.value.errors]


REFUSED: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    # Defect 4: names and role names are DNS-1123 labels, matched in full (no trailing newline).
    ("name-trailing-newline", lambda d: d["metadata"].update(name="job\n"), "metadata.name", "not a DNS-1123 label"),
    ("name-nul", lambda d: d["metadata"].update(name="job\x00"), "metadata.name", "not a DNS-1123 label"),
    (
        "namespace-uppercase",
        lambda d: d["metadata"].update(namespace="Team-A"),
        "metadata.namespace",
        "namespace 'Team-A' is not a DNS-1123 label",
    ),
    ("role-parent-steps", role("../../x"), "spec.replicas.../../x", "role name '../../x' is not a DNS-1123 label"),
    ("role-slash", role("a/b"), "spec.replicas.a/b", "e.g. 'a-b'"),
    ("role-underscore", role("Worker_X"), "spec.replicas.Worker_X", "e.g. 'worker-x'"),
    ("role-empty", role(""), "spec.replicas", "role name must not be empty"),
    ("role-300-chars", role("x" * 300), "spec.replicas." + "x" * 300, "at most 63"),
    ("role-trailing-newline", role("worker\n"), "spec.replicas.worker\n", "not a DNS-1123 label"),
    # Defect 2: quantities are finite and bounded before they meet the scheduler's int64 arrays.
    ("cpu-huge", resources(cpu="999999999999999999999999999999"), "resources.cpu", "at most 1000000 cores"),
    ("cpu-inf", resources(cpu=math.inf), "resources.cpu", "finite"),
    ("cpu-nan", resources(cpu=math.nan), "resources.cpu", "finite"),
    ("cpu-inf-string", resources(cpu="inf"), "resources.cpu", "invalid CPU quantity"),
    ("memory-inf", resources(memory=math.inf), "resources.memory", "finite"),
    ("memory-nan", resources(memory=math.nan), "resources.memory", "finite"),
    ("memory-2pi", resources(memory="2Pi"), "resources.memory", "at most 1Pi"),
    ("memory-huge-int", resources(memory=10**30), "resources.memory", "at most 1Pi"),
    ("gpu-1025", resources(gpu=1025), "resources.gpu", "<= 1024"),
    ("gpu-milli-0", resources(gpuMilli=0), "resources.gpuMilli", ">= 1"),
    # Defect 4: durations and counts.
    ("deadline-1e12", run_policy(activeDeadlineSeconds=10**12), "runPolicy.activeDeadlineSeconds", "<= 315360000"),
    ("ttl-1e15", run_policy(ttlSecondsAfterFinished=10**15), "runPolicy.ttlSecondsAfterFinished", "<= 315360000"),
    ("ttl-1e20", run_policy(ttlSecondsAfterFinished=1e20), "runPolicy.ttlSecondsAfterFinished", ""),
    ("ttl-1e20-text", run_policy(ttlSecondsAfterFinished="1e20"), "runPolicy.ttlSecondsAfterFinished", ""),
    ("backoff-nan", run_policy(backoffSeconds=math.nan), "runPolicy.backoffSeconds", "finite"),
    ("backoff-inf", run_policy(maxBackoffSeconds=math.inf), "runPolicy.maxBackoffSeconds", "finite"),
    ("exit-code-256", run_policy(retryableExitCodes=[256]), "runPolicy.retryableExitCodes[0]", "<= 255"),
    ("priority-huge", lambda d: d["spec"].update(scheduling={"priority": 10**30}), "scheduling.priority", "<="),
    ("min-available-huge", lambda d: d["spec"].update(scheduling={"minAvailable": 10**9}), "minAvailable", "<="),
    ("roles-33", many_roles(33, 1), "spec.replicas", "at most 32 roles"),
    ("roles-100x4096", many_roles(100, 4096), "spec.replicas", "at most 32 roles"),
    ("replicas-per-job", many_roles(2, 4096), "spec.replicas", "at most 4096 replicas per job"),
    # Defect 8: NUL bytes and empty program names.
    ("command-nul", lambda d: template(d).update(command=["py\x00thon"]), "template.command[0]", "NUL"),
    ("args-nul", lambda d: template(d).update(args=["a", "b\x00"]), "template.args[1]", "NUL"),
    ("env-value-nul", lambda d: template(d).update(env={"A": "x\x00y"}), "template.env.A", "NUL"),
    ("workdir-nul", lambda d: template(d).update(workingDir="w\x00"), "template.workingDir", "NUL"),
    ("image-nul", lambda d: template(d).update(image="img\x00"), "template.image", "NUL"),
    ("label-nul", lambda d: d["metadata"].update(labels={"a": "b\x00"}), "metadata.labels.a", "NUL"),
    ("command-empty-program", lambda d: template(d).update(command=[""]), "template.command[0]", "empty"),
    ("command-blank-program", lambda d: template(d).update(command=["  "]), "template.command[0]", "empty"),
    ("env-entries", lambda d: template(d).update(env={f"V{i}": "" for i in range(1025)}), "template.env", "1024"),
    ("env-value-long", lambda d: template(d).update(env={"A": "x" * (128 * 1024 + 1)}), "template.env.A", "128 KiB"),
    ("args-long", lambda d: template(d).update(args=["x"] * 4096), "template", "4096"),
    # Defect 9: valueFrom is never dropped: kept in envValueFrom (tests/unit/model/test_pod_fields.py), and a
    # malformed one is refused at the path the user wrote.
    (
        "env-value-from",
        lambda d: template(d).update(env=[{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s"}}}]),
        "spec.replicas.worker.template.env[0].valueFrom.secretKeyRef.key",
        "required",
    ),
    # Defect 8: outputs.path names a subdirectory of the replica's working directory.
    ("outputs-dot", lambda d: d["spec"].update(outputs={"path": "."}), "spec.outputs.path", "subdirectory"),
    ("outputs-empty", lambda d: d["spec"].update(outputs={"path": ""}), "spec.outputs.path", "subdirectory"),
    ("outputs-dot-slash", lambda d: d["spec"].update(outputs={"path": "./"}), "spec.outputs.path", "subdirectory"),
]


@pytest.mark.parametrize(("change", "path", "fix"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_a_bad_job_is_refused_naming_the_field(change: Callable[[dict[str, Any]], None], path: str, fix: str) -> None:
    found = errors_of(mutate(change))
    assert any(path in error.split(": ", 1)[0] and fix in error for error in found), found


ACCEPTED: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("cpu-at-limit", resources(cpu=MAX_REPLICA_CPU_MILLI // 1000)),
    ("memory-at-limit", resources(memory=MAX_REPLICA_MEMORY)),
    ("memory-1pi", resources(memory="1Pi")),
    ("gpu-1024", resources(gpu=1024)),
    ("deadline-10-years", run_policy(activeDeadlineSeconds=315_360_000)),
    ("ttl-zero", run_policy(ttlSecondsAfterFinished=0)),
    ("roles-32", many_roles(32, 128)),
    ("role-with-digits-and-dash", role("worker-2")),
    ("env-list-with-value", lambda d: template(d).update(env=[{"name": "A", "value": "1"}])),
    ("outputs-subdir", lambda d: d["spec"].update(outputs={"path": "out/model"})),
    ("env-1024", lambda d: template(d).update(env={f"V{i}": "" for i in range(1024)})),
]


@pytest.mark.parametrize("change", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_values_at_the_limits_are_accepted(change: Callable[[dict[str, Any]], None]) -> None:
    validate_job(mutate(change), JOBTYPES)


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        pytest.param("job\n", "not a DNS-1123 label", id="trailing-newline"),
        pytest.param("Team-A", "e.g. 'team-a'", id="uppercase"),
        pytest.param("", "must not be empty", id="empty"),
        pytest.param("-a", "not a DNS-1123 label", id="leading-dash"),
        pytest.param("a" * 64, "at most 63", id="64-chars"),
    ],
)
def test_dns_labels_are_matched_in_full(value: str, fix: str) -> None:
    with pytest.raises(ValueError, match=fix):
        check_dns_label(value, "namespace")


def test_metadata_names_its_namespace_as_namespace() -> None:
    with pytest.raises(ValueError, match="namespace 'Team-A' is not a DNS-1123 label"):
        ObjectMeta(name="ok", namespace="Team-A")


def test_a_valid_model_refuses_an_invalid_assignment() -> None:
    job = parse_job(good())
    with pytest.raises(ValueError, match="DNS-1123"):
        job.metadata.namespace = "Team-A"


def test_a_namespace_override_is_validated_and_applied_before_anything_is_returned() -> None:
    with pytest.raises(SpecError) as caught:
        validate_documents([good()], JOBTYPES, namespace="Team-A")
    assert [str(e) for e in caught.value.errors] == [
        "namespace 'Team-A' is not a DNS-1123 label: use lowercase letters, digits and '-', starting and ending "
        "with a letter or digit, e.g. 'team-a'"
    ]
    (job,) = validate_documents([good()], JOBTYPES, namespace="team-a")
    assert job.metadata.namespace == "team-a"


def test_a_namespace_override_leaves_queues_cluster_scoped() -> None:
    queue = {"kind": "Queue", "metadata": {"name": "q"}, "spec": {}}
    parsed = validate_documents([queue, good()], JOBTYPES, namespace="team-a")
    assert [o.metadata.namespace for o in parsed] == ["default", "team-a"]


def jobtype(**spec: Any) -> dict[str, Any]:
    return {"kind": "JobType", "metadata": {"name": "t"}, "spec": {"roles": {"worker": {}}, **spec}}


def jobtype_errors(document: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_jobtype(document)
    return [str(e) for e in caught.value.errors]


def test_jobtype_reports_every_bad_env_template_at_once() -> None:
    found = jobtype_errors(
        jobtype(
            env={"A": "{{ rnak }}", "B": "{{ shout(worker) }}"},
            roles={"worker": {"env": {"C": "{{ host(worker) }}"}}},
        )
    )
    assert any(e.startswith("spec.env.A: unknown template variable 'rnak'") for e in found), found
    assert any(e.startswith("spec.env.B: unknown template function 'shout'") for e in found), found
    assert any(e.startswith("spec.roles.worker.env.C:") and "takes a role and an index" in e for e in found), found


@pytest.mark.parametrize(
    ("spec", "path", "fix"),
    [
        pytest.param({"roles": {"Bad_Role": {}}}, "spec.roles.Bad_Role", "e.g. 'bad-role'", id="role-name"),
        pytest.param({"roles": {"a/b": {}}}, "spec.roles.a/b", "DNS-1123", id="role-slash"),
        pytest.param({"roles": {f"r{i}": {} for i in range(33)}}, "spec.roles", "at most 32", id="roles-33"),
        pytest.param({"port": 70000}, "spec.port", "<= 65535", id="port"),
        pytest.param({"slotsPerHost": 10**9}, "spec.slotsPerHost", "<= 1024", id="slots"),
        pytest.param({"roles": {"w": {"defaultCount": 5000}}}, "spec.roles.w.defaultCount", "<= 4096", id="default"),
        pytest.param({"roles": {"w": {"minCount": 5000}}}, "spec.roles.w.minCount", "<= 4096", id="min"),
        pytest.param({"roles": {"w": {"maxCount": 5000}}}, "spec.roles.w.maxCount", "<= 4096", id="max"),
        pytest.param(
            {"roles": {"w": {"resources": {"cpu": math.inf}}}}, "spec.roles.w.resources.cpu", "finite", id="cpu"
        ),
        pytest.param({"env": {"A": "x\x00"}}, "spec.env.A", "NUL", id="env-nul"),
        pytest.param(
            {"env": [{"name": "A", "valueFrom": {"fieldRef": {}}}]}, "spec.env[0].valueFrom", "the job's", id="vf"
        ),
    ],
)
def test_a_bad_jobtype_is_refused_naming_the_field(spec: dict[str, Any], path: str, fix: str) -> None:
    document = jobtype(**spec)
    found = jobtype_errors(document)
    assert any(e.split(": ", 1)[0] == path and fix in e for e in found), found


def queue(**spec: Any) -> dict[str, Any]:
    return {"kind": "Queue", "metadata": {"name": "q"}, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "path", "fix"),
    [
        pytest.param({"quota": {"cpu": "9" * 30}}, "spec.quota.cpu", "at most", id="quota-cpu"),
        pytest.param({"quota": {"cpu": math.inf}}, "spec.quota.cpu", "finite", id="quota-cpu-inf"),
        pytest.param({"quota": {"memory": math.inf}}, "spec.quota.memory", "finite", id="quota-memory-inf"),
        pytest.param({"quota": {"memory": "9" * 30}}, "spec.quota.memory", "at most", id="quota-memory"),
        pytest.param({"quota": {"gpu": 10**30}}, "spec.quota.gpu", "<=", id="quota-gpu"),
        pytest.param({"weight": math.nan}, "spec.weight", "finite", id="weight-nan"),
        pytest.param({"weight": math.inf}, "spec.weight", "finite", id="weight-inf"),
        pytest.param({"cohort": "c\n"}, "spec.cohort", "DNS-1123", id="cohort-newline"),
    ],
)
def test_a_bad_queue_is_refused_naming_the_field(spec: dict[str, Any], path: str, fix: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_queue(queue(**spec))
    found = [str(e) for e in caught.value.errors]
    assert any(e.split(": ", 1)[0] == path and fix in e for e in found), found


@pytest.mark.parametrize(
    ("source", "path"),
    [
        pytest.param({"path": "/data\x00"}, "spec.source.path", id="path"),
        pytest.param({"url": "https://h/x\x00"}, "spec.source.url", id="url"),
        pytest.param({"script": {"command": ["make\x00"]}}, "spec.source.script.command[0]", id="script"),
        pytest.param({"sql": {"url": "sqlite:///a.db", "query": "select\x00"}}, "spec.source.sql.query", id="sql"),
    ],
)
def test_a_dataset_with_a_nul_byte_is_refused(source: dict[str, Any], path: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_dataset({"kind": "Dataset", "metadata": {"name": "d"}, "spec": {"source": source}})
    found = [str(e) for e in caught.value.errors]
    assert any(e.split(": ", 1)[0] == path and "NUL" in e for e in found), found


def node(**status: Any) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": "n"}, "status": status}


@pytest.mark.parametrize(
    ("status", "fix"),
    [
        pytest.param({"memory": 10**30}, "<= 1125899906842624", id="memory"),
        pytest.param({"cpus": [{"id": 10**30}]}, "<= 65535", id="cpu-id"),
        pytest.param({"cpus": [{"id": 0, "numa": 10**30}]}, "<= 65535", id="numa"),
        pytest.param({"gpus": [{"index": 10**30}]}, "<= 1023", id="gpu-index"),
        pytest.param({"gpus": [{"index": 0, "memory": 10**30}]}, "<= 1125899906842624", id="gpu-memory"),
        pytest.param({"gpus": [{"index": 0, "nvlinks": {1: 10**30}}]}, "<= 64", id="nvlinks"),
    ],
)
def test_node_inventory_numbers_are_bounded(status: dict[str, Any], fix: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Node.model_validate(node(**status))
    found = [str(e) for e in from_validation_error(caught.value)]
    assert any(e.startswith("status.") and fix in e for e in found), found


def test_an_error_keeps_to_a_readable_length_with_its_start_and_its_fix() -> None:
    from phalanx.model.errors import MAX_MESSAGE_CHARS, FieldError

    value = "x" * 100_000
    error = FieldError("spec.source.url", f"{value!r} is not a URL with a scheme; write e.g. https://host/data.csv")
    assert len(error.message) == MAX_MESSAGE_CHARS
    assert error.message.startswith("'xxx") and error.message.endswith("write e.g. https://host/data.csv")
    assert FieldError("a", "short").message == "short"


@pytest.mark.parametrize("value", [1, 0, "no", "yes", "true", "off"], ids=repr)
@pytest.mark.parametrize("field", ["gangRestart", "suspend"])
def test_a_switch_takes_true_or_false_only_not_numbers_or_words(field: str, value: Any) -> None:
    """YAML's true/false only: `1`, `"yes"` or `"off"` were converted silently (found trying issue 14 as a new user)."""
    with pytest.raises(SpecError) as refused:
        validate_job(mutate(run_policy(**{field: value})), builtin_jobtypes())
    (error,) = refused.value.errors
    assert error.path == f"spec.runPolicy.{field}" and error.message.startswith("must be true or false"), error
