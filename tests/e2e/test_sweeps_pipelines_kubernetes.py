"""Sweep, Pipeline and PipelineRun on a real kube-apiserver: the generated CRDs are served, take the full examples
as written (nothing pruned from the parts held raw), and the kubernetes backend stores and reads each kind.

The CRDs come from ``deploy/install.yaml`` (``phalanx_installed``). Objects are created by ``KubeBackend`` as the
cluster admin, as ``phalanx submit`` does; their status is written through the status subresource by
``KubeBackend`` authenticated as the ``phalanx-operator`` ServiceAccount, so the operator's RBAC in deploy/ is
what is checked; ``kubectl get`` prints the printer columns. The ``phalanx`` CLI then submits, lists, describes
and deletes them with ``--backend kubernetes``, as a user does. Nothing here runs a controller.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import phalanx_cli as phalanx
from components import service_account_kubeconfig
from phalanx.adapters.kubernetes.api import KubeApi
from phalanx.model.pipelines import Pipeline, PipelineRun, PipelineRunStatus, parse_pipeline, parse_pipeline_run
from phalanx.model.sweeps import Sweep, SweepStatus, parse_sweep
from phalanx.services import port
from phalanx.services.kubernetes.operations import KubeBackend
from phalanx.services.port import Written
from support.kind_samples import (
    pipeline_document,
    pipeline_run_document,
    pipeline_run_status,
    sweep_document,
    sweep_status,
)
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
GROUP = "/apis/phalanx.dev/v1alpha1"
PLURALS = {"Sweep": "sweeps", "Pipeline": "pipelines", "PipelineRun": "pipelineruns"}


@pytest.fixture
def admin(phalanx_installed: Any, namespace: str) -> Iterator[KubeBackend]:
    """The backend as the cluster admin (a user submitting), once the new kinds are served in ``namespace``."""
    for plural in PLURALS.values():
        path = f"{GROUP}/namespaces/{namespace}/{plural}"
        wait_until(lambda path=path: phalanx_installed.request("GET", path).status_code == 200, 30, f"{path} served")
    api = KubeApi.from_kubeconfig(phalanx_installed.kubeconfig)
    yield KubeBackend(api)
    api.close()


@pytest.fixture
def operator(phalanx_installed: Any, tmp_path: Path) -> Iterator[KubeBackend]:
    """The backend as the phalanx-operator ServiceAccount, with exactly the RBAC of deploy/."""
    path = service_account_kubeconfig(phalanx_installed, "phalanx-operator", tmp_path / "operator.kubeconfig")
    api = KubeApi.from_kubeconfig(path)
    yield KubeBackend(api, component="phalanx-operator")
    api.close()


def raw(kube: Any, namespace: str, kind: str, name: str) -> dict[str, Any]:
    return kube.get(f"{GROUP}/namespaces/{namespace}/{PLURALS[kind]}/{name}")  # type: ignore[no-any-return]


def test_each_kind_is_stored_as_written_and_reads_back_equal(
    phalanx_installed: Any, admin: KubeBackend, namespace: str
) -> None:
    documents = {
        "Sweep": sweep_document(namespace=namespace),
        "Pipeline": pipeline_document(namespace=namespace),
        "PipelineRun": pipeline_run_document(namespace=namespace),
    }
    parsers = {"Sweep": parse_sweep, "Pipeline": parse_pipeline, "PipelineRun": parse_pipeline_run}
    models: dict[str, type[Sweep | Pipeline | PipelineRun]] = {
        "Sweep": Sweep,
        "Pipeline": Pipeline,
        "PipelineRun": PipelineRun,
    }
    for kind, document in documents.items():
        submitted = parsers[kind](document)
        admin.create(submitted)
        back = admin.get(models[kind], namespace, submitted.metadata.name)
        assert back is not None, kind
        assert back.spec == submitted.spec, kind
        assert back.metadata.labels == submitted.metadata.labels, kind
        assert back.metadata.annotations == submitted.metadata.annotations, kind
        assert back.metadata.uid and back.metadata.generation == 1, kind
        assert [o.metadata.name for o in admin.list(models[kind], namespace)] == [submitted.metadata.name]
    # The raw parts reach etcd whole: nothing pruned, numbers and references as written.
    sweep = raw(phalanx_installed, namespace, "Sweep", "lr-search")
    assert sweep["spec"]["trial"] == documents["Sweep"]["spec"]["trial"]
    assert sweep["spec"]["parameters"][3]["values"] == [16, 32.5, 64]
    assert sweep["spec"]["algorithm"]["settings"] == {"n_startup_trials": 5, "multivariate": True}
    steps = raw(phalanx_installed, namespace, "Pipeline", "train-eval")["spec"]["steps"]
    assert steps[0]["component"]["inline"] == documents["Pipeline"]["spec"]["steps"][0]["component"]["inline"]
    assert steps[2]["sweep"]["spec"]["trial"] == documents["Sweep"]["spec"]["trial"]
    assert steps[3]["parallelFor"]["items"] == [1, 2.5, "three", {"shard": [4, 5]}]
    assert steps[4]["parallelFor"]["items"] == "{{steps.prepare.outputs.shard list}}"
    with pytest.raises(port.AlreadyExistsError):
        admin.create(parse_sweep(documents["Sweep"]))


def test_kubectl_apply_of_the_files_as_written_is_accepted_under_strict_validation(
    kubectl: Kubectl, admin: KubeBackend, namespace: str, tmp_path: Path
) -> None:
    documents = [
        sweep_document("applied", namespace),
        pipeline_document("applied", namespace),
        pipeline_run_document("applied-inline", namespace, pipeline=None),
    ]
    path = tmp_path / "kinds.yaml"
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    kubectl("apply", "--validate=strict", "-f", str(path))
    run = admin.get(PipelineRun, namespace, "applied-inline")
    assert run is not None and run.spec.pipeline_spec is not None
    assert run.spec == parse_pipeline_run(documents[2]).spec
    # A misspelt field is refused by the API server itself, as for a TrainingJob.
    bad = sweep_document("misspelt", namespace)
    bad["spec"]["maxTrails"] = 3
    path.write_text(yaml.safe_dump(bad))
    refused = kubectl("apply", "--validate=strict", "-f", str(path), check=False)
    assert refused.returncode != 0 and "maxTrails" in refused.stderr


def test_the_operator_writes_status_through_the_subresource_and_kubectl_shows_the_columns(
    phalanx_installed: Any, admin: KubeBackend, operator: KubeBackend, kubectl: Kubectl, namespace: str
) -> None:
    admin.create(parse_sweep(sweep_document(namespace=namespace)))
    admin.create(parse_pipeline(pipeline_document(namespace=namespace)))
    admin.create(parse_pipeline_run(pipeline_run_document(namespace=namespace)))
    expected: dict[str, Any] = {
        "Sweep": SweepStatus.model_validate(sweep_status()),
        "PipelineRun": PipelineRunStatus.model_validate(pipeline_run_status()),
    }
    names = {"Sweep": "lr-search", "PipelineRun": "train-eval-1"}
    models: dict[str, type[Sweep | PipelineRun]] = {"Sweep": Sweep, "PipelineRun": PipelineRun}
    for kind, status in expected.items():
        seen = operator.get(models[kind], namespace, names[kind])  # the operator may read it
        assert seen is not None
        changes = {field: getattr(status, field) for field in type(status).model_fields}
        assert operator.write_status(seen, changes) is Written.WROTE, kind
        after = admin.get(models[kind], namespace, names[kind])
        assert after is not None and after.status == status, kind
        assert after.spec == seen.spec and after.metadata.generation == 1, "a status write leaves the spec"
        assert operator.write_status(seen, {"phase": "Failed"}) is Written.LOST, "written on the version read"
        operator.record(after, "Observed", f"{kind} status written by the operator")
        assert [e.reason for e in admin.events_of(after)] == ["Observed"]

    sweeps = kubectl("get", "sweeps", "-n", namespace).stdout.split("\n")
    assert sweeps[0].split() == ["NAME", "PHASE", "TRIALS", "BEST", "AGE"]
    assert sweeps[1].split()[:4] == ["lr-search", "Running", "5", "0.125"]
    runs = kubectl("get", "plr", "-n", namespace).stdout.split("\n")
    assert runs[0].split() == ["NAME", "PIPELINE", "PHASE", "AGE"]
    assert runs[1].split()[:3] == ["train-eval-1", "train-eval", "Running"]
    assert kubectl("get", "pl", "-n", namespace, "-o", "name").stdout.split() == ["pipeline.phalanx.dev/train-eval"]
    listed = json.loads(kubectl("get", "phalanx", "-n", namespace, "-o", "json").stdout)
    assert {item["kind"] for item in listed["items"]} >= {"Sweep", "Pipeline", "PipelineRun"}


def test_delete_removes_each_kind_and_a_second_delete_is_not_found(admin: KubeBackend, namespace: str) -> None:
    admin.create(parse_sweep(sweep_document(namespace=namespace)))
    admin.create(parse_pipeline(pipeline_document(namespace=namespace)))
    admin.create(parse_pipeline_run(pipeline_run_document(namespace=namespace)))
    for model, name in ((Sweep, "lr-search"), (Pipeline, "train-eval"), (PipelineRun, "train-eval-1")):
        stored = admin.get(model, namespace, name)
        assert stored is not None
        admin.delete(model, namespace, name, uid=stored.metadata.uid)
        wait_until(lambda model=model, name=name: admin.get(model, namespace, name) is None, 10, f"{name} deleted")
        with pytest.raises(port.NotFoundError):
            admin.delete(model, namespace, name)


# -- the CLI's verbs against the cluster -----------------------------------------------------------------------------

PREP = {
    "name": "prep",
    "inputs": [{"name": "rows", "type": "Integer", "default": "10"}],
    "outputs": [{"name": "data", "type": "Dataset"}],
    "implementation": {
        "container": {"image": "python:3.12", "command": ["prep", {"inputValue": "rows"}, {"outputPath": "data"}]}
    },
}
JOB = {"type": "generic", "replicas": {"worker": {"count": 1, "template": {"image": "x:1", "command": ["true"]}}}}


def table(text: str) -> list[dict[str, str]]:
    """The rows of a CLI table (columns split on runs of two or more spaces)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = re.split(r"\s{2,}", lines[0].strip())
    return [dict(zip(header, re.split(r"\s{2,}", line.strip()), strict=False)) for line in lines[1:]]


