"""The install manifests: order, namespace and image parameters, least-privilege RBAC per identity, workloads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx.adapters.kubernetes.manifests import (
    COMPONENTS,
    METRICS_ACCESS_ENV,
    METRICS_READER_ROLE,
    InstallParameters,
    admission_policies,
    cluster_rules,
    install_manifests,
    render_yaml,
)
from phalanx.core.scheduling.config import DEFAULT_POLICY, from_configuration
from phalanx.model.loading import read_scheduler_configuration

PARAMETERS = InstallParameters(image="example/phalanx:test", namespace="ml-system")
DOCUMENTS = install_manifests(PARAMETERS)
NAMESPACED = {"ServiceAccount", "Role", "RoleBinding", "Deployment", "DaemonSet", "ConfigMap"}


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in DOCUMENTS if d["kind"] == kind]


def named(kind: str, name: str) -> dict[str, Any]:
    return next(d for d in of_kind(kind) if d["metadata"]["name"] == name)


def granted(account: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) triples of an identity's ClusterRole."""
    return {
        (group, resource, verb)
        for rule in cluster_rules()[account]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_objects_come_in_the_order_kubectl_apply_needs() -> None:
    kinds = [d["kind"] for d in DOCUMENTS]
    assert kinds[0] == "Namespace"
    assert kinds[1:4] == ["CustomResourceDefinition"] * 3
    last_rbac = max(i for i, k in enumerate(kinds) if k in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"))
    first_workload = min(i for i, k in enumerate(kinds) if k in ("Deployment", "DaemonSet"))
    assert max(i for i, k in enumerate(kinds) if k == "ServiceAccount") < last_rbac < first_workload
    assert kinds[-3:] == ["Deployment", "Deployment", "DaemonSet"]


def test_namespaced_objects_live_in_the_chosen_namespace_and_bindings_name_its_accounts() -> None:
    assert of_kind("Namespace")[0]["metadata"]["name"] == "ml-system"
    for document in DOCUMENTS:
        if document["kind"] in NAMESPACED:
            assert document["metadata"]["namespace"] == "ml-system", document["metadata"]["name"]
        else:
            assert "namespace" not in document["metadata"]
    for binding in of_kind("ClusterRoleBinding") + of_kind("RoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": binding["subjects"][0]["name"], "namespace": "ml-system"}
        ]


def test_every_binding_refers_to_a_role_and_an_account_that_the_install_creates() -> None:
    accounts = {d["metadata"]["name"] for d in of_kind("ServiceAccount")}
    assert accounts == {"phalanx-operator", "phalanx-scheduler", "phalanx-node-agent"}
    for binding, role_kind in [(b, "ClusterRole") for b in of_kind("ClusterRoleBinding")] + [
        (b, "Role") for b in of_kind("RoleBinding")
    ]:
        assert binding["roleRef"]["kind"] == role_kind
        assert named(role_kind, binding["roleRef"]["name"])
        assert binding["subjects"][0]["name"] in accounts


def test_no_rule_uses_a_wildcard() -> None:
    for role in of_kind("ClusterRole") + of_kind("Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), (role["metadata"]["name"], rule)
                assert not any("*" in value for value in rule.get(field, []))


def test_nobody_may_read_secrets_escalate_or_impersonate() -> None:
    for account in cluster_rules():
        resources = {resource for _, resource, _ in granted(account)}
        verbs = {verb for _, _, verb in granted(account)}
        assert not resources & {"clusterroles", "roles", "rolebindings", "clusterrolebindings"}
        assert not verbs & {"escalate", "bind", "impersonate", "deletecollection", "*"}
        # The operator creates a job's SSH key Secret (named with the job's uid) and never reads one.
        secrets = {verb for _, resource, verb in granted(account) if resource == "secrets"}
        assert secrets == ({"create"} if account == "phalanx-operator" else set()), account


def test_the_operator_runs_jobs_but_does_not_bind_pods() -> None:
    rules = granted("phalanx-operator")
    for resource in ("trainingjobs", "jobtypes", "queues"):
        assert {("phalanx.dev", resource, v) for v in ("get", "list", "watch", "patch", "update")} <= rules
    for resource in ("trainingjobs/status", "queues/status"):
        assert {("phalanx.dev", resource, v) for v in ("update", "patch")} <= rules
    assert {("", "pods", v) for v in ("create", "delete", "get", "list", "watch")} <= rules
    assert {
        ("", r, v) for r in ("services", "configmaps") for v in ("create", "get", "list", "watch", "delete")
    } <= rules
    assert {("", "events", "create"), ("", "events", "patch")} <= rules
    assert not {r for _, r, _ in rules} & {"pods/binding", "nodes/status", "leases", "jobtypes/status"}
    # Nodes are read (each node agent's dataset cache report), never written.
    assert {v for _, r, v in rules if r == "nodes"} == {"get", "list", "watch"}
    # A sweep's trials and a pipeline run's steps are TrainingJobs (a tuning step a Sweep) the operator makes; it
    # deletes a finished job after ttlSecondsAfterFinished, and the trials a deleted sweep leaves.
    assert {("phalanx.dev", r, v) for r in ("trainingjobs", "sweeps") for v in ("create", "delete")} <= rules
    assert not {("phalanx.dev", r, "create") for r in ("pipelines", "pipelineruns", "queues", "datasets")} & rules
    # It reads and writes the status of the sweeps and runs it runs, and reads trials' logs for their metrics.
    for resource in ("sweeps", "pipelines", "pipelineruns"):
        assert {("phalanx.dev", resource, v) for v in ("get", "list", "watch")} <= rules
    assert {("phalanx.dev", r, "update") for r in ("sweeps/status", "pipelineruns/status")} <= rules
    assert {v for _, r, v in rules if r == "pods/log"} == {"get"}
    assert ("phalanx.dev", "jobtypes", "create") in rules  # the built-in JobTypes, at start


#: The reviews each component creates to check who scrapes its /metrics (``metrics_access``).
REVIEWS = {("tokenreviews", "create"), ("subjectaccessreviews", "create")}


def test_the_scheduler_binds_and_explains_but_never_creates_pods() -> None:
    rules = granted("phalanx-scheduler")
    assert ("", "pods/binding", "create") in rules
    assert ("", "pods/status", "patch") in rules
    assert {("", r, v) for r in ("pods", "nodes") for v in ("get", "list", "watch")} <= rules
    assert {("phalanx.dev", "trainingjobs", v) for v in ("get", "list", "watch")} <= rules
    assert ("phalanx.dev", "trainingjobs/status", "update") in rules
    assert not {(r, v) for _, r, v in rules if v in ("create", "delete", "update")} - {
        ("pods/binding", "create"),
        ("events", "create"),
        ("trainingjobs/status", "update"),
        ("queues/status", "update"),
        *REVIEWS,
    }
    assert not {(r, v) for _, r, v in rules if r == "trainingjobs" and v not in ("get", "list", "watch")}


def test_the_scheduler_lease_is_the_only_namespaced_grant_and_is_limited_by_name() -> None:
    (role,) = of_kind("Role")
    assert role["metadata"]["namespace"] == "ml-system"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "update"],
            "resourceNames": ["phalanx-scheduler"],
        },
    ]
    (binding,) = of_kind("RoleBinding")
    assert binding["subjects"][0]["name"] == "phalanx-scheduler"


