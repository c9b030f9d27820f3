"""``--kubeflow-kinds`` (chart value ``kubeflowKinds.enabled``): the CRDs of the Kubeflow kinds and the operator's
rights on them, only when asked for; the default install is unchanged but for the operator's switch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from phalanx.adapters.kubernetes.kubeflow_crds import KUBEFLOW_CRDS, foreign, kubeflow_custom_resource_definitions
from phalanx.adapters.kubernetes.manifests import KUBEFLOW_ROLE, InstallParameters, install_manifests
from phalanx.adapters.kubernetes.structural import check_structural, validate_value
from phalanx.entrypoints.cli.main import app
from phalanx.model.loading import read_documents
from phalanx.services.kubernetes.chart import default_values, values_schema
from phalanx.services.kubernetes.install import InstallRequest, render_install

DATA = Path(__file__).parents[2] / "data"
UPSTREAM_KINDS = {
    "PyTorchJob": "kubeflow.org/v1",
    "TFJob": "kubeflow.org/v1",
    "XGBoostJob": "kubeflow.org/v1",
    "JAXJob": "kubeflow.org/v1",
    "PaddleJob": "kubeflow.org/v1",
    "MPIJob": "kubeflow.org/v2beta1",
    "TrainJob": "trainer.kubeflow.org/v1alpha1",
    "TrainingRuntime": "trainer.kubeflow.org/v1alpha1",
    "ClusterTrainingRuntime": "trainer.kubeflow.org/v1alpha1",
}


def crds(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["spec"]["names"]["kind"]: d for d in documents if d["kind"] == "CustomResourceDefinition"}


def env_of_operator(documents: list[dict[str, Any]]) -> dict[str, str]:
    [operator] = [d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == "phalanx-operator"]
    return {e["name"]: e.get("value", "") for e in operator["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_the_default_install_has_none_of_the_kinds_and_tells_the_operator_so() -> None:
    documents = install_manifests(InstallParameters(image="x"))
    assert set(crds(documents)) == {"TrainingJob", "JobType", "Queue", "Dataset", "Sweep", "Pipeline", "PipelineRun"}
    assert KUBEFLOW_ROLE not in {d["metadata"]["name"] for d in documents}
    assert env_of_operator(documents)["PHALANX_KUBEFLOW_KINDS"] == "false"
    assert default_values()["kubeflowKinds"] == {"enabled": False}


def test_the_option_adds_every_kind_with_an_open_schema_and_a_status_for_the_jobs() -> None:
    documents = install_manifests(InstallParameters(image="x", kubeflow_kinds=True))
    found = crds(documents)
    assert {kind: f"{d['spec']['group']}/{d['spec']['versions'][0]['name']}" for kind, d in found.items()} == {
        **UPSTREAM_KINDS,
        "TrainingJob": "phalanx.dev/v1alpha1",
        "JobType": "phalanx.dev/v1alpha1",
        "Queue": "phalanx.dev/v1alpha1",
        "Dataset": "phalanx.dev/v1alpha1",
        "Sweep": "phalanx.dev/v1alpha1",
        "Pipeline": "phalanx.dev/v1alpha1",
        "PipelineRun": "phalanx.dev/v1alpha1",
    }
    assert env_of_operator(documents)["PHALANX_KUBEFLOW_KINDS"] == "true"
    for kind in UPSTREAM_KINDS:
        crd = found[kind]
        assert crd["metadata"]["labels"] == {"app.kubernetes.io/part-of": "phalanx"}
        assert not foreign(crd)
        [version] = crd["spec"]["versions"]
        schema = version["schema"]["openAPIV3Schema"]
        assert check_structural(schema) == []
        is_job = "Runtime" not in kind
        assert ("status" in version.get("subresources", {})) == is_job, kind
        if is_job:
            assert [c["name"] for c in version["additionalPrinterColumns"]] == ["State", "Age"]
    assert found["ClusterTrainingRuntime"]["spec"]["scope"] == "Cluster"
    assert found["TrainingRuntime"]["spec"]["scope"] == "Namespaced"
    # The CRDs come before anything else of the install but the namespace; the role before the workloads.
    kinds = [d["kind"] for d in documents]
    assert kinds[1 : 1 + len(found)] == ["CustomResourceDefinition"] * len(found)
    role = kinds.index("ClusterRole", [d["metadata"]["name"] for d in documents].index(KUBEFLOW_ROLE))
    assert role < kinds.index("Deployment")


def test_every_upstream_file_of_the_tests_is_stored_unchanged_by_the_schema() -> None:
    schemas = {
        d["spec"]["names"]["kind"]: d["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for d in kubeflow_custom_resource_definitions()
    }
    for path in sorted((DATA / "kubeflow").glob("*.yaml")):
        for document in read_documents(path):
            body = {k: v for k, v in document.items() if k != "metadata"}
            assert validate_value(body, schemas[document["kind"]]) == [], path.name


def test_the_operator_may_read_the_kinds_write_their_status_and_create_trainingjobs_but_nothing_more() -> None:
    documents = install_manifests(InstallParameters(image="x", namespace="ml-system", kubeflow_kinds=True))
    [role] = [d for d in documents if d["kind"] == "ClusterRole" and d["metadata"]["name"] == KUBEFLOW_ROLE]
    [binding] = [d for d in documents if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"] == KUBEFLOW_ROLE]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "phalanx-operator", "namespace": "ml-system"}]
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    for crd in KUBEFLOW_CRDS:
        assert {(crd.group, crd.plural, verb) for verb in ("get", "list", "watch")} <= granted
        assert (crd.group, crd.plural, "delete") not in granted
        if crd.is_job:
            assert (crd.group, f"{crd.plural}/status", "update") in granted
            assert (crd.group, crd.plural, "update") not in granted  # the spec is the user's
    assert ("phalanx.dev", "trainingjobs", "create") in granted
    assert ("trainer.kubeflow.org", "clustertrainingruntimes", "create") in granted
    [crd_rule] = [rule for rule in role["rules"] if rule["apiGroups"] == ["apiextensions.k8s.io"]]
    assert crd_rule["verbs"] == ["get"]
    assert sorted(crd_rule["resourceNames"]) == sorted(crd.name for crd in KUBEFLOW_CRDS)


def test_phalanx_install_kubeflow_kinds_prints_them_and_crds_only_too() -> None:
    runner = CliRunner()
    printed = runner.invoke(app, ["install", "--print", "--kubeflow-kinds"])
    assert printed.exit_code == 0, printed.output
    assert list(yaml.safe_load_all(printed.output)) == list(
        yaml.safe_load_all(render_install(InstallRequest(kubeflow_kinds=True)))
    )
    only = runner.invoke(app, ["install", "--print", "--crds-only", "--kubeflow-kinds"])
    kinds = {d["spec"]["names"]["kind"] for d in yaml.safe_load_all(only.output) if d}
    assert set(UPSTREAM_KINDS) <= kinds
    plain = runner.invoke(app, ["install", "--print", "--crds-only"])
    assert not {d["spec"]["names"]["kind"] for d in yaml.safe_load_all(plain.output) if d} & set(UPSTREAM_KINDS)


def test_the_chart_value_is_a_closed_boolean() -> None:
    assert values_schema()["properties"]["kubeflowKinds"] == {
        "type": "object",
        "additionalProperties": False,
        "properties": {"enabled": {"type": "boolean"}},
    }


def test_a_crd_without_phalanx_label_is_another_installations() -> None:
    [crd] = [d for d in kubeflow_custom_resource_definitions() if d["spec"]["names"]["kind"] == "MPIJob"]
    assert not foreign(crd)
    assert foreign({**crd, "metadata": {"name": crd["metadata"]["name"]}})
    assert foreign({**crd, "metadata": {"name": "x", "labels": {"app.kubernetes.io/part-of": "kubeflow"}}})
