"""Dataset planning, pure: how a dataset is split over replicas and what a node cache keeps.

``sharding`` splits a dataset's files into disjoint shards balanced by bytes and names the environment a
replica sees; ``cache`` is the ledger of a content-addressed node cache (capacity, ``lru`` and
``noReplacement`` policies, pinning, per-dataset counters). The I/O around them lives in adapters and services.
"""

from phalanx.core.data.cache import Admission, AdmitResult, CacheLedger, CachePolicy, DatasetCounters
from phalanx.core.data.sharding import dataset_env, env_name, shard_files
from phalanx.core.data.staging import CacheEntry, DatasetFiles, ReplicaMount, StagingPlan, entry_key, plan_staging

__all__ = [
    "Admission",
    "AdmitResult",
    "CacheEntry",
    "CacheLedger",
    "CachePolicy",
    "DatasetCounters",
    "DatasetFiles",
    "ReplicaMount",
    "StagingPlan",
    "dataset_env",
    "entry_key",
    "env_name",
    "plan_staging",
    "shard_files",
]
