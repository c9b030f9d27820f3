"""The install's ClusterRoles for people, on the real kube-apiserver: Kubernetes' own ``edit`` and ``view`` grant
Phalanx's kinds through aggregation, and ``phalanx-cluster-view`` the cluster-scoped reads (Queues, JobTypes,
Nodes) that a namespace's RoleBinding cannot.

Each user is a ServiceAccount of the test's namespace running the real ``phalanx`` CLI with its own token.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import service_account_kubeconfig
from support.waiting import wait_until

pytestmark = pytest.mark.e2e


def job_document(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "type": "generic",
            "replicas": {"worker": {"count": 1, "template": {"image": "example.org/trainer:1", "command": ["true"]}}},
        },
    }


class User:
    """A ServiceAccount of the namespace, bound to ``cluster_role`` there, running ``phalanx`` as itself."""

    def __init__(self, kube: Any, namespace: str, name: str, cluster_role: str, directory: Path) -> None:
        self.kube, self.namespace, self.name, self.directory = kube, namespace, name, directory
        self.account = f"system:serviceaccount:{namespace}:{name}"
        kube.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        )
        kube.create(
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"{name}-{cluster_role}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            },
        )
        self.kubeconfig = service_account_kubeconfig(kube, name, directory / f"{name}.kubeconfig", namespace)

    def may(self, verb: str, resource: str, subresource: str = "") -> bool:
        extra = [f"--subresource={subresource}"] if subresource else []
        answer = self.kube.env.kubectl(
            "auth", "can-i", verb, resource, *extra, "-n", self.namespace, f"--as={self.account}", check=False
        )
        return bool(answer.stdout.strip() == "yes")

    def phalanx(self, *args: str) -> subprocess.CompletedProcess[str]:
        environment = {k: v for k, v in os.environ.items() if k not in ("PHALANX_BACKEND", "KUBECONFIG")}
        environment.update(PHALANX_HOME=str(self.directory / "never-created"), COLUMNS="200")
        return subprocess.run(
            [
                *(sys.executable, "-m", "phalanx.entrypoints.cli", *args, "-n", self.namespace),
                *("--backend", "kubernetes", "--kubeconfig", str(self.kubeconfig)),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=environment,
            cwd=self.directory,
        )


def test_edit_and_view_cover_phalanxs_kinds_and_cluster_view_the_queues(
    phalanx_installed: Any, namespace: str, tmp_path: Path
) -> None:
    kube = phalanx_installed
    editor = User(kube, namespace, "alice", "edit", tmp_path)
    viewer = User(kube, namespace, "bob", "view", tmp_path)
    # kube-controller-manager folds the aggregated rules into edit and view in the background.
    wait_until(lambda: editor.may("create", "trainingjobs.phalanx.dev"), 60, "edit to include phalanx-edit")
    wait_until(lambda: viewer.may("list", "trainingjobs.phalanx.dev"), 60, "view to include phalanx-view")
    assert not viewer.may("create", "trainingjobs.phalanx.dev")
    assert not editor.may("update", "trainingjobs.phalanx.dev", "status")  # the components' to write

    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job_document("mine")))
    created = editor.phalanx("submit", "job.yaml")
    assert (created.returncode, created.stdout) == (0, "trainingjob/mine created\n"), created.stderr
    listed = viewer.phalanx("get", "jobs")
    assert listed.returncode == 0 and "mine" in listed.stdout, listed.stderr
    (tmp_path / "theirs.yaml").write_text(yaml.safe_dump(job_document("theirs")))
    refused = viewer.phalanx("submit", "theirs.yaml")
    assert refused.returncode == 1
    assert "forbidden: you may not create trainingjobs.phalanx.dev in namespace" in refused.stderr
    assert refused.stderr.rstrip().endswith("for the ClusterRole phalanx-edit (in Kubernetes' edit) in your namespace")

    # Queues are cluster-scoped: a namespace's edit does not reach them, phalanx-cluster-view does.
    unbound = editor.phalanx("get", "queues")
    assert unbound.returncode == 1
    assert "forbidden: you may not list queues.phalanx.dev" in unbound.stderr
    assert unbound.stderr.rstrip().endswith(
        "ask a cluster administrator for the ClusterRole phalanx-cluster-view, bound cluster-wide"
    )
    kube.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{namespace}-alice-cluster-view"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "phalanx-cluster-view"},
            "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": namespace}],
        },
    )
    try:
        queues = editor.phalanx("get", "queues")
        assert queues.returncode == 0, queues.stderr
        jobtypes = editor.phalanx("get", "jobtypes")
        assert jobtypes.returncode == 0 and "pytorch" in jobtypes.stdout, jobtypes.stderr
    finally:
        kube.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{namespace}-alice-cluster-view")
