"""How a step's replicas reach the artifact store's files, and whether a step may start where they cannot.

A step's process reads its inputs and writes its outputs under its instance folder of the artifact store
(``adapters.artifacts.InstanceFolder``); the controller that computed those paths reads the outputs back. That
works where the replicas see the controller's directory:

- the embedded runtime: replicas are processes of the control plane's host, on its file system
  (``SAME_FILESYSTEM``);
- Kubernetes, with the store a directory on a PersistentVolumeClaim the operator mounts at the store's path
  (``--artifact-volume-claim``): every step job mounts the same claim at the same path, so the paths resolve in
  its Pods (``StoreVolume``).

Anywhere else (Kubernetes with the store in the operator's own directory, or an object store URL, which has no
Pod-side staging yet) a step that reads or writes files cannot run: it fails at once with a sentence saying so
and naming the fix, instead of failing later on a missing file. A step with neither file inputs nor outputs
(parameters only) needs no files and runs everywhere. A backend says which case it is (``StepFiles``, its
``step_files`` attribute); ``store_access`` decides, here, once.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The name of the artifact store's volume in a step job's replicas.
STORE_VOLUME_NAME = "pipeline-artifacts"

#: The option that puts the operator's artifact store on a claim (its chart value: artifacts.persistentVolumeClaim).
CLAIM_OPTION = "--artifact-volume-claim"


@dataclass(frozen=True, slots=True)
class StepFiles:
    """How a backend's step replicas reach the artifact store (its ``step_files``).

    Attributes:
        same_filesystem: the replicas run on the controller's own file system (the embedded runtime).
        claim: the PersistentVolumeClaim the store's directory is on, mounted in the controller at the store's
            path (Kubernetes with ``--artifact-volume-claim``); None: none.
    """

    same_filesystem: bool
    claim: str | None = None


#: The embedded runtime's (and the memory backend's): every path the controller computes is the replicas' too.
SAME_FILESYSTEM = StepFiles(same_filesystem=True)


@dataclass(frozen=True, slots=True)
class StoreVolume:
    """The claim a step job's replicas mount at ``mount_path`` (the store's directory) to see the store."""

    claim: str
    mount_path: str
    name: str = STORE_VOLUME_NAME


@dataclass(frozen=True, slots=True)
class StoreAccess:
    """What a step job needs to see the store: a volume to mount (or nothing), or why it cannot start."""

    volume: StoreVolume | None = None
    refusal: str | None = None


def store_access(files: StepFiles, store_directory: str | None, *, reads_or_writes_files: bool) -> StoreAccess:
    """How a step job sees the artifact store.

    Args:
        files: the backend's ``step_files``.
        store_directory: the store's directory (its absolute path); None for an object store URL.
        reads_or_writes_files: whether the step has a file input or output (a parameter-only step has none).
    """
    why = _unreachable(files, store_directory)
    if why is not None:
        refusal = f"its file inputs and outputs cannot reach its Pods: {why}" if reads_or_writes_files else None
        return StoreAccess(refusal=refusal)
    if files.same_filesystem:
        return StoreAccess()
    assert files.claim is not None and store_directory is not None
    # Every step job gets the claim, parameter-only ones too: one shape for every step, nothing to decide per step.
    return StoreAccess(volume=StoreVolume(files.claim, store_directory))


def store_warning(files: StepFiles, store_directory: str | None) -> str | None:
    """What the operator says at start when steps with files cannot run with this store (None: they can)."""
    why = _unreachable(files, store_directory)
    return None if why is None else f"pipeline steps with file inputs or outputs will fail: {why}"


def _unreachable(files: StepFiles, store_directory: str | None) -> str | None:
    """Why step replicas cannot see the store, with the fix; None when they can."""
    if files.same_filesystem:
        return None
    fix = f"({CLAIM_OPTION}; chart value artifacts.persistentVolumeClaim)"
    if store_directory is None:
        return (
            "the operator's artifact store is an object store, which Pods cannot stage files from yet; use a "
            f"directory store on a PersistentVolumeClaim {fix}"
        )
    if files.claim is None:
        return (
            f"the operator's artifact store {store_directory} is its own directory, which Pods cannot see; put it "
            f"on a PersistentVolumeClaim {fix}"
        )
    return None
