"""The embedded scheduler's translation of store objects into the core's inputs: Queues into QueueQuotas."""

from __future__ import annotations

from typing import Any

from phalanx.core.scheduling import QueueQuota, QuotaAmounts
from phalanx.model.loading import parse_queue
from phalanx.services.scheduling import queue_quotas


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
    from phalanx.services.scheduling import queue_refusal

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


def test_queue_statuses_count_admitted_and_pending_jobs_and_the_placed_replicas_usage() -> None:
    from phalanx.model.jobs import ReplicaPlacement, TrainingJob
    from phalanx.services.scheduling import queue_statuses

    def job(name: str, phase: str, queue_name: str, placed: int = 0) -> TrainingJob:
        parsed = TrainingJob.model_validate(
            {
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {
                    "type": "generic",
                    "scheduling": {"queue": queue_name},
                    "replicas": {
                        "worker": {
                            "count": 2,
                            "template": {"command": ["true"], "resources": {"cpu": 2, "memory": "1Gi", "gpu": 1}},
                        }
                    },
                },
            }
        )
        placements = {f"{name}-worker-{i}": ReplicaPlacement(node="n", gpus=[i]) for i in range(placed)}
        status = parsed.status.model_copy(update={"phase": phase, "placements": placements})
        return parsed.model_copy(update={"status": status})

    jobs = [
        job("a", "Running", "team", placed=2),
        job("b", "Admitted", "team", placed=1),  # minAvailable-like: one of two placed
        job("c", "Queued", "team"),
        job("d", "Succeeded", "team", placed=2),  # finished: holds nothing
        job("e", "Running", "other-team", placed=2),
    ]
    statuses = queue_statuses([queue("team", {}), queue("idle", {})], jobs)
    assert set(statuses) == {"team", "idle"}
    team = statuses["team"]
    assert (team.admitted, team.pending) == (2, 1)
    assert (team.usage.cpu, team.usage.memory, team.usage.gpu) == (6_000, 3 * 2**30, 3)
    assert statuses["idle"].admitted == statuses["idle"].pending == 0


def test_dataset_needs_weigh_what_a_replica_fetches_and_skip_unknown_datasets() -> None:
    from phalanx.model.jobs import TrainingJob
    from phalanx.model.loading import parse_dataset
    from phalanx.services.scheduling import dataset_needs

    def dataset(name: str, distribution: str, size: int) -> Any:
        parsed = parse_dataset(
            {
                "apiVersion": "phalanx.dev/v1alpha1",
                "kind": "Dataset",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"source": {"path": "/d"}, "distribution": distribution},
            }
        )
        return parsed.model_copy(update={"status": parsed.status.model_copy(update={"version": "v1", "bytes": size})})

    job = TrainingJob.model_validate(
        {
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {
                "replicas": {"worker": {"count": 4, "template": {"command": ["true"]}}},
                "datasets": [
                    {"name": "full"},
                    {"name": "parts"},
                    {"name": "pinned", "dataset": "full", "version": "v0", "distribution": "shard"},
                    {"name": "missing"},
                ],
            },
        }
    )
    known = {("ns", "full"): dataset("full", "replicate", 1000), ("ns", "parts"): dataset("parts", "shard", 1001)}
    needs = dataset_needs(job, known)
    assert [(n.name, n.version, n.bytes) for n in needs] == [
        ("full", "v1", 1000),
        ("parts", "v1", 251),
        ("full", "v0", 250),
    ]


def test_a_job_lists_each_dataset_mount_once() -> None:
    import pytest

    from phalanx.model.jobs import TrainingJob

    with pytest.raises(ValueError, match="dataset name train is listed twice"):
        TrainingJob.model_validate(
            {
                "metadata": {"name": "j"},
                "spec": {
                    "replicas": {"worker": {"count": 1, "template": {"command": ["true"]}}},
                    "datasets": [{"name": "train"}, {"name": "train", "dataset": "other"}],
                },
            }
        )
