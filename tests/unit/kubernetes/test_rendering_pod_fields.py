"""Every pod field of a replica template reaches the rendered Pod as written (the e2e tier POSTs it for real)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phalanx.adapters.kubernetes.rendering import render_pod
from phalanx.model.loading import builtin_jobtypes, read_documents
from phalanx.model.validation import validate_job

EVERY_FIELD = Path(__file__).resolve().parents[2] / "data" / "pod-fields" / "every-field.yaml"


def rendered() -> tuple[dict[str, Any], dict[str, Any]]:
    """The example's template as written, and its rendered Pod."""
    document = read_documents(EVERY_FIELD)[0]
    document["metadata"]["uid"] = "0000-uid"
    jobtypes = builtin_jobtypes()
    job = validate_job(document, jobtypes)
    return document["spec"]["replicas"]["worker"]["template"], render_pod(job, jobtypes["generic"], "worker", 0, 0)


def test_pod_level_fields_are_copied_as_written() -> None:
    template, pod = rendered()
    spec = pod["spec"]
    for field in ("nodeSelector", "tolerations", "affinity", "securityContext", "serviceAccountName"):
        assert spec[field] == template[field], field
    assert spec["imagePullSecrets"] == template["imagePullSecrets"]
    assert spec["priorityClassName"] == template["priorityClassName"]
    assert spec["volumes"][-len(template["volumes"]) :] == template["volumes"]
    assert spec["volumes"][0]["name"] == "outputs"  # Phalanx's own stay


def test_container_fields_are_copied_and_value_from_follows_the_values() -> None:
    template, pod = rendered()
    container = pod["spec"]["containers"][0]
    assert container["volumeMounts"][-len(template["volumeMounts"]) :] == template["volumeMounts"]
    assert container["envFrom"] == template["envFrom"]
    assert container["securityContext"] == template["containerSecurityContext"]
    for field in ("imagePullPolicy", "livenessProbe", "readinessProbe", "startupProbe"):
        assert container[field] == template[field], field
    sourced = [e for e in template["env"] if "valueFrom" in e]
    assert container["env"][-len(sourced) :] == sourced
    assert {"name": "EPOCHS", "value": "3"} in container["env"]
    names = [e["name"] for e in container["env"]]
    assert len(names) == len(set(names))


def test_init_containers_then_native_sidecars_with_the_replica_image_by_default() -> None:
    template, pod = rendered()
    init = pod["spec"]["initContainers"]
    assert init[0] == template["initContainers"][0]
    assert init[1] == {**template["sidecars"][0], "image": "phalanx.invalid/train:1", "restartPolicy": "Always"}
