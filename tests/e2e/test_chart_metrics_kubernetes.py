"""The chart's optional metrics objects with the real helm: a headless Service per component and a ServiceMonitor.

Off by default (the default render is ``phalanx install --print``: tests/e2e/test_helm_chart.py); turned on, the
Services select each component's Pods on the health port their containers name ``health``, and the ServiceMonitor
selects those Services.
"""

from __future__ import annotations

import pytest
from test_helm_chart import CHART, RELEASE, SYSTEM, Helm, helm

from phalanx.adapters.kubernetes.manifests import COMPONENTS, InstallParameters, install_manifests

pytestmark = [pytest.mark.e2e]
__all__ = ["helm"]  # the fixture, imported to be used here


def test_the_metrics_services_and_service_monitor_render_when_asked(helm: Helm) -> None:
    assert not [d for d in helm.template("--namespace", SYSTEM) if d["kind"] in ("Service", "ServiceMonitor")]
    settings = ["metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=prom", "healthPort=9100"]
    rendered = helm.template("--namespace", SYSTEM, *(arg for value in settings for arg in ("--set", value)))
    services = {d["metadata"]["name"]: d for d in rendered if d["kind"] == "Service"}
    assert set(services) == {f"{component.account}-metrics" for component in COMPONENTS}
    workloads = {
        obj["metadata"]["name"]: obj
        for obj in install_manifests(InstallParameters(image="unused"))
        if obj["kind"] in ("Deployment", "DaemonSet")
    }
    for component in COMPONENTS:
        service = services[f"{component.account}-metrics"]
        assert service["metadata"]["namespace"] == SYSTEM
        assert service["spec"]["ports"] == [{"name": "health", "port": 9100, "targetPort": "health"}]
        pod = workloads[component.account]["spec"]["template"]
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        assert "health" in {port["name"] for port in pod["spec"]["containers"][0]["ports"]}
    [monitor] = [d for d in rendered if d["kind"] == "ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert all(selected.items() <= s["metadata"]["labels"].items() for s in services.values())
    # metrics.access rbac (the default): Prometheus sends its ServiceAccount's token, which the components review.
    token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    endpoint = {"port": "health", "path": "/metrics", "interval": "30s"}
    assert monitor["spec"]["endpoints"] == [{**endpoint, "bearerTokenFile": token_file}]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [SYSTEM]}
    for workload in (d for d in rendered if d["kind"] in ("Deployment", "DaemonSet")):
        env = {v["name"]: v.get("value") for v in workload["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["PHALANX_METRICS_ACCESS"] == "rbac", workload["metadata"]["name"]


def test_metrics_access_open_reaches_every_component_and_drops_the_monitors_token(helm: Helm) -> None:
    settings = ["metrics.serviceMonitor.enabled=true", "metrics.access=open"]
    rendered = helm.template("--namespace", SYSTEM, *(arg for value in settings for arg in ("--set", value)))
    [monitor] = [d for d in rendered if d["kind"] == "ServiceMonitor"]
    assert monitor["spec"]["endpoints"] == [{"port": "health", "path": "/metrics", "interval": "30s"}]
    workloads = [d for d in rendered if d["kind"] in ("Deployment", "DaemonSet")]
    assert len(workloads) == len(COMPONENTS)
    for workload in workloads:
        env = {v["name"]: v.get("value") for v in workload["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["PHALANX_METRICS_ACCESS"] == "open", workload["metadata"]["name"]
    # A value the components do not know is refused by the chart's schema, naming the key.
    refused = helm("template", RELEASE, str(CHART), "--set", "metrics.access=public", check=False)
    assert refused.returncode != 0
    assert "metrics" in refused.stderr and "access" in refused.stderr, refused.stderr
