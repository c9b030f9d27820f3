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
