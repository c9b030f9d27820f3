"""What both dataset managers share: the store of materialised versions and the staging plan of a job.

The embedded control plane (``services.embedded.datasets``) and the Kubernetes operator and node agents
(``services.kubernetes.datasets``, ``services.kubernetes.node_cache``) keep materialised Datasets the same way and
plan a job's staging the same way, so that every component that computes a job's plan computes the same one:

- **The store**: ``<root>/<namespace>/<name>/<version label>/`` holds one materialised version, and
  ``<version label>.json`` beside it its manifest (files, bytes, version, lineage), written once the copy is in
  place (``materialize_version``). The embedded root is ``<state>/datasets``; on Kubernetes it is the operator's
  ``--dataset-store`` volume, which node agents mount too.
- **A job's plan**: ``resolve_staging`` resolves each ``spec.datasets`` mount to a materialised version (pinned
  by the mount, recorded on the job, or the Dataset's current one) and returns ``core.data.plan_staging`` of
  the job's placed replicas (``placed_replicas``: ranked roles first, in rank order), or why it cannot yet
  (waiting) or ever (error).
"""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from phalanx.adapters.datacache import CacheError, StageOutcome
from phalanx.adapters.datasources import Materialized, SourceRequest, materialize
from phalanx.core.clock import Clock
from phalanx.core.data import CacheEntry, DatasetFiles, StagingPlan, plan_staging
from phalanx.core.lifecycle import HOLDING_PHASES
from phalanx.core.rendezvous import ranked_roles, replica_names
from phalanx.model.datasets import Dataset, DatasetPhase, DatasetSource, Distribution, version_label
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.jobtypes import JobType

log = logging.getLogger(__name__)

#: Phases in which a job's data must be (or is being) on its nodes and stays pinned there.
STAGING_PHASES = frozenset(HOLDING_PHASES - {Phase.HALTING})

#: On a job: the dataset versions it reads, JSON ``{mount name: version}``, fixed when first staged.
DATASET_VERSIONS_ANNOTATION = "phalanx.dev/dataset-versions"


def chosen_versions(job: TrainingJob) -> dict[str, str]:
    """The versions recorded on the job (``DATASET_VERSIONS_ANNOTATION``); empty before its first staging."""
    try:
        recorded = json.loads(job.metadata.annotations.get(DATASET_VERSIONS_ANNOTATION, "{}"))
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in recorded.items()} if isinstance(recorded, dict) else {}


def source_request(source: DatasetSource, field: str = "spec.source") -> SourceRequest:
    """The datasources adapter's request for a Dataset's source (not for ``fromJob``, which the manager resolves)."""
    if source.path is not None:
        return SourceRequest("path", path=source.path, field=f"{field}.path")
    if source.url is not None:
        return SourceRequest("url", url=source.url, field=f"{field}.url")
    if source.sql is not None:
        return SourceRequest("sql", sql_url=source.sql.url, query=source.sql.query, field=field)
    if source.script is not None:
        return SourceRequest("script", command=tuple(source.script.command), field=f"{field}.script.command")
    raise ValueError("a fromJob source is resolved to the job's outputs by the dataset manager")


def human_bytes(size: float) -> str:
    """``1.5 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"


def progress_reporter(say: Callable[[str], None], every_s: float, *, clock: Clock) -> Callable[[int, int | None], None]:
    """A materialisation's ``progress(done, total)``: ``say`` a sentence at most once every ``every_s`` seconds.

    The sentence reads ``materialising: 1.0 MiB of 4.0 MiB written``.
    """
    last = [float("-inf")]  # the first report is said at once, whatever the clock reads

    def report(done: int, total: int | None) -> None:
        now = clock.monotonic()
        if now - last[0] < every_s:
            return
        last[0] = now
        of = f" of {human_bytes(total)}" if total else ""
        say(f"materialising: {human_bytes(done)}{of} written")

    return report


def staging_ended(
    future: Future[StageOutcome], entry: CacheEntry, *, node: str, seconds: float
) -> tuple[StageOutcome | None, str]:
    """How a finished copy of ``entry`` into ``node``'s cache ended: its outcome and the sentence that says so.

    The outcome is None when the copy failed: a CacheError's sentence is the reason as it is; anything else is a
    bug, logged with its traceback. A hit or a copy reads ``default/images (sha256-…, 4.0 KiB) on n0: copied in
    0.1 s`` (the Staged event).
    """
    failure = future.exception()
    if failure is not None:
        if isinstance(failure, CacheError):
            return None, str(failure)
        log.error("staging %s on %s failed", entry.key, node, exc_info=failure)
        return None, f"staging failed: {failure!r}"
    outcome = future.result()
    how = "cache hit" if outcome == StageOutcome.HIT else f"copied in {seconds:.1f} s"
    return outcome, f"{entry.dataset} ({entry.key}, {human_bytes(entry.bytes)}) on {node}: {how}"


@dataclass(frozen=True)
class Manifest:
    """A materialised version: its files (relative path, bytes), version and lineage."""

    version: str
    files: tuple[tuple[str, int], ...]
    lineage: str

    @property
    def bytes(self) -> int:
        """Total size."""
        return sum(size for _, size in self.files)


def write_manifest(path: Path, done: Materialized) -> None:
    """Record a materialised version's files beside its directory."""
    document = {
        "version": done.version,
        "lineage": done.lineage,
        "files": [{"path": f.path, "bytes": f.bytes, "sha256": f.sha256} for f in done.files],
    }
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    temporary.write_text(json.dumps(document, indent=1))
    temporary.replace(path)