def test_phalanx_submit_get_describe_and_delete_the_new_kinds_on_the_cluster(
    phalanx_installed: Any, admin: KubeBackend, namespace: str, tmp_path: Path
) -> None:
    kube = phalanx_installed

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        result = phalanx(kube, namespace, tmp_path, *args)
        assert result.returncode == 0, f"phalanx {' '.join(args)}: {result.stdout}{result.stderr}"
        return result

    (tmp_path / "components").mkdir()
    (tmp_path / "components" / "prep.yaml").write_text(yaml.safe_dump(PREP))
    pipeline = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": "train-eval"},
        "spec": {
            "parameters": [{"name": "rows", "type": "Integer", "default": "5"}],
            "steps": [
                {
                    "name": "prep",
                    "component": {"path": "components/prep.yaml"},
                    "arguments": {"rows": "{{params.rows}}"},
                },
                {"name": "report", "trainingJob": {"spec": JOB}, "after": ["prep"]},
            ],
        },
    }
    run = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "PipelineRun",
        "metadata": {"name": "nightly"},
        "spec": {"pipelineRef": {"name": "train-eval"}, "arguments": {"rows": "7"}},
    }
    sweep = sweep_document()
    del sweep["metadata"]["namespace"]  # -n puts it in the test's namespace
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all([run, pipeline, sweep], sort_keys=False))

    submitted = cli("submit", "-f", "all.yaml").stdout
    for line in ("pipeline/train-eval created", "pipelinerun/nightly created", "sweep/lr-search created"):
        assert line in submitted, submitted
    stored = raw(kube, namespace, "Pipeline", "train-eval")
    assert stored["spec"]["steps"][0]["component"] == {"inline": PREP}  # the file is not needed on the cluster
    assert "phalanx.dev/component-paths" in stored["metadata"]["annotations"]
    assert raw(kube, namespace, "PipelineRun", "nightly")["spec"]["arguments"] == {"rows": "7"}

    (row,) = table(cli("get", "sweeps").stdout)
    assert (row["NAME"], row["PHASE"], row["TRIALS"]) == ("lr-search", "Pending", "0/12")
    (row,) = table(cli("get", "pl").stdout)
    assert (row["NAME"], row["STEPS"]) == ("train-eval", "2")
    (row,) = table(cli("get", "plr").stdout)
    assert (row["NAME"], row["PIPELINE"], row["PHASE"]) == ("nightly", "train-eval", "Pending")
    as_yaml = yaml.safe_load(cli("get", "sweep", "lr-search", "-o", "yaml").stdout)
    assert as_yaml["spec"]["trial"] == sweep["spec"]["trial"]
    described = cli("describe", "pipeline", "train-eval").stdout
    assert "components/prep.yaml" in described and "report" in described

    refused = phalanx(kube, namespace, tmp_path, "delete", "pipeline", "train-eval")
    assert refused.returncode == 1 and "named by pipelineruns: nightly" in refused.stderr
    assert cli("delete", "plr", "nightly").stdout.strip() == "pipelinerun/nightly deleted"
    assert "pipeline/train-eval deleted" in cli("delete", "pipeline", "train-eval").stdout
    assert "sweep/lr-search deleted" in cli("delete", "sw", "lr-search").stdout
    for model in (Sweep, Pipeline, PipelineRun):
        wait_until(lambda model=model: admin.list(model, namespace) == [], 10, f"{model.__name__}s gone")
    for noun in ("sweeps", "pipelines", "pipelineruns"):
        assert cli("get", noun).stdout.startswith("No "), noun


