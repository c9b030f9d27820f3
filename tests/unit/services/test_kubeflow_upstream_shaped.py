"""Issue 16's acceptance at the validation door: files in the shape of upstream's Kubeflow examples are accepted
as written (tests/data/kubeflow/upstream-shaped: our own files, each naming the upstream example it follows).

For a cluster every file is accepted unchanged: images run there, and every field they use reaches the Pods. On
the embedded runtime, which runs no images, each file is accepted unchanged given a stand-in for its images
(``--stand-in``), except where a field has no meaning on one machine: those are refused at the path the author
wrote, and listed here with why.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.model.errors import SpecError
from phalanx.model.jobs import TrainingJob
from phalanx.model.loading import builtin_jobtypes, read_documents
from phalanx.model.pods import EMBEDDED_REFUSALS
from phalanx.services.operations import validate_documents

SHAPED = Path(__file__).parents[2] / "data" / "kubeflow" / "upstream-shaped"
FILES = sorted(SHAPED.glob("*.yaml"))
JOBTYPES = builtin_jobtypes()
CONTAINER = "template.spec.containers[0]"

#: What the embedded runtime refuses of these files, by file: path -> words of the reason.
EMBEDDED_REFUSED = {
    "tf-multi-worker.yaml": {f"spec.tfReplicaSpecs.Worker.{CONTAINER}.volumeMounts[0]": "persistentVolumeClaim"},
    "tf-summaries.yaml": {f"spec.tfReplicaSpecs.Worker.{CONTAINER}.volumeMounts[0]": "persistentVolumeClaim"},
    "trainjob-runtime-patches.yaml": {
        "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
        ".serviceAccountName": "no service accounts"
    },
    "mpi-pi.yaml": {
        f"spec.mpiReplicaSpecs.{role}.{CONTAINER}.securityContext": "as the user of the control plane"
        for role in ("Launcher", "Worker")
    },
    **{
        name: {
            **{
                f"spec.mpiReplicaSpecs.{role}.{CONTAINER}.securityContext": "as the user of the control plane"
                for role in ("Launcher", "Worker")
            },
            f"spec.mpiReplicaSpecs.Worker.{CONTAINER}.readinessProbe": "no kubelet",
        }
        for name in ("mpi-pi-intel.yaml", "mpi-pi-mpich.yaml")
    },
}


def images(value: Any) -> Iterator[str]:
    """Every ``image`` written in a document."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "image" and isinstance(item, str):
                yield item
            else:
                yield from images(item)
    elif isinstance(value, list):
        for item in value:
            yield from images(item)


def test_the_corpus_covers_every_kind_and_the_refusals_name_files_of_it() -> None:
    kinds = {doc["kind"] for path in FILES for doc in read_documents(path)}
    assert kinds >= {"PyTorchJob", "TFJob", "XGBoostJob", "JAXJob", "PaddleJob", "MPIJob", "TrainJob"}
    assert set(EMBEDDED_REFUSED) <= {path.name for path in FILES}


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.stem)
def test_a_cluster_accepts_the_file_unchanged(path: Path) -> None:
    parsed = validate_documents(
        read_documents(path),
        JOBTYPES,
        pod_field_refusals={},
        cluster_scheduling=True,
        own_scheduler="phalanx-scheduler",
    )
    assert [obj for obj in parsed if isinstance(obj, TrainingJob)]


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.stem)
def test_the_embedded_runtime_accepts_the_file_with_stand_ins_or_names_what_has_no_local_meaning(path: Path) -> None:
    documents = read_documents(path)
    stand_ins = {image: [sys.executable, "plays-the-image.py"] for doc in documents for image in images(doc)}
    expected = EMBEDDED_REFUSED.get(path.name, {})
    try:
        validate_documents(
            documents, JOBTYPES, pod_field_refusals=EMBEDDED_REFUSALS, stand_ins=stand_ins, cluster_scheduling=False
        )
    except SpecError as err:
        found = {error.path: error.message for error in err.errors}
        assert set(found) == set(expected), found
        for where, words in expected.items():
            assert words in found[where], (where, found[where])
    else:
        assert not expected, f"{path.name} was accepted, but {sorted(expected)} have no meaning on one machine"
