"""The Queue API object: its shape, defaults, quantities and field-path errors (no enforcement yet)."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.model.errors import SpecError
from phalanx.model.loading import parse_queue
from phalanx.model.queues import Queue


def queue(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "team-a"}, "spec": spec}


def errors_of(document: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_queue(document)
    return [str(error) for error in caught.value.errors]


def test_a_full_queue_parses_with_quantities_held_as_integers() -> None:
    parsed = parse_queue(
        queue(
            quota={"cpu": 64, "memory": "256Gi", "gpu": 8},
            cohort="research",
            borrowingLimit={"gpu": 4, "cpu": "500m"},
            weight=2.5,
            priorityClasses=["normal", "high"],
            namespaces=["team-a", "team-a-ci"],
        )
    )
    assert (parsed.spec.quota.cpu, parsed.spec.quota.memory, parsed.spec.quota.gpu) == (64_000, 256 * 2**30, 8)
    assert parsed.spec.borrowing_limit is not None
    assert parsed.spec.borrowing_limit.named() == {"cpu": 500, "gpu": 4}
    assert parsed.spec.weight == 2.5
    assert parsed.spec.priority_classes == ["normal", "high"]


def test_an_empty_spec_means_one_unlimited_queue_with_weight_one() -> None:
    parsed = parse_queue({"metadata": {"name": "default"}})
    assert parsed.spec.quota.named() == {}
    assert (parsed.spec.cohort, parsed.spec.borrowing_limit, parsed.spec.weight) == (None, None, 1.0)
    assert parsed.spec.priority_classes == [] and parsed.spec.namespaces == []
    assert (parsed.status.admitted, parsed.status.pending, parsed.status.usage.named()) == (0, 0, {})


def test_zero_is_a_quota_of_none_not_an_unlimited_one() -> None:
    assert parse_queue(queue(quota={"gpu": 0})).spec.quota.named() == {"gpu": 0}


def test_the_wire_form_writes_quantities_in_kubernetes_notation_and_reads_back_equal() -> None:
    parsed = parse_queue(queue(quota={"cpu": "1.5", "memory": 2**30}, cohort="c", borrowingLimit={"cpu": 2}))
    wire = parsed.to_dict()
    assert wire["spec"]["quota"] == {"cpu": "1500m", "memory": "1Gi"}
    assert wire["spec"]["borrowingLimit"] == {"cpu": "2"}
    assert Queue.model_validate(wire) == parsed


def test_status_in_a_document_is_ignored() -> None:
    document = {**queue(), "status": {"admitted": 7}}
    assert parse_queue(document).status.admitted == 0


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"weight": 0}, "spec.weight: must be > 0", id="zero-weight"),
        pytest.param({"weight": -1}, "spec.weight: must be > 0", id="negative-weight"),
        pytest.param(
            {"priorityClasses": ["normal", "urgent"]},
            "spec.priorityClasses[1]: unknown priority class 'urgent'; use one of low, normal, high, critical",
            id="unknown-priority-class",
        ),
        pytest.param(
            {"borrowingLimit": {"gpu": 2}},
            "spec.borrowingLimit: a queue borrows only from its cohort; set cohort",
            id="borrowing-without-cohort",
        ),
        pytest.param(
            {"quota": {"cpu": 8}, "cohort": "research", "borrowingLimit": {"gpu": 2}},
            "spec.borrowingLimit.gpu: quota.gpu is not set",
            id="borrowing-an-unlimited-resource",
        ),
        pytest.param({"cohort": "Research Team"}, "spec.cohort: cohort 'Research Team' is not a DNS-1123", id="cohort"),
        pytest.param(
            {"namespaces": ["ok", "Team_B"]}, "spec.namespaces[1]: namespace 'Team_B' is not a DNS-1123", id="ns"
        ),
        pytest.param({"quota": {"cpu": "lots"}}, "spec.quota.cpu: invalid CPU quantity 'lots'", id="bad-cpu"),
        pytest.param({"quota": {"memory": "4Gb"}}, "spec.quota.memory: invalid memory unit 'Gb'", id="bad-memory"),
        pytest.param({"quota": {"gpu": -1}}, "spec.quota.gpu: must be >= 0, got -1", id="negative-gpu"),
        pytest.param({"quota": {"gpus": 8}}, "spec.quota.gpus: unknown field; did you mean 'gpu'?", id="misspelt"),
        pytest.param({"cohorts": "x"}, "spec.cohorts: unknown field; did you mean 'cohort'?", id="misspelt-top"),
    ],
)
def test_bad_queues_are_refused_with_the_field_path(spec: dict[str, Any], expected: str) -> None:
    errors = errors_of(queue(**spec))
    assert any(error.startswith(expected) for error in errors), errors


def test_every_problem_is_reported_at_once() -> None:
    errors = errors_of(queue(weight=0, priorityClasses=["urgent"], quota={"gpu": -1}))
    assert len(errors) == 3


def test_the_kind_must_be_queue() -> None:
    assert errors_of({**queue(), "kind": "Queu"}) == ["kind: must be one of 'Queue', got 'Queu'"]
