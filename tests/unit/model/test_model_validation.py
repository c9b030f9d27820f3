"""Validation and defaulting of TrainingJob documents, without any store: pure functions of the document."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.model.errors import SpecError
from phalanx.model.jobs import Phase
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import builtin_jobtypes, parse_documents, parse_jobtype
from phalanx.model.validation import validate_job

JOBTYPES = builtin_jobtypes()


def job(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "generic", "replicas": {"worker": {"template": {"command": ["true"]}}}}
    body.update(spec)
    return {"metadata": {"name": "j"}, "spec": body}


def errors_of(document: Any) -> list[str]:
    with pytest.raises(SpecError) as caught:
        validate_job(document, JOBTYPES)
    return [str(e) for e in caught.value.errors]


def test_defaults_come_from_the_small_size_when_nothing_is_said() -> None:
    resources = validate_job(job(), JOBTYPES).spec.replicas["worker"].template.resources
    assert (resources.cpu, resources.memory, resources.gpu) == (1000, 2 * 2**30, 0)


def test_a_size_fills_only_what_the_template_leaves_unset() -> None:
    document = job(size="large")
    document["spec"]["replicas"]["worker"]["template"]["resources"] = {"gpu": 2}
    resources = validate_job(document, JOBTYPES).spec.replicas["worker"].template.resources
    assert (resources.cpu, resources.memory, resources.gpu) == (4000, 32 * 2**30, 2)


def test_a_role_size_beats_the_job_size() -> None:
    document = job(size="xlarge")
    document["spec"]["replicas"]["worker"]["template"]["size"] = "medium"
    resources = validate_job(document, JOBTYPES).spec.replicas["worker"].template.resources
    assert (resources.cpu, resources.gpu) == (2000, 0)


def test_gpu_share_clears_whole_gpus_from_the_size() -> None:
    document = job(size="large")
    document["spec"]["replicas"]["worker"]["template"]["resources"] = {"gpuMilli": 250}
    resources = validate_job(document, JOBTYPES).spec.replicas["worker"].template.resources
    assert (resources.gpu, resources.gpu_milli) == (0, 250)


def test_scheduling_gpu_model_reaches_every_role() -> None:
    resources = validate_job(job(scheduling={"gpuModel": "H100"}), JOBTYPES).spec.replicas["worker"].template.resources
    assert resources.gpu_model == "H100"


def test_env_as_kubernetes_list_becomes_a_mapping_of_strings() -> None:
    document = job()
    document["spec"]["replicas"]["worker"]["template"]["env"] = [
        {"name": "A", "value": 1},
        {"name": "B", "value": True},
    ]
    env = validate_job(document, JOBTYPES).spec.replicas["worker"].template.env
    assert env == {"A": "1", "B": "true"}


def test_status_in_a_submitted_document_is_ignored() -> None:
    document = job()
    document["status"] = {"phase": "Succeeded"}
    assert validate_job(document, JOBTYPES).status.phase == Phase.PENDING


def test_all_problems_are_reported_at_once() -> None:
    document = job(runPolicy={"backoffLimit": -1, "restartPolicy": "Always"})
    document["metadata"]["name"] = "Bad_Name"
    found = errors_of(document)
    assert len(found) == 3
    assert any(e.startswith("metadata.name:") for e in found)
    assert any(e.startswith("spec.runPolicy.backoffLimit: must be >= 0") for e in found)
    assert any(e.startswith("spec.runPolicy.restartPolicy:") for e in found)


def test_an_unknown_job_type_is_reported_with_the_shapes_problems_not_after_them() -> None:
    """A new user's trial fixed a file's errors in rounds: the unknown type came only once the shape was right."""
    document = job(type="pytorchh", runPolicy={"backoffLimit": -1})
    document["metadata"]["name"] = "Bad_Name"
    found = errors_of(document)
    assert [e.split(":")[0] for e in found] == ["metadata.name", "spec.runPolicy.backoffLimit", "spec.type"]
    assert found[-1] == "spec.type: unknown job type 'pytorchh'; did you mean 'pytorch'?"
    # A type that is no string is the shape's to report, once.
    assert [e.split(":")[0] for e in errors_of(job(type=["pytorch"]))] == ["spec.type"]


def test_a_queue_name_a_queue_could_not_have_is_refused() -> None:
    """A queue named 'Team_A' could never exist (a Queue's name is a DNS label): the job would wait for ever."""
    assert errors_of(job(scheduling={"queue": "Team_A"})) == [
        "spec.scheduling.queue: queue name 'Team_A' is not a DNS-1123 label: use lowercase letters, digits and '-', "
        "starting and ending with a letter or digit, e.g. 'team-a'"
    ]
    assert validate_job(job(scheduling={"queue": "team-a"}), JOBTYPES).spec.scheduling.queue == "team-a"


def test_a_name_longer_than_a_dns_label_is_refused() -> None:
    document = job()
    document["metadata"]["name"] = "a" * 64
    assert errors_of(document) == ["metadata.name: name is 64 characters; at most 63 are allowed"]


def test_a_document_that_is_not_a_mapping_is_refused() -> None:
    assert errors_of(["not", "a", "job"]) == ["a TrainingJob must be a mapping with metadata and spec"]


def test_role_commands_come_from_the_jobtype_role_template() -> None:
    custom = parse_jobtype(
        {
            "kind": "JobType",
            "metadata": {"name": "server-client"},
            "spec": {
                "roles": {
                    "server": {"template": {"command": ["serve"], "env": {"MODE": "fast"}}, "maxCount": 1},
                    "client": {"resources": {"cpu": "250m"}},
                },
                "env": {"SERVERS": "{{ hosts(server) }}"},
            },
        }
    )
    document = {
        "metadata": {"name": "sc"},
        "spec": {
            "type": "server-client",
            "replicas": {"server": {}, "client": {"count": 2, "template": {"command": ["ask"]}}},
        },
    }
    validated = validate_job(document, {**JOBTYPES, "server-client": custom})
    server = validated.spec.replicas["server"].template
    assert server.command == ["serve"]
    assert server.env == {"MODE": "fast"}
    assert validated.spec.replicas["client"].template.resources.cpu == 250


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param({"X": "{{ rnak }}"}, "unknown template variable 'rnak'", id="variable"),
        pytest.param({"X": "{{ host(ps, 0) }}"}, "names role 'ps'", id="role"),
        pytest.param({"X": "{{ host(worker) }}"}, "takes a role and an index", id="arity"),
        pytest.param({"X": "{{ shout(worker) }}"}, "unknown template function 'shout'", id="function"),
    ],
)
def test_jobtype_templates_are_checked_when_the_jobtype_is_loaded(env: dict[str, str], message: str) -> None:
    raw = {"kind": "JobType", "metadata": {"name": "t"}, "spec": {"roles": {"worker": {}}, "env": env}}
    with pytest.raises(SpecError) as caught:
        parse_jobtype(raw)
    assert any(message in str(e) and str(e).startswith("spec.env.X:") for e in caught.value.errors)


