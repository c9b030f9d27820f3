"""The Dataset object: one source, a distribution, clear errors naming the field and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.model.datasets import DatasetMount, DatasetPhase, DatasetStatus, Distribution
from phalanx.model.errors import SpecError
from phalanx.model.loading import parse_dataset


def doc(spec: dict[str, Any], name: str = "mnist") -> dict[str, Any]:
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Dataset", "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ({"path": "/data/mnist"}, "path"),
        ({"url": "s3://bucket/mnist/"}, "url"),
        ({"url": "gs://bucket/mnist/train-*.tfrecord"}, "url"),
        ({"url": "https://example.org/mnist.tar.gz"}, "url"),
        ({"sql": {"url": "sqlite:///rows.db", "query": "SELECT * FROM samples"}}, "sql"),
        ({"script": {"command": ["python", "make.py"]}}, "script"),
        ({"fromJob": {"job": "prep", "output": "features"}}, "fromJob"),
    ],
)
def test_each_source_kind_is_accepted_with_defaults(source: dict[str, Any], kind: str) -> None:
    dataset = parse_dataset(doc({"source": source}))
    assert dataset.spec.source.kind == kind
    assert dataset.spec.distribution == Distribution.REPLICATE
    assert dataset.spec.cache.policy == "noReplacement"
    assert dataset.status.phase == "Pending"


def test_a_round_trip_keeps_the_wire_form() -> None:
    dataset = parse_dataset(doc({"source": {"fromJob": {"job": "prep"}}, "distribution": "shard"}))
    assert dataset.to_dict()["spec"] == {
        "source": {"fromJob": {"job": "prep", "output": "."}},
        "distribution": "shard",
        "cache": {"policy": "noReplacement"},
    }


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"source": {}}, "spec.source: give exactly one of path, url, sql, script, fromJob (found: none)"),
        ({"source": {"path": "/a", "url": "http://x/y"}}, "(found: path, url)"),
        ({"source": {"path": "../secrets"}}, "spec.source.path: '../secrets' steps out of its directory"),
        ({"source": {"fromJob": {"job": "prep", "output": "/etc"}}}, "spec.source.fromJob.output: '/etc' is absolute"),
        ({"source": {"fromJob": {"job": "prep", "output": "a/../../b"}}}, "steps out of its directory with '..'"),
        ({"source": {"sql": {"url": "sqlite:///x.db"}}}, "spec.source.sql.query"),
        ({"source": {"url": "bucket/mnist"}}, "spec.source.url: 'bucket/mnist' is not a URL with a scheme"),
        ({"source": {"url": "s3://"}}, "e.g. https://host/data.csv, s3://bucket/prefix/"),
        ({"source": {"url": "https://h/a/../b.csv"}}, "spec.source.url: 'https://h/a/../b.csv' steps out of its"),
        (
            {"source": {"sql": {"url": "sqlite:///../x.db", "query": "SELECT 1"}}},
            "spec.source.sql.url: 'sqlite:///../x.db' names its database file with '..'",
        ),
        ({"source": {"path": "/d"}, "distribution": "broadcast"}, "spec.distribution"),
        ({"source": {"path": "/d"}, "cache": {"policy": "fifo"}}, "spec.cache.policy"),
        ({"source": {"path": "/d"}, "sharding": "yes"}, "spec.sharding"),
    ],
)
def test_bad_specs_name_the_field_and_the_fix(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_dataset(doc(spec), source="dataset.yaml")
    assert message in str(caught.value), str(caught.value)


def test_a_mount_defaults_to_the_dataset_of_its_name_and_checks_names() -> None:
    mount = DatasetMount.model_validate({"name": "train"})
    assert mount.dataset_name == "train" and mount.distribution is None
    assert DatasetMount.model_validate({"name": "train", "dataset": "imagenet-v2"}).dataset_name == "imagenet-v2"
    with pytest.raises(ValueError, match="dataset name"):
        DatasetMount.model_validate({"name": "Train_Set"})


@pytest.mark.parametrize(
    ("generation", "observed", "phase", "settled"),
    [
        (1, None, "Pending", False),
        (1, None, "Materializing", False),
        (1, 1, "Ready", True),
        (1, 1, "Failed", True),
        (2, 1, "Ready", False),  # a new spec: the Ready is the previous spec's outcome
        (2, 1, "Failed", False),  # a new spec: the Failed is the previous spec's outcome
        (2, 1, "Materializing", False),
        (2, 2, "Failed", True),
    ],
    ids=["new", "materializing", "ready", "failed", "old-ready", "old-failed", "rematerializing", "new-failed"],
)
def test_a_dataset_is_settled_only_by_the_outcome_of_its_current_spec(
    generation: int, observed: int | None, phase: str, settled: bool
) -> None:
    dataset = parse_dataset(doc({"source": {"path": "/data/mnist"}}))
    dataset = dataset.model_copy(
        update={
            "metadata": dataset.metadata.model_copy(update={"generation": generation}),
            "status": DatasetStatus(phase=DatasetPhase(phase), observed_generation=observed),
        }
    )
    assert dataset.settled is settled
