"""A datasource password never leaves Phalanx: every output of the real CLI, against a real control plane, shows
it masked (``***``) — `-o yaml`, `-o json`, `describe`, events, errors, `--dry-run` and the control plane's log."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from conftest import Runtime

PASSWORD = "s3cr3t-Pw"
# Port 1 refuses at once: materialising fails quickly, with an error that names the URL.
SQL_URL = f"postgresql://reader:{PASSWORD}@127.0.0.1:1/db?password={PASSWORD}"
HTTP_URL = f"http://alice:{PASSWORD}@127.0.0.1:1/data.csv"


def datasets_file(runtime: Runtime) -> Path:
    documents = [
        {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "Dataset",
            "metadata": {"name": name},
            "spec": {"source": source},
        }
        for name, source in (("pg", {"sql": {"url": SQL_URL, "query": "SELECT 1"}}), ("web", {"url": HTTP_URL}))
    ]
    path = runtime.work_dir / "datasets.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    return path


OUTPUTS = [
    ["get", "datasets", "-o", "yaml"],
    ["get", "datasets", "-o", "json"],
    ["get", "dataset", "pg", "-o", "yaml"],
    ["dataset", "get", "-o", "json"],
    ["describe", "dataset", "pg"],
    ["dataset", "describe", "web"],
]


def test_every_output_masks_the_password(runtime: Runtime) -> None:
    # Two Datasets with passwords in their URLs, created through the CLI; materialising fails (port 1).
    runtime.start_control_plane()
    created = runtime.cli("dataset", "create", "-f", str(datasets_file(runtime)), "--timeout", "60")
    assert created.returncode == 1, created.stdout + created.stderr
    assert "dataset/pg Failed" in created.stdout and "dataset/web Failed" in created.stdout
    assert PASSWORD not in created.stdout + created.stderr

    for args in OUTPUTS:
        result = runtime.cli(*args, check=True)
        assert PASSWORD not in result.stdout + result.stderr, args
        assert "reader:***@127.0.0.1:1" in result.stdout or "alice:***@127.0.0.1:1" in result.stdout, args

    # The wire forms keep everything but the password.
    listed = json.loads(runtime.cli("get", "datasets", "-o", "json", check=True).stdout)
    by_name = {item["metadata"]["name"]: item for item in listed["items"]}
    assert by_name["pg"]["spec"]["source"]["sql"] == {
        "url": "postgresql://reader:***@127.0.0.1:1/db?password=***",
        "query": "SELECT 1",
    }
    assert by_name["web"]["spec"]["source"]["url"] == "http://alice:***@127.0.0.1:1/data.csv"
    assert by_name["pg"]["status"]["phase"] == "Failed"
    assert "cannot connect to postgresql://reader:***@" in by_name["pg"]["status"]["message"]

    with runtime.client() as client:
        events = [e for name in ("pg", "web") for e in client.store.list_events("Dataset", "default", name)]
    assert {e.reason for e in events} >= {"Materializing", "MaterializeFailed"}
    assert not [e.message for e in events if PASSWORD in e.message]
    log = "".join(plane.log() for plane in runtime.planes)
    assert "leading as" in log and PASSWORD not in log


def test_dry_run_and_refusals_mask_the_password(runtime: Runtime) -> None:
    dry = runtime.cli("submit", "--dry-run", "-f", str(datasets_file(runtime)))
    assert dry.returncode == 0, dry.stderr
    assert PASSWORD not in dry.stdout and "reader:***@" in dry.stdout

    # A URL the model refuses is quoted in the error sentence: without its password.
    bad = runtime.work_dir / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "phalanx.dev/v1alpha1",
                "kind": "Dataset",
                "metadata": {"name": "bad"},
                "spec": {"source": {"url": f"https://alice:{PASSWORD}@example.org/a/../../etc"}},
            }
        )
    )
    refused = runtime.cli("submit", "-f", str(bad))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "spec.source.url" in refused.stderr and "alice:***@example.org" in refused.stderr
    assert PASSWORD not in refused.stdout + refused.stderr