def test_builtin_jobtypes_are_valid_and_complete() -> None:
    assert set(JOBTYPES) == {"pytorch", "tensorflow", "mpi", "jax", "xgboost", "paddle", "generic"}
    assert all(isinstance(t, JobType) for t in JOBTYPES.values())
    assert JOBTYPES["tensorflow"].spec.service_roles == ["ps"]


def test_yaml_errors_name_the_line() -> None:
    with pytest.raises(SpecError, match="line 2"):
        parse_documents("a: 1\n  b: 2\nc: 3\n", source="x.yaml")


def test_json_is_accepted_as_yaml() -> None:
    assert parse_documents('{"metadata": {"name": "j"}}') == [{"metadata": {"name": "j"}}]


def test_a_role_without_count_gets_the_jobtype_default() -> None:
    document = {
        "metadata": {"name": "tf"},
        "spec": {"type": "tensorflow", "replicas": {"worker": {"template": {"command": ["train"]}}}},
    }
    assert validate_job(document, JOBTYPES).spec.replicas["worker"].count == 2  # tensorflow's defaultCount


def test_a_count_below_the_roles_minimum_is_refused() -> None:
    document = {
        "metadata": {"name": "m"},
        "spec": {
            "type": "mpi",
            "replicas": {
                "launcher": {"template": {"command": ["mpirun"]}},
                "worker": {"count": 0, "template": {"command": ["sleep"]}},
            },
        },
    }
    found = errors_of(document)
    assert "spec.replicas.worker.count: must be >= 1, got 0" in found


def test_a_template_naming_a_replica_the_job_lacks_is_refused_before_anything_runs() -> None:
    custom = parse_jobtype(
        {
            "kind": "JobType",
            "metadata": {"name": "pair"},
            "spec": {"roles": {"server": {}, "client": {}}, "env": {"BACKUP": "{{ host(server, 1) }}"}},
        }
    )
    document = {
        "metadata": {"name": "p"},
        "spec": {"type": "pair", "replicas": {"server": {"template": {"command": ["s"]}}}},
    }
    with pytest.raises(SpecError) as caught:
        validate_job(document, {"pair": custom})
    assert [str(e) for e in caught.value.errors] == [
        "spec.replicas.server: job type 'pair' uses host(server, 1) in env.BACKUP, so the job needs at least 2 "
        "'server' replica(s); it has 1"
    ]


def test_jobtype_errors_use_wire_field_names() -> None:
    raw = {"kind": "JobType", "metadata": {"name": "t"}, "spec": {"roles": {"a": {}}, "successRoles": ["b"]}}
    with pytest.raises(SpecError) as caught:
        parse_jobtype(raw)
    assert str(caught.value.errors[0]).startswith("spec.successRoles: 'b' is not one of the roles")


def test_builtin_jobtypes_carry_the_builtin_label() -> None:
    assert all(t.metadata.labels.get("phalanx.dev/builtin") == "true" for t in JOBTYPES.values())


def test_a_role_may_set_its_own_restart_policy() -> None:
    command = {"command": ["true"]}
    roles = {"master": {"restartPolicy": "Never", "template": command}, "worker": {"count": 2, "template": command}}
    spec = validate_job(job(type="xgboost", replicas=roles, runPolicy={"restartPolicy": "OnFailure"}), JOBTYPES).spec
    assert (spec.restart_policy_of("master"), spec.restart_policy_of("worker")) == ("Never", "OnFailure")


def test_a_roles_exit_codes_without_exit_code_policy_are_refused_at_their_path() -> None:
    worker = {"restartPolicy": "OnFailure", "retryableExitCodes": [137], "template": {"command": ["true"]}}
    assert errors_of(job(replicas={"worker": worker})) == [
        "spec.replicas.worker.retryableExitCodes: the role's restartPolicy is OnFailure, which reads no exit codes: "
        "set restartPolicy: ExitCode for the role or remove retryableExitCodes"
    ]
