"""What RBAC cannot narrow, narrowed on the real kube-apiserver by the install's ValidatingAdmissionPolicies.

RBAC grants by resource: the node agent's ``patch`` on nodes would let it write any Node, and the operator's
``create`` on pods would let it create any Pod in any namespace. The install's policies
(``manifests.admission_policies``) let a node agent change only the Node its token was issued on, and the
operator create only what a TrainingJob controls. Each is checked here with a token of the real ServiceAccount,
both ways: what is still allowed, and what is refused, with the sentence the API server answers.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import k8s_testenv
from components import service_account_kubeconfig
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

LABEL_PATCH = {"metadata": {"labels": {"phalanx.dev/policy-test": "touched"}}}
MERGE = {"Content-Type": "application/merge-patch+json"}


def client_as(kube: Any, account: str, directory: Path, *, node: str | None = None) -> httpx.Client:
    """An API client with a fresh token of ``account`` (bound to ``node`` when given)."""
    config = yaml.safe_load(
        service_account_kubeconfig(kube, account, directory / f"{account}-{node}.kubeconfig", node=node).read_text()
    )
    token = config["users"][0]["user"]["token"]
    return httpx.Client(
        base_url=kube.env.server,
        # The test CA alone: an admin client certificate beside the token would authenticate first.
        verify=ssl.create_default_context(cafile=str(kube.env.directory / "ca.crt")),
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def enforced(client: httpx.Client, method: str, path: str, body: dict[str, Any]) -> None:
    """Wait until the API server enforces a policy just installed: it compiles policies in the background.

    Probed with a dry run (admission runs, nothing is written) of a request the policy must refuse.
    """
    headers = MERGE if method == "PATCH" else {}

    def refused() -> bool:
        return client.request(method, path, params={"dryRun": "All"}, json=body, headers=headers).status_code == 403

    wait_until(refused, 30, f"the policy to refuse {method} {path}")


@pytest.fixture
def two_nodes(phalanx_installed: Any) -> Any:
    kube = phalanx_installed
    names = [kube.unique("policy-node"), kube.unique("policy-node")]
    k8s_testenv.create_fake_gpu_nodes(kube.env, names, product=kube.unique("POLICY-GPU"))
    yield names
    for name in names:
        kube.request("DELETE", f"/api/v1/nodes/{name}")


def test_a_node_agent_may_change_its_own_node_and_no_other(
    phalanx_installed: Any, two_nodes: list[str], tmp_path: Path
) -> None:
    own, other = two_nodes
    with client_as(phalanx_installed, "phalanx-node-agent", tmp_path, node=own) as agent:
        # The API server names the node in the token's user (what the policy reads).
        review = agent.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        assert review.json()["status"]["userInfo"]["extra"]["authentication.kubernetes.io/node-name"] == [own]
        enforced(agent, "PATCH", f"/api/v1/nodes/{other}", LABEL_PATCH)
        mine = agent.patch(f"/api/v1/nodes/{own}", json=LABEL_PATCH, headers=MERGE)
        assert mine.status_code == 200, mine.text
        assert mine.json()["metadata"]["labels"]["phalanx.dev/policy-test"] == "touched"
        status = agent.patch(f"/api/v1/nodes/{own}/status", json={"status": {}}, headers=MERGE)
        assert status.status_code == 200, status.text
        for path in (f"/api/v1/nodes/{other}", f"/api/v1/nodes/{other}/status"):
            refused = agent.patch(path, json=LABEL_PATCH, headers=MERGE)
            assert refused.status_code == 403, refused.text
            assert f"may change only its own Node, {own}, not {other}" in refused.json()["message"]
        assert agent.get(f"/api/v1/nodes/{other}").status_code == 200  # reading any Node stays allowed
    assert "phalanx.dev/policy-test" not in (phalanx_installed.get(f"/api/v1/nodes/{other}")["metadata"]["labels"])

    # A token that names no node (not a DaemonSet Pod's, not bound to a Node) may change no Node at all.
    with client_as(phalanx_installed, "phalanx-node-agent", tmp_path) as unbound:
        refused = unbound.patch(f"/api/v1/nodes/{own}", json=LABEL_PATCH, headers=MERGE)
        assert refused.status_code == 403, refused.text
        assert "token must name its node" in refused.json()["message"]
    # The cluster's administrator is not the node agent: the policy does not apply.
    assert phalanx_installed.request("PATCH", f"/api/v1/nodes/{other}", LABEL_PATCH, headers=MERGE).is_success


def slice_of(node: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}],
        },
    }


def test_a_node_agent_may_publish_only_its_own_nodes_resource_slice(
    phalanx_installed: Any, two_nodes: list[str], tmp_path: Path
) -> None:
    kube = phalanx_installed
    own, other = two_nodes
    slices = "/apis/resource.k8s.io/v1/resourceslices"
    with client_as(kube, "phalanx-node-agent", tmp_path, node=own) as agent:
        enforced(agent, "POST", slices, slice_of(other, f"{other}-probe"))
        created = agent.post(slices, json=slice_of(own, f"{own}-gpu.nvidia.com"))
        assert created.status_code == 201, created.text
        body = created.json()
        body["spec"]["pool"]["generation"] = 2
        assert agent.put(f"{slices}/{own}-gpu.nvidia.com", json=body).status_code == 200
        refused = agent.post(slices, json=slice_of(other, f"{other}-gpu.nvidia.com"))
        assert refused.status_code == 403, refused.text
        assert f"may change only its own Node, {own}, not a ResourceSlice of node {other}" in refused.json()["message"]
        # A slice someone else published for the other node: the agent can neither rewrite nor delete it.
        theirs = kube.create(slices, slice_of(other, f"{other}-gpu.nvidia.com"))
        theirs["spec"]["devices"] = []
        assert agent.put(f"{slices}/{other}-gpu.nvidia.com", json=theirs).status_code == 403
        assert agent.delete(f"{slices}/{other}-gpu.nvidia.com").status_code == 403
        assert agent.delete(f"{slices}/{own}-gpu.nvidia.com").status_code == 200
    kube.request("DELETE", f"{slices}/{other}-gpu.nvidia.com")


def test_the_operator_creates_only_what_a_training_job_controls(
    phalanx_installed: Any, namespace: str, tmp_path: Path
) -> None:
    kube = phalanx_installed
    job = kube.create(
        f"/apis/phalanx.dev/v1alpha1/namespaces/{namespace}/trainingjobs",
        {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": "owner"},
            "spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": {"image": "busybox"}}}},
        },
    )
    controller = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "name": "owner",
        "uid": job["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }

    def pod(name: str, owners: list[dict[str, Any]]) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": name, "ownerReferences": owners} if owners else {"name": name}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "nodeName": "nowhere"},
        }

    pods = f"/api/v1/namespaces/{namespace}/pods"
    with client_as(kube, "phalanx-operator", tmp_path) as operator:
        enforced(operator, "POST", pods, pod("probe", []))
        owned = operator.post(pods, json=pod("owned", [controller]))
        assert owned.status_code == 201, owned.text
        for name, owners in (("bare", []), ("not-controlled", [{**controller, "controller": False}])):
            refused = operator.post(pods, json=pod(name, owners))
            assert refused.status_code == 403, refused.text
            assert (
                "creates only what a TrainingJob controls; this Pod names no TrainingJob" in refused.json()["message"]
            )
        configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "loose"}, "data": {}}
        refused = operator.post(f"/api/v1/namespaces/{namespace}/configmaps", json=configmap)
        assert refused.status_code == 403 and "this ConfigMap names no TrainingJob" in refused.json()["message"]
    # Anyone else creates bare Pods as before.
    assert kube.request("POST", pods, pod("by-admin", [])).status_code == 201
