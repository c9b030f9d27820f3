"""Pod fields of a replica template (model.pods): kept as written, refused with their path when malformed.

Issue 16 found that an env ``valueFrom`` could be lost; it was then refused, and is now kept (``envValueFrom``)
and rendered into the Pod. Never dropped: either it reaches the Pod, or the job is refused naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phalanx.model.errors import SpecError
from phalanx.model.loading import builtin_jobtypes, parse_jobtype, read_documents
from phalanx.model.pods import EMBEDDED_REFUSALS, PodFields, refused_pod_fields, set_pod_fields
from phalanx.model.validation import validate_job
from phalanx.services.operations import validate_documents

EVERY_FIELD = Path(__file__).resolve().parents[2] / "data" / "pod-fields" / "every-field.yaml"
SECRET = {"secretKeyRef": {"name": "hub-token", "key": "token"}}


def job_with(template: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "j"},
        "spec": {"replicas": {"worker": {"template": {"command": ["python", "train.py"], **template}}}},
    }


def errors_of(template: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as caught:
        validate_job(job_with(template), builtin_jobtypes())
    return [f"{e.path}: {e.message}" for e in caught.value.errors]


@pytest.mark.parametrize(
    "env",
    [
        pytest.param([{"name": "A", "value": "1"}, {"name": "TOKEN", "valueFrom": SECRET}], id="list"),
        pytest.param({"A": "1", "TOKEN": {"valueFrom": SECRET}}, id="mapping"),
    ],
)
def test_an_env_value_from_is_kept_not_dropped(env: Any) -> None:
    template = validate_job(job_with({"env": env}), builtin_jobtypes()).spec.replicas["worker"].template
    assert template.env == {"A": "1"}
    assert template.env_value_from["TOKEN"].to_dict() == SECRET
    # Stored and read back (the CRD's form): the same.
    again = validate_job(validate_job(job_with({"env": env}), builtin_jobtypes()).to_dict(), builtin_jobtypes())
    assert again.spec.replicas["worker"].template.env_value_from["TOKEN"].to_dict() == SECRET


@pytest.mark.parametrize(
    ("template", "path", "fix"),
    [
        (
            {"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s"}}}]},
            "env[0].valueFrom.secretKeyRef.key",
            "required",
        ),
        ({"env": [{"name": "T", "value": "x", "valueFrom": SECRET}]}, "env[0].valueFrom", "not both"),
        ({"env": [{"valueFrom": SECRET}]}, "env[0].name", "required"),
        ({"env": [{"name": "T", "valueFrom": {}}]}, "env[0].valueFrom", "exactly one"),
        (
            {"env": [{"name": "T", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]},
            "env[0].valueFrom.resourceFieldRef",
            "unknown field",
        ),
        (
            {"env": {"T": {"valueFrom": {"fieldRef": {"fieldPath": "spec.hostname"}}}}},
            "env.T.valueFrom.fieldRef.fieldPath",
            "metadata.name",
        ),
        ({"env": {"T": "1"}, "envValueFrom": {"T": SECRET}}, "envValueFrom.T", "also in env"),
        ({"env": [{"name": "PHALANX_X", "valueFrom": SECRET}]}, "envValueFrom.PHALANX_X", "reserved"),
        ({"volumeMounts": [{"name": "data", "mountPath": "/data"}]}, "volumeMounts[0].name", "no volume 'data'"),
        ({"volumes": [{"name": "d", "hostPath": {"path": "/x"}, "emptyDir": {}}]}, "volumes[0]", "exactly one"),
        ({"volumes": [{"name": "d", "nfs": {"server": "x", "path": "/"}}]}, "volumes[0].nfs", "unknown field"),
        ({"volumes": [{"name": "outputs", "emptyDir": {}}]}, "volumes[0].name", "Phalanx's own"),
        ({"volumes": [{"name": "Data", "emptyDir": {}}]}, "volumes[0].name", "DNS-1123"),
        ({"volumes": [{"name": "d", "hostPath": {"path": "rel"}}]}, "volumes[0].hostPath.path", "absolute"),
        ({"volumes": [{"name": "d", "emptyDir": {"medium": "HugePages"}}]}, "volumes[0].emptyDir.medium", "Memory"),
        (
            {"volumes": [{"name": "d", "emptyDir": {}}], "volumeMounts": [{"name": "d", "mountPath": "/phalanx/o"}]},
            "volumeMounts[0].mountPath",
            "Phalanx mounts",
        ),
        (
            {
                "volumes": [{"name": "d", "emptyDir": {}}],
                "volumeMounts": [{"name": "d", "mountPath": "/d", "subPath": "../x"}],
            },
            "volumeMounts[0].subPath",
            "relative",
        ),
        ({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}, "tolerations[0].value", "empty"),
        ({"tolerations": [{"operator": "Equal", "value": "v"}]}, "tolerations[0].operator", "Exists"),
        ({"tolerations": [{"key": "k", "tolerationSeconds": 5}]}, "tolerations[0].tolerationSeconds", "NoExecute"),
        (
            {
                "affinity": {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
                }
            },
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
            "at least 1",
        ),
        ({"securityContext": {"runAsUser": -1}}, "securityContext.runAsUser", ">= 0"),
        ({"securityContext": {"privileged": True}}, "securityContext.privileged", "unknown field"),
        ({"initContainers": [{"name": "replica"}]}, "initContainers[0].name", "replica's own"),
        ({"initContainers": [{"name": "a"}], "sidecars": [{"name": "a"}]}, "initContainers", "named twice"),
        (
            {"sidecars": [{"name": "s", "volumeMounts": [{"name": "v", "mountPath": "/v"}]}]},
            "sidecars[0].volumeMounts[0].name",
            "no volume",
        ),
        ({"volumeMount": []}, "volumeMount", "volumeMounts"),
    ],
)
def test_a_malformed_pod_field_is_refused_at_its_path(template: dict[str, Any], path: str, fix: str) -> None:
    found = errors_of(template)
    prefix = f"spec.replicas.worker.template.{path}: "
    assert any(e.startswith(prefix) and fix in e for e in found), found


def test_every_field_of_the_example_is_set_and_kept_through_a_round_trip() -> None:
    job = validate_job(read_documents(EVERY_FIELD)[0], builtin_jobtypes())
    template = job.spec.replicas["worker"].template
    assert set_pod_fields(template) == [f.alias for f in PodFields.model_fields.values()]
    assert validate_job(job.to_dict(), builtin_jobtypes()) == job


def test_the_jobtype_role_template_gives_the_pod_fields_a_job_leaves_empty() -> None:
    jobtype = parse_jobtype(
        {
            "metadata": {"name": "shm-type"},
            "spec": {
                "roles": {
                    "worker": {
                        "template": {
                            "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
                            "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
                            "nodeSelector": {"pool": "gpu"},
                        }
                    }
                }
            },
        }
    )
    document = job_with({"nodeSelector": {"pool": "cpu"}})
    document["spec"]["type"] = "shm-type"
    template = validate_job(document, {"shm-type": jobtype}).spec.replicas["worker"].template
    assert template.node_selector == {"pool": "cpu"}  # the job's own wins
    assert [v.name for v in template.volumes] == ["shm"]
    assert [m.mount_path for m in template.volume_mounts] == ["/dev/shm"]


def test_the_embedded_door_refuses_every_pod_field_naming_its_path() -> None:
    with pytest.raises(SpecError) as caught:
        validate_documents(read_documents(EVERY_FIELD), builtin_jobtypes(), pod_field_refusals=EMBEDDED_REFUSALS)
    paths = {e.path for e in caught.value.errors}
    root = "spec.replicas.worker.template"
    # The example has a command: "command" (none given: the image's entrypoint) is the one refusal it does not meet.
    expected = {f"{root}.{alias}" for alias in EMBEDDED_REFUSALS if not alias.startswith("envValueFrom")}
    expected -= {f"{root}.command"}
    # env valueFrom and envFrom have a meaning there: the replica's own metadata, files of the state directory.
    expected -= {f"{root}.nodeSelector", f"{root}.tolerations", f"{root}.volumeMounts.host"}
    # No mount of the example is one the host shows as a Pod would (a claim, a path elsewhere, readOnly...).
    expected |= {f"{root}.volumeMounts[{position}]" for position in range(6)}
    assert paths == expected
    assert all("the embedded runtime" in e.message for e in caught.value.errors)
    # What goes with the image, which the embedded runtime does not use, is accepted there: pull policy and secrets.
    assert not {f"{root}.imagePullSecrets", f"{root}.imagePullPolicy"} & paths


def test_a_cluster_refuses_none() -> None:
    job = validate_job(read_documents(EVERY_FIELD)[0], builtin_jobtypes())
    assert refused_pod_fields(job, {}) == []


@pytest.mark.parametrize(
    ("volume", "mount", "problem"),
    [
        pytest.param({"hostPath": {"path": "/data/x/"}}, {"mountPath": "/data/x"}, None, id="host-path-at-its-path"),
        pytest.param({"emptyDir": {"medium": "Memory"}}, {"mountPath": "/dev/shm"}, None, id="shm"),
        pytest.param({"hostPath": {"path": "/data"}}, {"mountPath": "/mnt"}, "cannot appear at /mnt", id="elsewhere"),
        pytest.param({"hostPath": {"path": "/d"}}, {"mountPath": "/d", "readOnly": True}, "readOnly", id="read-only"),
        pytest.param({"hostPath": {"path": "/d", "type": "Directory"}}, {"mountPath": "/d"}, "not checked", id="type"),
        pytest.param({"emptyDir": {}}, {"mountPath": "/scratch"}, "emptyDir volume cannot appear", id="empty-dir"),
        pytest.param(
            {"emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
            {"mountPath": "/dev/shm"},
            "sizeLimit",
            id="shm-size",
        ),
        pytest.param(
            {"persistentVolumeClaim": {"claimName": "c"}}, {"mountPath": "/c"}, "persistentVolumeClaim", id="pvc"
        ),
    ],
)
def test_the_embedded_runtime_keeps_the_mounts_a_host_process_sees(
    volume: dict[str, Any], mount: dict[str, Any], problem: str | None
) -> None:
    template = {"volumes": [{"name": "v", **volume}], "volumeMounts": [{"name": "v", **mount}]}
    job = validate_job(job_with(template), builtin_jobtypes())
    found = refused_pod_fields(job, EMBEDDED_REFUSALS)
    if problem is None:
        assert found == []
    else:
        assert [e.path for e in found] == ["spec.replicas.worker.template.volumeMounts[0]"]
        assert problem in found[0].message and "mount namespace" in found[0].message
