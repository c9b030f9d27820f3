"""The embedded scheduler's translation of store objects into the core's inputs: Queues into QueueQuotas."""

from __future__ import annotations

from typing import Any

from phalanx.core.scheduling import QueueQuota, QuotaAmounts
from phalanx.model.loading import parse_queue
from phalanx.services.scheduler import queue_quotas


def queue(name: str, spec: dict[str, Any], namespace: str = "default") -> Any:
    return parse_queue(
        {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )


def test_quota_cohort_borrowing_limit_and_weight_carry_over_in_core_units() -> None:
    [quota] = queue_quotas(
        [
            queue(
                "team-a",
                {
                    "quota": {"cpu": "64", "memory": "256Gi", "gpu": 8},
                    "cohort": "research",
                    "borrowingLimit": {"gpu": 4},
                    "weight": 2,
                },
            )
        ]
    )
    assert quota == QueueQuota(
        name="team-a",
        nominal=QuotaAmounts(cpu_milli=64_000, memory=256 * 2**30, gpus=8),
        cohort="research",
        borrowing_limit=QuotaAmounts(gpus=4),
        weight=2.0,
    )


def test_a_resource_left_out_is_unlimited_and_a_repeated_name_keeps_the_first() -> None:
    quotas = queue_quotas(
        [queue("team-a", {"quota": {"gpu": 1}}), queue("team-a", {"quota": {"gpu": 9}}, namespace="other")]
    )
    assert quotas == (QueueQuota(name="team-a", nominal=QuotaAmounts(gpus=1)),)
    assert quotas[0].borrowing_limit is None


def training_job(namespace: str = "team-a", **scheduling: Any) -> Any:
    from phalanx.model.jobs import TrainingJob

    return TrainingJob.model_validate(
        {
            "metadata": {"name": "j", "namespace": namespace},
            "spec": {
                "type": "generic",
                "replicas": {"worker": {"count": 1, "template": {"command": ["true"]}}},
                "scheduling": {"queue": "shared", **scheduling},
            },
        }
    )


def test_a_queue_refuses_jobs_of_other_namespaces_and_priority_classes_naming_the_fix() -> None:
    from phalanx.services.scheduler import queue_refusal

    queues = {"shared": queue("shared", {"namespaces": ["team-a", "team-b"], "priorityClasses": ["low", "normal"]})}
    assert queue_refusal(training_job("team-a", priorityClass="normal"), queues) is None
    elsewhere = queue_refusal(training_job("team-c", priorityClass="normal"), queues)
    assert elsewhere is not None and "team-c" in elsewhere and "spec.namespaces" in elsewhere
    high = queue_refusal(training_job("team-a", priorityClass="high"), queues)
    assert high is not None and "priority class high" in high and "spec.scheduling.priorityClass" in high
    unnamed = queue_refusal(training_job("team-a"), queues)
    assert unnamed is not None and "no priority class" in unnamed
    # No such queue, or a queue without filters: nothing refused.
    assert queue_refusal(training_job("team-c", priorityClass="high"), {}) is None
    assert queue_refusal(training_job("team-c"), {"shared": queue("shared", {})}) is None
