"""The frameworks tier's runtime: Phalanx run as a user runs it, from an environment that holds the frameworks.

The environment is the one hack/frameworks_env.py builds outside the repository (torch, jax, xgboost,
tensorflow, Open MPI with mpi4py, dask, and Phalanx's own dependencies). Phalanx itself comes from this
checkout's ``src`` (on PYTHONPATH), so ``python`` in a job's command is that environment's interpreter, exactly
as for a user who installed Phalanx beside their framework. Tests run the examples under examples/frameworks
through the real CLI (``phalanx run``) and read what the programs wrote to their outputs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from support.processes import processes_mentioning

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "frameworks"


@dataclass
class FrameworksRuntime:
    """A fresh state directory and work directory, with the CLI run from the frameworks environment."""

    env_dir: Path
    state_dir: Path
    work_dir: Path

    @property
    def python(self) -> str:
        return str(self.env_dir / "bin" / "python")

    def environ(self) -> dict[str, str]:
        """The user's shell: the frameworks environment activated, Phalanx importable, a private state dir."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHALANX_", "VIRTUAL_ENV", "PYTHON"))}
        env.update(
            {
                "PATH": f"{self.env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}",
                "VIRTUAL_ENV": str(self.env_dir),
                "PYTHONPATH": str(REPO / "src"),
                "PHALANX_HOME": str(self.state_dir),
                "COLUMNS": "200",
            }
        )
        return env

    def cli(self, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        """Run ``phalanx ARGS`` from the work directory and return what it did."""
        return subprocess.run(
            [self.python, "-m", "phalanx.entrypoints.cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.environ(),
            cwd=self.work_dir,
            check=False,
        )

    def cli_background(self, *args: str, output: Path) -> subprocess.Popen[str]:
        """Start ``phalanx ARGS`` without waiting; its output goes to ``output`` as it is written."""
        with open(output, "w") as sink:
            return subprocess.Popen(
                [self.python, "-m", "phalanx.entrypoints.cli", *args],
                stdout=sink,
                stderr=subprocess.STDOUT,
                text=True,
                env=self.environ(),
                cwd=self.work_dir,
            )

    def copy_example(self, name: str) -> Path:
        """Copy examples/frameworks/NAME into the work directory, at the same relative path; return it."""
        target = self.work_dir / "examples" / "frameworks" / name
        shutil.copytree(EXAMPLES / name, target)
        return target

    def run_example(
        self, name: str, file: str = "job.yaml", *, timeout: float = 400.0
    ) -> subprocess.CompletedProcess[str]:
        """``phalanx run examples/frameworks/NAME/FILE``, as docs/frameworks.md tells a user to."""
        if not (self.work_dir / "examples" / "frameworks" / name).exists():
            self.copy_example(name)
        return self.cli("run", f"examples/frameworks/{name}/{file}", timeout=timeout)

    def job(self, name: str) -> dict[str, Any]:
        """The job as ``phalanx get job NAME -o json`` prints it."""
        result = self.cli("get", "job", name, "-o", "json", timeout=60)
        assert result.returncode == 0, result.stderr
        return dict(json.loads(result.stdout))

    def outputs(self, job: str) -> Path:
        """Where a finished job's outputs were stored (``outputs.storeTo`` of the examples)."""
        return self.work_dir / "outputs" / job

    def results(self, job: str) -> dict[str, dict[str, Any]]:
        """The ``result-*.json`` files the example programs write, by file stem."""
        return {p.stem: json.loads(p.read_text()) for p in sorted(self.outputs(job).glob("result-*.json"))}

    def cleanup(self) -> None:
        """Stop the control plane and anything left that mentions the state directory."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.cli("down", timeout=60)
        for pid in processes_mentioning(str(self.state_dir)):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def load_example(name: str, file: str = "job.yaml") -> list[dict[str, Any]]:
    """The YAML documents of an example (a job file may carry its JobType too)."""
    return [doc for doc in yaml.safe_load_all((EXAMPLES / name / file).read_text()) if doc]


@contextlib.contextmanager
def frameworks_runtime(env_dir: Path, tmp_path: Path) -> Iterator[FrameworksRuntime]:
    """A FrameworksRuntime on fresh directories under ``tmp_path``, cleaned up afterwards."""
    work = tmp_path / "work"
    work.mkdir()
    runtime = FrameworksRuntime(env_dir=env_dir, state_dir=tmp_path / "state", work_dir=work)
    try:
        yield runtime
    finally:
        runtime.cleanup()


def program_pids(state_dir: Path, job: str, role: str, index: int) -> list[int]:
    """Pids of the processes running a replica's program (and its children), found by the environment Phalanx
    gave them: ``PHALANX_JOB_NAME``, ``PHALANX_ROLE``, ``PHALANX_REPLICA_INDEX``, and an output directory under
    this runtime's state directory (two tests may both run a job of the same name)."""
    wanted = {
        b"PHALANX_JOB_NAME=" + job.encode(),
        b"PHALANX_ROLE=" + role.encode(),
        b"PHALANX_REPLICA_INDEX=" + str(index).encode(),
    }
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            variables = set((entry / "environ").read_bytes().split(b"\0"))
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        output = next((v for v in variables if v.startswith(b"PHALANX_OUTPUT_DIR=")), b"")
        if wanted <= variables and output.startswith(b"PHALANX_OUTPUT_DIR=" + str(state_dir).encode()) and state != "Z":
            found.append(int(entry.name))
    return sorted(found)
