"""The placement and topology policy names a ``PendingJob`` may carry, and their validation.

``PendingJob`` holds them as plain strings (the hot path stays free of enums from the API model). The API
already validates them; ``check_policies`` is the scheduler's guard against a backend passing something else,
run before a cycle starts so a bad job fails loudly instead of being placed by a silent default.
"""

from __future__ import annotations

from phalanx.core.scheduling.types import PendingJob

PACK = "pack"
SPREAD = "spread"
BINPACK = "binpack"
AUTO = "auto"
FRAGMENTATION = "fragmentation"
RANDOM = "random"
PLACEMENTS = frozenset({PACK, SPREAD, BINPACK, AUTO, FRAGMENTATION, RANDOM})

TOPOLOGY_NONE = "none"
TOPOLOGY_PREFERRED = "preferred"
TOPOLOGY_REQUIRED = "required"
TOPOLOGIES = frozenset({TOPOLOGY_NONE, TOPOLOGY_PREFERRED, TOPOLOGY_REQUIRED})


def check_policies(job: PendingJob) -> None:
    """Reject a job whose placement or topology the scheduler does not know.

    Raises:
        ValueError: naming the job, the bad value and the allowed ones.
    """
    if job.placement not in PLACEMENTS:
        allowed = ", ".join(sorted(PLACEMENTS))
        raise ValueError(f"job {job.key}: placement {job.placement!r} is not one of {allowed}")
    if job.topology not in TOPOLOGIES:
        allowed = ", ".join(sorted(TOPOLOGIES))
        raise ValueError(f"job {job.key}: topology {job.topology!r} is not one of {allowed}")
