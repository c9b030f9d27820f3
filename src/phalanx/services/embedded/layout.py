"""Where the embedded runtime keeps things under its state directory, in one place.

``<state>/phalanx.db`` (SQLite store), ``<state>/sweeps.db`` (the sweeps' studies), ``<state>/tokens.db`` (API
tokens, ``adapters.auth.token_store``), ``<state>/history.db`` (the job history), ``<state>/api.sock`` (the local
API), ``<state>/cli.sock`` and ``cli.lock`` (the preloaded command process), ``<state>/controlplane.log``,
``<state>/scheduler-config.yaml`` (``phalanx up --scheduler-config``), ``<state>/runs/<ns>/<job>/<uid8>/``
(per job: ``<outputs.path>/`` shared by its replicas, ``replicas/<replica>-a<attempt>/`` per launched replica
with its log), ``<state>/artifacts/<ns>/<job>/`` (default destination of stored outputs),
``<state>/datasets/<ns>/<name>/`` (materialised datasets), ``<state>/cache/<node>/`` (each node's dataset cache),
``<state>/secrets/<ns>/<name>/<key>`` and ``<state>/configmaps/<ns>/<name>/<key>`` (what env ``valueFrom`` and
``envFrom`` read; written by the user).

The state directory is its owner's alone (0700): the store holds tokens of job environments and datasource
passwords, the run directories hold launch files and logs (``adapters.private_files``).
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)
STATE_DIR_ENV = "PHALANX_HOME"


def default_state_dir() -> Path:
    """``$PHALANX_HOME``, else ``$XDG_DATA_HOME/phalanx``, else ``~/.local/share/phalanx``."""
    if explicit := os.environ.get(STATE_DIR_ENV):
        return Path(explicit).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "phalanx"


@dataclass(frozen=True)
class StateLayout:
    """Paths inside one state directory."""

    root: Path

    @property
    def database(self) -> Path:
        """The SQLite store."""
        return self.root / "phalanx.db"

    @property
    def sweeps_database(self) -> Path:
        """The sweeps' studies (Optuna's storage, a SQLite file of its own: its schema is Optuna's, not ours)."""
        return self.root / "sweeps.db"

    @property
    def tokens_database(self) -> Path:
        """The API tokens (``adapters.auth.token_store``: SHA-256 digests only, a SQLite file of its own)."""
        return self.root / "tokens.db"

    @property
    def history_database(self) -> Path:
        """The job history (``adapters.history``), a SQLite file of its own unless a PostgreSQL URL is given."""
        return self.root / "history.db"

    @property
    def api_socket(self) -> Path:
        """The control plane's local API (a Unix socket)."""
        return self.root / "api.sock"

    @property
    def cli_socket(self) -> Path:
        """The preloaded command process's socket (``entrypoints.cli.preload``), while a control plane runs."""
        return self.root / "cli.sock"

    @property
    def cli_lock(self) -> Path:
        """Held by the one preloaded command process that serves ``cli_socket``."""
        return self.root / "cli.lock"

    @property
    def scheduler_config(self) -> Path:
        """The SchedulerConfiguration every control plane of this directory runs (``up --scheduler-config``)."""
        return self.root / "scheduler-config.yaml"

    @property
    def control_plane_log(self) -> Path:
        """Where the background control plane writes its log."""
        return self.root / "controlplane.log"

    def job_dir(self, namespace: str, name: str, uid: str) -> Path:
        """Everything one job (one uid) produced on this machine."""
        return self.root / "runs" / namespace / name / uid[:8]

    def job_outputs(self, namespace: str, name: str, uid: str, path: str = "outputs") -> Path:
        """The directory replicas write outputs to (``PHALANX_OUTPUT_DIR``): the job's ``outputs.path``."""
        return self.job_dir(namespace, name, uid) / path

    def replica_run_dir(self, namespace: str, job: str, uid: str, replica: str, attempt: int) -> Path:
        """One launch of one replica: launch file, log, exit code."""
        return self.job_dir(namespace, job, uid) / "replicas" / f"{replica}-a{attempt}"

    def remove_job_files(self, namespace: str, name: str, uid: str | None) -> None:
        """Remove what a deleted job left here: replica logs, launch files, outputs (stored copies stay)."""
        if uid:
            shutil.rmtree(self.job_dir(namespace, name, uid), ignore_errors=True)

    @property
    def artifacts(self) -> Path:
        """The default artifact store of pipelines (``adapters.artifacts``), beside jobs' default artifacts."""
        return self.root / "artifacts"

    @property
    def artifact_staging(self) -> Path:
        """Where step instances of a remote artifact store are staged on this machine."""
        return self.root / "artifact-staging"

    def default_artifacts(self, namespace: str, name: str) -> Path:
        """Where outputs are stored when the job does not say ``outputs.storeTo``."""
        return self.root / "artifacts" / namespace / name

    @property
    def datasets_root(self) -> Path:
        """Materialised datasets: ``datasets/<ns>/<name>/<version label>/`` and a ``<version label>.json`` manifest."""
        return self.root / "datasets"

    def dataset_dir(self, namespace: str, name: str) -> Path:
        """The materialised versions of one Dataset."""
        return self.datasets_root / namespace / name

    def dataset_manifest(self, namespace: str, name: str, version: str) -> Path:
        """The file list of one materialised version (``version``: ``sha256:...`` or its label form)."""
        return self.dataset_dir(namespace, name) / f"{version.replace(':', '-')[:63]}.json"

    def secret_dir(self, namespace: str, name: str) -> Path:
        """A Secret of the embedded runtime: one file per key, read when a replica that names it starts."""
        return self.root / "secrets" / namespace / name

    def config_map_dir(self, namespace: str, name: str) -> Path:
        """A ConfigMap of the embedded runtime: one file per key, as ``secret_dir``."""
        return self.root / "configmaps" / namespace / name

    def node_cache_dir(self, node: str) -> Path:
        """One node's dataset cache (``adapters.datacache.NodeDataCache``)."""
        return self.root / "cache" / node

    def sample_cache_dir(self, node: str) -> Path:
        """Where replicas on ``node`` keep ``phalanx.data.SampleCache`` directories (``PHALANX_SAMPLE_CACHE_DIR``)."""
        return self.root / "samples" / node

    def ensure(self) -> None:
        """Create the state directory with mode 0700, or make an existing one 0700 (saying so in the log).

        An older version created it 0755, which let every local user read the store and the replicas' logs.
        """
        # Imported here: `phalanx run` reads the paths of this module on its fast path, which loads no adapters.
        from phalanx.adapters.private_files import make_private_dirs, tighten

        make_private_dirs(self.root)
        if (before := tighten(self.root)) is not None:
            log.warning("state directory %s was readable by other users (mode %04o); made it 0700", self.root, before)
