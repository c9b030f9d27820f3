"""The SchedulerConfiguration file: what it accepts, how it refuses, and the base policy it becomes."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.core.scheduling.config import (
    DEFAULT_LAS_THRESHOLDS,
    DEFAULT_POLICY,
    SchedulerConfig,
    cycle_config,
    from_configuration,
)
from phalanx.model.errors import SpecError
from phalanx.model.loading import read_scheduler_configuration
from phalanx.model.scheduler_config import SchedulerConfiguration

HEAD = "apiVersion: phalanx.dev/v1alpha1\nkind: SchedulerConfiguration\n"


def _read(tmp_path: Path, body: str) -> SchedulerConfiguration:
    path = tmp_path / "scheduler.yaml"
    path.write_text(HEAD + body)
    return read_scheduler_configuration(path)


def _problems(tmp_path: Path, body: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        _read(tmp_path, body)
    return [str(error) for error in caught.value.errors]


def test_every_field_becomes_the_base_policy(tmp_path: Path) -> None:
    body = (
        "queueOrder: least-attained-service\n"
        "timeSlicing: {enabled: true, thresholds: [60, 600], starveLimit: 2}\n"
        "queueingStrategy: backfill\nplacement: spread\npreemption: false\n"
    )
    policy = from_configuration(_read(tmp_path, body))
    assert policy == SchedulerConfig(
        queue_order="least-attained-service",
        las_thresholds=(60.0, 600.0),
        queueing_strategy="backfill",
        placement="spread",
        preemption=False,
        las_preempt=True,
        las_starve_limit=2.0,
    )


def test_an_empty_configuration_is_what_the_runtimes_did_before(tmp_path: Path) -> None:
    policy = from_configuration(_read(tmp_path, ""))
    assert policy == DEFAULT_POLICY
    assert (policy.queue_order, policy.queueing_strategy, policy.placement) == ("fifo", "best-effort-fifo", "auto")
    assert policy.preemption and not policy.las_preempt
    assert policy.las_thresholds == DEFAULT_LAS_THRESHOLDS


def test_priority_order_is_fifo_because_priority_always_goes_first(tmp_path: Path) -> None:
    assert from_configuration(_read(tmp_path, "queueOrder: priority\n")).queue_order == "fifo"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("queueOrder: lifo\n", "queueOrder: must be one of"),
        ("queueingStrategy: strict\n", "queueingStrategy: must be one of"),
        ("placment: pack\n", "placment: unknown field; did you mean 'placement'?"),
        ("placement: tight\n", "placement: must be one of"),
        ("timeSlicing: {enabled: true}\n", "timeSlicing: applies to queueOrder least-attained-service only"),
        (
            "queueOrder: least-attained-service\ntimeSlicing: {thresholds: [600, 60]}\n",
            "timeSlicing.thresholds: must be distinct positive",
        ),
        (
            "queueOrder: least-attained-service\ntimeSlicing: {thresholds: [0]}\n",
            "timeSlicing.thresholds: must be distinct positive",
        ),
        (
            "queueOrder: least-attained-service\ntimeSlicing: {starveLimit: 3}\n",
            "timeSlicing.starveLimit: applies only with time slicing",
        ),
        (
            "queueOrder: least-attained-service\ntimeSlicing: {enabled: true, starveLimit: 1e9}\n",
            "timeSlicing.starveLimit: must be <= 1000000.0",
        ),
        ("preemption: maybe\n", "preemption: "),
    ],
    ids=[
        "order",
        "strategy",
        "misspelt",
        "placement",
        "slicing-without-las",
        "descending",
        "zero",
        "starve-without-slicing",
        "starve-bound",
        "preemption",
    ],
)
def test_bad_fields_are_refused_with_one_sentence_naming_them(tmp_path: Path, body: str, expected: str) -> None:
    problems = _problems(tmp_path, body)
    assert len(problems) == 1
    assert problems[0].startswith(expected) or expected in problems[0], problems


def test_another_kind_or_two_documents_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(HEAD + "---\n" + HEAD)
    with pytest.raises(SpecError, match="must hold one SchedulerConfiguration document"):
        read_scheduler_configuration(path)
    path.write_text("apiVersion: phalanx.dev/v1alpha1\nkind: Queue\nmetadata: {name: q}\n")
    with pytest.raises(SpecError, match="not: Queue"):
        read_scheduler_configuration(path)


def test_a_cycle_keeps_the_policy_and_stops_preempting_while_victims_stop(tmp_path: Path) -> None:
    body = (
        "queueOrder: least-attained-service\ntimeSlicing: {enabled: true, starveLimit: 2}\n"
        "queueingStrategy: strict-fifo\n"
    )
    policy = from_configuration(_read(tmp_path, body))
    calm = cycle_config(policy, (), stopping=False)
    assert (calm.queueing_strategy, calm.preemption, calm.las_preempt, calm.las_starve_limit) == (
        "strict-fifo",
        True,
        True,
        2.0,
    )
    assert not calm.fair_share
    busy = cycle_config(policy, (), stopping=True)
    assert (busy.preemption, busy.las_preempt, busy.las_starve_limit) == (False, False, 0.0)
    assert busy.queue_order == "least-attained-service"


@pytest.mark.parametrize("body", ["preemption: 1\n", "preemption: 'no'\n", "timeSlicing: {enabled: 1}\n"])
def test_a_switch_of_the_configuration_takes_true_or_false_only(tmp_path: Path, body: str) -> None:
    problems = _problems(tmp_path, "queueOrder: least-attained-service\n" + body)
    assert len(problems) == 1 and "must be true or false" in problems[0], problems