def test_a_malformed_submission_creates_nothing_on_the_cluster(
    phalanx_installed: Any, admin: KubeBackend, namespace: str, tmp_path: Path
) -> None:
    cycle = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": "cycle"},
        "spec": {
            "steps": [
                {"name": "a", "trainingJob": {"spec": JOB}, "after": ["b"]},
                {"name": "b", "trainingJob": {"spec": JOB}, "after": ["a"]},
            ]
        },
    }
    good = sweep_document()
    del good["metadata"]["namespace"]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump_all([good, cycle], sort_keys=False))
    result = phalanx(phalanx_installed, namespace, tmp_path, "submit", "-f", "bad.yaml")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cycle a -> b -> a" in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
    assert admin.list(Sweep, namespace) == [] and admin.list(Pipeline, namespace) == []


def test_list_selects_by_labels_on_the_api_server(admin: KubeBackend, operator: KubeBackend, namespace: str) -> None:
    """The controllers' selections (a run's objects; every trial job) as the API server answers them."""
    for name, labels in (("a", {"phalanx.dev/pipelinerun": "r1"}), ("b", {"phalanx.dev/pipelinerun": "r2"}), ("c", {})):
        document = sweep_document(name=name, namespace=namespace)
        document["metadata"]["labels"] = labels
        admin.create(parse_sweep(document))

    def names(backend: KubeBackend, labels: port.LabelSelector) -> list[str]:
        return sorted(s.metadata.name for s in backend.list(Sweep, namespace, labels=labels))

    for backend in (admin, operator):  # the operator's RBAC lets it list with a selector too
        assert names(backend, {"phalanx.dev/pipelinerun": "r1"}) == ["a"]
        assert names(backend, {"phalanx.dev/pipelinerun": None}) == ["a", "b"]
        assert names(backend, {"phalanx.dev/pipelinerun": "r1", "team": None}) == []
        assert names(backend, {}) == ["a", "b", "c"]