def test_the_node_agent_writes_only_nodes_and_events_and_reads_pods_and_what_it_caches() -> None:
    assert granted("phalanx-node-agent") == {
        ("", "nodes", "get"),
        ("", "nodes", "list"),
        ("", "nodes", "watch"),
        ("", "nodes", "patch"),
        ("", "nodes/status", "patch"),
        *(("resource.k8s.io", "resourceslices", v) for v in ("get", "create", "update", "delete")),
        ("", "events", "create"),
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        *(("phalanx.dev", r, v) for r in ("trainingjobs", "datasets", "jobtypes") for v in ("get", "list", "watch")),
        # Who scrapes its /metrics (metrics_access): create-only reviews, which read and change nothing.
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    }


@pytest.mark.parametrize(
    ("kind", "name", "command"),
    [
        pytest.param("Deployment", "phalanx-operator", "phalanx-operator", id="operator"),
        pytest.param("Deployment", "phalanx-scheduler", "phalanx-scheduler", id="scheduler"),
        pytest.param("DaemonSet", "phalanx-node-agent", "phalanx-node-agent", id="node-agent"),
    ],
)
def test_each_workload_runs_its_entry_point_safely_with_probes_and_requests(kind: str, name: str, command: str) -> None:
    workload = named(kind, name)
    spec = workload["spec"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == name
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["image"] == "example/phalanx:test"
    assert container["command"] == [command]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {"cpu", "memory"} <= container["resources"]["requests"].keys()
    assert "memory" in container["resources"]["limits"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def test_the_operator_is_never_doubled_and_the_node_agent_runs_on_every_node() -> None:
    assert named("Deployment", "phalanx-operator")["spec"]["strategy"] == {"type": "Recreate"}
    agent = named("DaemonSet", "phalanx-node-agent")["spec"]["template"]["spec"]
    assert agent["tolerations"] == [{"operator": "Exists"}]
    env = {item["name"]: item for item in agent["containers"][0]["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_every_component_has_an_account_and_a_workload() -> None:
    workloads = {d["metadata"]["name"] for d in of_kind("Deployment") + of_kind("DaemonSet")}
    assert workloads == {component.account for component in COMPONENTS}


def test_rendered_yaml_reads_back_as_the_same_documents_without_aliases() -> None:
    text = render_yaml(DOCUMENTS, header="line one\n\nline three")
    assert text.startswith("# line one\n#\n# line three\napiVersion: v1\nkind: Namespace\n")
    assert "&id" not in text and "*id" not in text
    assert list(yaml.safe_load_all(text)) == DOCUMENTS


def test_the_scheduler_reads_its_configuration_from_a_config_map_that_holds_a_valid_file(tmp_path: Path) -> None:
    [config_map] = of_kind("ConfigMap")
    assert config_map["metadata"]["name"] == "phalanx-scheduler-config"
    file = tmp_path / "scheduler-config.yaml"
    file.write_text(config_map["data"]["scheduler-config.yaml"])
    assert from_configuration(read_scheduler_configuration(file)) == DEFAULT_POLICY
    [scheduler] = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "phalanx-scheduler"]
    spec = scheduler["spec"]["template"]["spec"]
    [container] = spec["containers"]
    assert container["args"] == ["--config", "/etc/phalanx/scheduler-config.yaml"]
    assert container["volumeMounts"] == [{"name": "config", "mountPath": "/etc/phalanx", "readOnly": True}]
    assert spec["volumes"] == [{"name": "config", "configMap": {"name": "phalanx-scheduler-config"}}]


def test_each_component_may_review_who_scrapes_it_and_the_metrics_reader_role_grants_only_metrics() -> None:
    """Components check a scrape's token and RBAC (``metrics_access``); the reader role is the install's, unbound."""
    for account in cluster_rules():
        rules = granted(account)
        assert ("authentication.k8s.io", "tokenreviews", "create") in rules, account
        assert ("authorization.k8s.io", "subjectaccessreviews", "create") in rules, account
    reader = named("ClusterRole", METRICS_READER_ROLE)
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    bound = {b["roleRef"]["name"] for b in of_kind("ClusterRoleBinding") + of_kind("RoleBinding")}
    assert METRICS_READER_ROLE not in bound  # the user binds it to their Prometheus, nobody else gets it
    for workload in of_kind("Deployment") + of_kind("DaemonSet"):
        [container] = workload["spec"]["template"]["spec"]["containers"]
        assert {"name": METRICS_ACCESS_ENV, "value": "rbac"} in container["env"], workload["metadata"]["name"]


def test_the_admission_policies_name_the_install_namespaces_accounts_and_are_bound_to_deny() -> None:
    documents = admission_policies("ml-system")
    policies = {d["metadata"]["name"]: d for d in documents if d["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {d["metadata"]["name"]: d for d in documents if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert set(policies) == set(bindings) == {"phalanx-node-agent-own-node", "phalanx-operator-job-children"}
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings.values())
    agent, operator = policies["phalanx-node-agent-own-node"], policies["phalanx-operator-job-children"]
    assert "'system:serviceaccount:ml-system:phalanx-node-agent'" in agent["spec"]["matchConditions"][0]["expression"]
    assert "'system:serviceaccount:ml-system:phalanx-operator'" in operator["spec"]["matchConditions"][0]["expression"]
    # Policies that fail closed: a policy the API server cannot evaluate refuses rather than lets through.
    assert {p["spec"]["failurePolicy"] for p in policies.values()} == {"Fail"}
    assert all(v["reason"] == "Forbidden" for p in policies.values() for v in p["spec"]["validations"])
    created = {r for rule in operator["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]}
    assert created == {"pods", "services", "configmaps", "secrets", "podgroups", "resourceclaimtemplates"}
