"""The chart's REST server (``server.enabled``) rendered by the real helm: off by default, and when on, exactly the
objects of ``adapters.kubernetes.server_manifests`` (the ServiceAccount and ClusterRole the server's e2e test runs
under, and its Deployment) with the values set; a misspelt server value is refused by the values schema."""

from __future__ import annotations

from typing import Any

import pytest
from test_helm_chart import CHART, RELEASE, SYSTEM, Helm, keyed
from test_helm_chart import helm as helm  # the module-scoped fixture, used here too

from phalanx.adapters.kubernetes.server_manifests import SERVER_ACCOUNT, server_deployment, server_rbac
from phalanx.services.kubernetes.install import default_image

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def server_objects(rendered: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    return {key: obj for key, obj in keyed(rendered).items() if key[3] == SERVER_ACCOUNT}


def test_the_server_is_off_by_default(helm: Helm) -> None:
    assert server_objects(helm.template("--namespace", SYSTEM)) == {}


def test_server_enabled_renders_the_servers_identity_and_deployment_with_the_values(helm: Helm) -> None:
    rendered = helm.template(
        "--namespace", SYSTEM, "--set", "server.enabled=true", "--set", "server.resources.requests.cpu=300m"
    )
    found = server_objects(rendered)
    expected = keyed([*server_rbac(SYSTEM), server_deployment(default_image(), SYSTEM)])
    assert set(found) == set(expected)
    deployment = found[("apps/v1", "Deployment", SYSTEM, SERVER_ACCOUNT)]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["server", "--backend", "kubernetes", "--listen", "127.0.0.1:8080"]
    assert container["resources"]["requests"]["cpu"] == "300m"
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == SERVER_ACCOUNT
    history = next(e for e in container["env"] if e["name"] == "PHALANX_HISTORY_URL")
    assert history["valueFrom"]["secretKeyRef"] == {
        "name": "phalanx-operator-storage",
        "key": "history-url",
        "optional": True,
    }
    role = found[("rbac.authorization.k8s.io/v1", "ClusterRole", "", SERVER_ACCOUNT)]
    assert role == expected[("rbac.authorization.k8s.io/v1", "ClusterRole", "", SERVER_ACCOUNT)]


def test_a_misspelt_server_value_is_refused_by_name(helm: Helm) -> None:
    done = helm("template", RELEASE, str(CHART), "--set", "server.enable=true", check=False)
    assert done.returncode != 0
    assert "enable" in done.stderr
