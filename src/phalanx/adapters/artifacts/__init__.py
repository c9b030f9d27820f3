"""The pipeline artifact store: where step instances read and write their artifacts, and the step cache index.

``ArtifactStore`` is a local directory (the default: ``<state dir>/artifacts`` on the embedded runtime) or an
object store URL (``s3://``, ``gs://``, any fsspec URL, through the ``data`` extra and its ``s3``/``gcs`` extras).
"""

from phalanx.adapters.artifacts.store import (
    ArtifactStore,
    ArtifactStoreError,
    InstanceFolder,
    local_tree_digest,
)

__all__ = ["ArtifactStore", "ArtifactStoreError", "InstanceFolder", "local_tree_digest"]