def read_manifest(path: Path) -> Manifest | None:
    """The manifest at ``path``, or None when there is none (not materialised, or removed)."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    files = tuple((str(f["path"]), int(f["bytes"])) for f in document["files"])
    return Manifest(version=str(document["version"]), files=files, lineage=str(document.get("lineage", "")))


def materialize_version(
    request: SourceRequest, incoming: Path, base_dir: Path, progress: Callable[[int, int | None], None] | None
) -> Materialized:
    """Materialise a source into ``incoming`` (a fresh directory beside the Dataset's versions), then put it in place.

    The copy is renamed to its version label (or dropped, when that version is already there: the same content
    again) and its manifest written beside it, last, so that a manifest always names a complete copy.

    Raises:
        SourceError: the source cannot be read; the message names the field and the fix.
    """
    done = materialize(request, incoming, base_dir=base_dir, progress=progress)
    label = version_label(done.version)
    final = incoming.parent / label
    if final.exists():
        shutil.rmtree(incoming, ignore_errors=True)  # the same content again: keep the copy we have
    else:
        incoming.rename(final)
    write_manifest(incoming.parent / f"{label}.json", done)
    return done


def sweep_leftovers(root: Path) -> list[Path]:
    """Remove what interrupted materialisations left under a store's root; return what went.

    Those are the dot-named files and directories beside the versions. Only while nothing materialises into it.
    """
    removed = []
    for dataset_dir in root.glob("*/*") if root.is_dir() else ():
        for child in dataset_dir.iterdir() if dataset_dir.is_dir() else ():
            if child.name.startswith("."):
                if child.is_dir():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
                removed.append(child)
    return removed


def remove_unknown_datasets(root: Path, known: frozenset[tuple[str, str]]) -> list[tuple[str, str]]:
    """Delete the materialised copies of every Dataset under ``root`` that is not ``known``; return which went.

    Those are deleted Datasets: node caches keep their copies, evictable.
    """
    removed = []
    for namespace_dir in root.iterdir() if root.is_dir() else ():
        for dataset_dir in namespace_dir.iterdir() if namespace_dir.is_dir() else ():
            key = (namespace_dir.name, dataset_dir.name)
            if key not in known:
                log.info("removing the materialised copies of deleted dataset %s/%s", *key)
                shutil.rmtree(dataset_dir, ignore_errors=True)
                removed.append(key)
    return removed


@dataclass(frozen=True)
class DatasetStore:
    """A directory of materialised Datasets: ``<root>/<namespace>/<name>/<version label>/`` and its manifest."""

    root: Path

    def dataset_dir(self, namespace: str, name: str) -> Path:
        """The materialised versions of one Dataset."""
        return self.root / namespace / name

    def version_dir(self, namespace: str, name: str, version: str) -> Path:
        """The files of one version (``version``: ``sha256:...`` or its label form)."""
        return self.dataset_dir(namespace, name) / version_label(version)

    def manifest_path(self, namespace: str, name: str, version: str) -> Path:
        """The manifest of one version."""
        return self.dataset_dir(namespace, name) / f"{version_label(version)}.json"

    def manifest(self, namespace: str, name: str, version: str) -> Manifest | None:
        """The manifest of one version, or None when it is not materialised here."""
        return read_manifest(self.manifest_path(namespace, name, version))


def placed_replicas(job: TrainingJob, jobtype: JobType | None) -> list[tuple[str, str, int | None]]:
    """The job's placed replicas as ``plan_staging`` takes them: ``(name, node, rank)``, rank None when unranked.

    The ranked roles' replicas are numbered in rank order over the placed ones only, so shard ``i`` of ``n`` goes
    to the ``i``-th placed ranked replica of ``n``.
    """
    ranked = set(ranked_roles(job, jobtype))
    replicas: list[tuple[str, str, int | None]] = []
    rank = 0
    for role, _index, name in replica_names(job, jobtype):
        placement = job.status.placements.get(name)
        if placement is None:
            continue
        if role in ranked:
            replicas.append((name, placement.node, rank))
            rank += 1
        else:
            replicas.append((name, placement.node, None))
    return replicas


ManifestLookup = Callable[[str, str, str], Manifest | None]


@dataclass(frozen=True)
class StagingResolution:
    """A job's staging plan, or why there is none yet (``waiting``) or ever (``error``).

    Attributes:
        plan: entries by node and mounts by replica, once every dataset is materialised.
        error: the job cannot be staged (a Dataset missing or failed, a pinned version not materialised).
        waiting: a Dataset is not materialised yet; the sentence says which.
        versions: the version each mount reads (to record on the job), with the plan.
        policies: each mount's Dataset's ``spec.cache.policy``, with the plan.
    """

    plan: StagingPlan | None = None
    error: str | None = None
    waiting: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    policies: dict[str, str] = field(default_factory=dict)


def resolve_staging(
    job: TrainingJob,
    jobtype: JobType | None,
    datasets: Mapping[tuple[str, str], Dataset],
    manifest: ManifestLookup,
) -> StagingResolution:
    """Resolve the job's mounts to materialised versions and plan their staging onto its placed replicas.

    Args:
        job: the job, with its placements.
        jobtype: its JobType (which roles are ranked).
        datasets: the Datasets by (namespace, name).
        manifest: ``(namespace, name, version) -> Manifest`` of a materialised version, None when it is not.
    """
    resolved = []
    chosen = chosen_versions(job)
    for position, mount in enumerate(job.spec.datasets):
        field_name = f"spec.datasets[{position}]"
        dataset = datasets.get((job.metadata.namespace, mount.dataset_name))
        if dataset is None:
            return StagingResolution(
                error=(
                    f"{field_name}: dataset {mount.dataset_name} does not exist in namespace "
                    f"{job.metadata.namespace}; create it (phalanx dataset create -f dataset.yaml) or fix the name"
                )
            )
        pinned = mount.version or chosen.get(mount.name)
        ready = dataset.status.phase == DatasetPhase.READY
        version = pinned or (dataset.status.version if ready else None)
        found = None if version is None else manifest(job.metadata.namespace, mount.dataset_name, version)
        if found is None:
            if dataset.status.phase == DatasetPhase.FAILED:
                return StagingResolution(
                    error=f"{field_name}: dataset {mount.dataset_name} failed to materialise: {dataset.status.message}"
                )
            if not ready:
                return StagingResolution(
                    waiting=(
                        f"waiting for dataset {mount.dataset_name} to materialise "
                        f"({dataset.status.message or 'pending'})"
                    )
                )
            return StagingResolution(
                error=(
                    f"{field_name}.version: version {version} of dataset {mount.dataset_name} is not "
                    f"materialised here (it holds {dataset.status.version}); pin that version or drop "
                    f"spec.datasets[{position}].version"
                )
            )
        distribution = mount.distribution or dataset.spec.distribution
        resolved.append(
            DatasetFiles(
                mount=mount.name,
                dataset=f"{job.metadata.namespace}/{mount.dataset_name}",
                version=found.version,
                distribution=Distribution(distribution),
                files=found.files,
            )
        )
    policies = {
        mount.name: str(datasets[(job.metadata.namespace, mount.dataset_name)].spec.cache.policy)
        for mount in job.spec.datasets
    }
    return StagingResolution(
        plan=plan_staging(resolved, placed_replicas(job, jobtype)),
        versions={data.mount: data.version for data in resolved},
        policies=policies,
    )


def dataset_of(entry_dataset: str) -> tuple[str, str]:
    """``(namespace, name)`` of a cache entry's dataset (``namespace/name``)."""
    namespace, _, name = entry_dataset.partition("/")
    return namespace, name


def manifests_reader(store: DatasetStore) -> Callable[[str, str, str], Manifest | None]:
    """A ``ManifestLookup`` over a store that remembers what it read (manifests never change once written)."""
    known: dict[tuple[str, str, str], Manifest] = {}

    def lookup(namespace: str, name: str, version: str) -> Manifest | None:
        key = (namespace, name, version_label(version))
        found = known.get(key)
        if found is not None and store.manifest_path(namespace, name, version).exists():
            return found
        found = store.manifest(namespace, name, version)
        if found is None:
            known.pop(key, None)
        else:
            known[key] = found
        return found

    return lookup
