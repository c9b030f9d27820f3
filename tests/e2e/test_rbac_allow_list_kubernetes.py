"""Least privilege, proven on the real kube-apiserver: what each component's ServiceAccount may do, as RBAC says.

The install is applied to the session's control plane; for each component, ``kubectl auth can-i --list`` (a
SelfSubjectRulesReview, asked as that ServiceAccount) lists what it may do cluster-wide and in the install's
namespace. That is compared with ``ALLOWED`` below, written out by hand and reviewed: a permission the install
adds, or one it drops, fails here until this list is changed with it, in the same commit, where a reviewer sees
it. What every authenticated account may do (discovery URLs, reviews of itself) is measured the same way for an
account bound to nothing, and left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from components import NAMESPACE

pytestmark = pytest.mark.e2e

PHALANX = "phalanx.dev"
READ = {"get", "list", "watch"}
WRITE = {"patch", "update"}
REVIEWS = {"tokenreviews.authentication.k8s.io": {"create"}, "subjectaccessreviews.authorization.k8s.io": {"create"}}

#: (resource, resource name or "") -> verbs, per ServiceAccount: everything beyond what any account may do.
#: Cluster-wide (ClusterRoles); the install's namespace adds ``IN_NAMESPACE``.
ALLOWED: dict[str, dict[tuple[str, str], set[str]]] = {
    "phalanx-operator": {
        **{(f"{kind}.{PHALANX}", ""): READ | WRITE | {"create", "delete"} for kind in ("trainingjobs", "sweeps")},
        (f"jobtypes.{PHALANX}", ""): READ | WRITE | {"create"},
        **{(f"{kind}.{PHALANX}", ""): READ | WRITE for kind in ("datasets", "pipelineruns", "pipelines", "queues")},
        **{
            (f"{kind}.{PHALANX}/status", ""): WRITE
            for kind in ("datasets", "pipelineruns", "queues", "sweeps", "trainingjobs")
        },
        **{(kind, ""): READ | {"create", "delete"} for kind in ("pods", "services", "configmaps")},
        ("pods/log", ""): {"get"},
        ("secrets", ""): {"create"},  # a job's SSH key pair; never read
        ("persistentvolumeclaims", ""): READ,  # which namespaces have the artifact store's claim
        ("podgroups.scheduling.k8s.io", ""): {"create", "get", "delete"},
        ("resourceclaimtemplates.resource.k8s.io", ""): {"create"},  # --gpu-allocation dra; never read
        ("nodes", ""): READ,
        ("events", ""): {"create", "patch", "list"},
        **{(resource, ""): verbs for resource, verbs in REVIEWS.items()},
    },
    "phalanx-scheduler": {
        ("pods", ""): READ,
        ("pods/binding", ""): {"create"},
        ("pods/status", ""): {"patch"},
        ("nodes", ""): READ,
        **{(f"{kind}.{PHALANX}", ""): READ for kind in ("trainingjobs", "queues", "jobtypes", "datasets")},
        (f"trainingjobs.{PHALANX}/status", ""): {"update"},
        (f"queues.{PHALANX}/status", ""): {"update"},
        # DRA: GPU claims allocated the placement's devices, from the nodes' ResourceSlices
        ("resourceslices.resource.k8s.io", ""): {"list", "watch"},
        ("deviceclasses.resource.k8s.io", ""): {"list", "watch"},  # a claim of a class that does not exist waits
        ("resourceclaims.resource.k8s.io", ""): READ | {"patch"},
        ("resourceclaims.resource.k8s.io/status", ""): {"patch"},
        ("resourceclaims.resource.k8s.io/binding", ""): {"patch"},
        ("events", ""): {"create", "patch"},
        **{(resource, ""): verbs for resource, verbs in REVIEWS.items()},
    },
    "phalanx-node-agent": {
        ("nodes", ""): READ | {"patch"},
        ("nodes/status", ""): {"patch"},
        ("resourceslices.resource.k8s.io", ""): {"get", "create", "update", "delete"},  # --resource-slices
        ("pods", ""): READ,
        **{(f"{kind}.{PHALANX}", ""): READ for kind in ("trainingjobs", "datasets", "jobtypes")},
        ("events", ""): {"create"},
        **{(resource, ""): verbs for resource, verbs in REVIEWS.items()},
    },
}
#: What each may do in the install's namespace beyond the above: the scheduler's leader-election Lease only.
IN_NAMESPACE: dict[str, dict[tuple[str, str], set[str]]] = {
    "phalanx-operator": {},
    "phalanx-scheduler": {
        ("leases.coordination.k8s.io", ""): {"create"},
        ("leases.coordination.k8s.io", "phalanx-scheduler"): {"get", "update"},
    },
    "phalanx-node-agent": {},
}

Rules = dict[tuple[str, str], set[str]]


def rules_of(kubectl: Callable[..., Any], account: str, namespace: str) -> tuple[Rules, set[tuple[str, str]]]:
    """What ``kubectl auth can-i --list`` says ``account`` may do in ``namespace``: resource rules, and URLs."""
    table = kubectl("auth", "can-i", "--list", "-n", namespace, f"--as={account}").stdout.splitlines()
    header = table[0]
    starts = [header.index(title) for title in ("Resources", "Non-Resource URLs", "Resource Names", "Verbs")]
    resources: Rules = {}
    urls: set[tuple[str, str]] = set()
    for line in table[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], len(line) + 1], strict=True)]
        resource, url, names, verbs = cells[0], cells[1].strip("[]"), cells[2].strip("[]"), cells[3].strip("[]")
        for verb in verbs.split():
            if resource:
                for name in names.split() or [""]:
                    resources.setdefault((resource, name), set()).add(verb)
            else:
                urls.update((path, verb) for path in url.split())
    return resources, urls


def beyond(rules: Rules, baseline: Rules) -> Rules:
    """``rules`` less what the baseline account may do too."""
    left = {key: verbs - baseline.get(key, set()) for key, verbs in rules.items()}
    return {key: verbs for key, verbs in left.items() if verbs}


def test_each_component_may_do_exactly_what_the_reviewed_allow_list_says(
    phalanx_installed: Any, kubectl: Callable[..., Any], namespace: str
) -> None:
    kube = phalanx_installed
    kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bound-to-nothing"}},
    )
    nobody = f"system:serviceaccount:{namespace}:bound-to-nothing"
    base_cluster, base_urls = rules_of(kubectl, nobody, "default")
    base_namespace, _ = rules_of(kubectl, nobody, NAMESPACE)
    for component, allowed in ALLOWED.items():
        account = f"system:serviceaccount:{NAMESPACE}:{component}"
        cluster, urls = rules_of(kubectl, account, "default")
        assert beyond(cluster, base_cluster) == allowed, component
        assert urls <= base_urls, f"{component} may reach non-resource URLs: {sorted(urls - base_urls)}"
        own, _ = rules_of(kubectl, account, NAMESPACE)
        assert beyond(own, base_namespace) == {**allowed, **IN_NAMESPACE[component]}, component
    # What no component may do, whatever the list above says: read Secrets, escalate, bind, impersonate.
    for component in ALLOWED:
        account = f"system:serviceaccount:{NAMESPACE}:{component}"
        for verb, resource in (
            ("get", "secrets"),
            ("list", "secrets"),
            ("escalate", "clusterroles"),
            ("bind", "clusterroles"),
            ("impersonate", "users"),
            ("create", "clusterrolebindings"),
        ):
            answer = kubectl("auth", "can-i", verb, resource, f"--as={account}", check=False).stdout.strip()
            assert answer == "no", (component, verb, resource, answer)
