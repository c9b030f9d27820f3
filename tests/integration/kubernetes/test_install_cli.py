"""`phalanx install --print` through the real command, as `phalanx install --print | kubectl apply -f -` runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def phalanx(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phalanx.entrypoints.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def test_print_writes_the_committed_install_yaml_to_stdout() -> None:
    result = phalanx("install", "--print")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (REPO / "deploy" / "install.yaml").read_text(encoding="utf-8")
    kinds = [d["kind"] for d in documents(result.stdout)]
    assert kinds[0] == "Namespace" and kinds.count("CustomResourceDefinition") == 7
    assert {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "DaemonSet"} <= set(kinds)


def test_crds_only_prints_just_the_crds() -> None:
    result = phalanx("install", "--print", "--crds-only")
    assert result.returncode == 0, result.stderr
    names = [d["metadata"]["name"] for d in documents(result.stdout)]
    assert names == [
        "trainingjobs.phalanx.dev",
        "jobtypes.phalanx.dev",
        "queues.phalanx.dev",
        "datasets.phalanx.dev",
        "sweeps.phalanx.dev",
        "pipelines.phalanx.dev",
        "pipelineruns.phalanx.dev",
    ]


def test_namespace_and_image_reach_every_object() -> None:
    result = phalanx("install", "--print", "--namespace", "ml-system", "--image", "my-registry/phalanx:dev")
    assert result.returncode == 0, result.stderr
    parsed = documents(result.stdout)
    assert parsed[0]["metadata"]["name"] == "ml-system"
    namespaced = [
        d for d in parsed if d["kind"] in ("ServiceAccount", "Role", "RoleBinding", "Deployment", "DaemonSet")
    ]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"ml-system"}
    images = {
        c["image"]
        for d in parsed
        if "template" in d.get("spec", {})
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"my-registry/phalanx:dev"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(("install",), "phalanx install --print | kubectl apply -f -", id="without-print"),
        pytest.param(("install", "--print", "-n", "ML_System"), "namespace 'ML_System' is not a DNS-1123", id="ns"),
        pytest.param(("install", "--print", "--image", "a b"), "image 'a b' is not an image reference", id="image"),
    ],
)
def test_bad_use_exits_2_with_the_fix_on_stderr(args: tuple[str, ...], message: str) -> None:
    result = phalanx(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert message in " ".join(result.stderr.split())
