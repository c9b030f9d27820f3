"""Simulated inventories: multi-document Node files, with errors that name the file, document and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.adapters.devices import load_inventory, node_name_from_hostname
from phalanx.model.errors import SpecError

DATA = Path(__file__).parents[2] / "data" / "inventories"


def test_loads_every_document_and_marks_it_simulated() -> None:
    nodes = load_inventory(DATA / "two-nodes.yaml")

    assert [node.metadata.name for node in nodes] == ["gpu-a", "cpu-b"]
    assert {node.status.source for node in nodes} == {"simulated"}  # the file said "nvml" for gpu-a
    gpu_a, cpu_b = nodes
    assert [cpu.numa for cpu in gpu_a.status.cpus] == [0, 0, 1, 1]
    assert gpu_a.gpu_link(0, 1) == "NV"
    assert gpu_a.status.gpus[1].nvlinks == {0: 12}
    assert cpu_b.spec.reserved_cpus == [0]


def test_bad_document_error_names_file_document_and_fields() -> None:
    path = DATA / "bad-gpu-memory.yaml"

    with pytest.raises(SpecError) as caught:
        load_inventory(path)

    text = str(caught.value)
    assert str(path) in text
    assert "document 2 of 2" in text
    assert "status.gpus[0].memory: must be >= 0, got -1" in text
    assert "status.gpus[0].numaa: unknown field; did you mean 'numa'?" in text


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "kind: TrainingJob\nmetadata: {name: x}\n",
            "kind: an inventory holds only Node objects, got 'TrainingJob'",
        ),
        (
            "kind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata: {name: a}\n",
            "metadata.name: node 'a' is already defined in document 1",
        ),
        (
            "kind: Node\nmetadata: {name: Bad_Name}\n",
            "metadata.name: name 'Bad_Name' is not a DNS-1123 label",
        ),
        ("kind: Node\nmetadata: {name: n}\nstatus: {cpus: [{id: 0}, {id: 0}]}\n", "CPU ids must be unique"),
        (
            "kind: Node\nmetadata: {name: n}\nstatus: {cpus: [{id: zero}]}\n",
            "status.cpus[0].id: must be a whole",
        ),
        ("kind: Node\nstatus: {}\n", "metadata: required field is missing"),
        ("- just\n- a list\n", "document 1 is a list, expected a mapping"),
        ("kind: Node\nmetadata: {name: [\n", "not valid YAML"),
    ],
    ids=[
        "wrong-kind",
        "duplicate-name",
        "bad-name",
        "duplicate-cpu",
        "cpu-id-type",
        "no-metadata",
        "list",
        "yaml",
    ],
)
def test_invalid_inventories_are_explained(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)

    with pytest.raises(SpecError) as caught:
        load_inventory(path)

    assert expected in str(caught.value)
    assert str(path) in str(caught.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"file not found: .*nowhere\.yaml"):
        load_inventory(tmp_path / "nowhere.yaml")


@pytest.mark.parametrize(
    ("hostname", "name"),
    [
        ("gpu01", "gpu01"),
        ("GPU-Box_01.lab.example", "gpu-box-01-lab-example"),
        ("--weird--", "weird"),
        ("___", "localhost"),
        ("a" * 80, "a" * 63),
    ],
)
def test_host_names_become_dns_labels(hostname: str, name: str) -> None:
    assert node_name_from_hostname(hostname) == name
