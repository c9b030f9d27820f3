"""A node's dataset cache on disk: content-addressed entries, a capacity, a policy, pins and counters.

Used by the embedded runtime (one cache per node under the state directory) and by the Kubernetes node agent
(on a hostPath). See ``NodeDataCache``.
"""

from phalanx.adapters.datacache.node_cache import (
    CachedEntry,
    CacheError,
    NodeDataCache,
    StageOutcome,
    in_use_sentence,
)

__all__ = ["CacheError", "CachedEntry", "NodeDataCache", "StageOutcome", "in_use_sentence"]
