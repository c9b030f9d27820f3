"""A job left to kube-scheduler on a cluster that does not serve PodGroups: it fails with the fix, and no Pod exists.

The session's control plane runs with Kubernetes' default feature gates, so ``scheduling.k8s.io/v1alpha2`` is not
served and the Pod field ``spec.schedulingGroup`` would be dropped: a Pod created anyway would be scheduled alone,
one of a partial gang. The operator creates the PodGroup before any Pod, and fails the job when it cannot.
"""

from __future__ import annotations

from typing import Any

import pytest

from components import Components, wait_alive

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"


def test_without_served_pod_groups_the_job_fails_before_any_pod(
    kube: Any, components: Components, namespace: str
) -> None:
    wait_alive(components.operator())
    body = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "gang"},
        "spec": {
            "type": "generic",
            "scheduling": {"schedulerName": "default-scheduler"},
            "replicas": {"worker": {"count": 2, "template": {"image": "phalanx.invalid/sim:1", "command": ["t"]}}},
        },
    }
    kube.create(JOBS.format(ns=namespace), body)
    job = kube.wait_for(
        f"{JOBS.format(ns=namespace)}/gang",
        lambda j: (j.get("status") or {}).get("phase") == "Failed",
        timeout=60,
        message="job gang Failed",
    )
    assert job["status"]["reason"] == "PodGroupUnavailable"
    message = job["status"]["message"]
    assert message.startswith("spec.scheduling.schedulerName: ")
    assert "GenericWorkload" in message and "--runtime-config=scheduling.k8s.io/v1alpha2=true" in message
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=phalanx.dev/job=gang")["items"]
    assert pods == []
