"""Fixtures for the runtime tests: a real control plane process on a temporary state directory, the real CLI,
and helpers that wait on the store's change feed rather than sleeping."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx.entrypoints.client import Client
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.services.embedded.daemon import current_leader
from support.processes import processes_mentioning
from support.waiting import wait_until

HERE = Path(__file__).parent
PROGRAM = str(HERE / "replica_program.py")
REPO = HERE.parents[2]


@dataclass
class ControlPlaneProcess:
    """A control plane running as a real process."""

    state_dir: Path
    process: subprocess.Popen[bytes]
    log_path: Path

    def kill9(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class Runtime:
    """A state directory with helpers to start control planes, run the CLI and inspect jobs."""

    state_dir: Path
    work_dir: Path
    planes: list[ControlPlaneProcess] = field(default_factory=list)
    background: list[subprocess.Popen[str]] = field(default_factory=list)

    def start_control_plane(
        self, *, wait_leader: bool = True, extra: list[str] | None = None, prefix: list[str] | None = None
    ) -> ControlPlaneProcess:
        """Start a control plane process; ``prefix`` runs it through a wrapper that execs it (same pid)."""
        log_path = self.state_dir / f"cp-{len(self.planes)}.log"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_file:
            process = subprocess.Popen(
                [
                    *(prefix or []),
                    sys.executable,
                    "-m",
                    "phalanx.entrypoints.controlplane",
                    "--state-dir",
                    str(self.state_dir),
                    "--grace-seconds",
                    "3",
                    *(extra or []),
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=self.work_dir,
            )
        plane = ControlPlaneProcess(self.state_dir, process, log_path)
        self.planes.append(plane)
        if wait_leader:
            with self.client() as client:
                wait_until(
                    lambda: (leader := current_leader(client.store)) is not None and leader.pid == process.pid,
                    message=f"control plane {process.pid} to lead; log:\n{plane.log()}",
                )
        return plane

    def client(self) -> Client:
        return Client(state_dir=self.state_dir)

    def cli(self, *args: str, timeout: float = 120.0, check: bool = False) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PHALANX_HOME": str(self.state_dir), "COLUMNS": "200"}
        result = subprocess.run(
            [sys.executable, "-m", "phalanx.entrypoints.cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=self.work_dir,
        )
        if check and result.returncode != 0:
            pytest.fail(f"phalanx {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result

    def cli_background(self, *args: str, output: Path) -> subprocess.Popen[str]:
        """Start the CLI without waiting for it; its stdout and stderr go to ``output`` as it writes them."""
        env = {**os.environ, "PHALANX_HOME": str(self.state_dir), "COLUMNS": "200"}
        with open(output, "w") as sink:
            process = subprocess.Popen(
                [sys.executable, "-m", "phalanx.entrypoints.cli", *args],
                stdout=sink,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                cwd=self.work_dir,
            )
        self.background.append(process)
        return process

    def write_job(self, name: str, document: dict[str, Any]) -> Path:
        path = self.work_dir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path

    def submit(self, document: dict[str, Any]) -> str:
        with self.client() as client:
            client.submit(document)
        return str(document["metadata"]["name"])

    def wait_phase(self, name: str, phases: set[Phase], timeout: float = 60.0) -> TrainingJob:
        with self.client() as client:
            try:
                return client.wait(name, until=phases, timeout=timeout)
            except TimeoutError:
                job = client.get(name)
                logs = "\n".join(p.log()[-3000:] for p in self.planes)
                pytest.fail(f"job {name} stuck in {job.status.phase} ({job.status.message}); logs:\n{logs}")

    def wait_waiting(self, name: str, timeout: float = 30.0) -> TrainingJob:
        """Wait until the scheduler has said why the job waits (``status.reason`` Waiting) and return it.

        The controller's own Queued message ("waiting for quota and room") comes first; this waits past it.
        """
        with self.client() as client:
            return wait_until(
                lambda: (job := client.get(name)).status.reason == "Waiting" and job,
                timeout=timeout,
                message=f"the scheduler's waiting reason for {name}",
            )

    def cleanup(self) -> None:
        for process in self.background:
            if process.poll() is None:
                process.kill()
                process.wait(5)
        for plane in self.planes:
            plane.stop()
        for pid in processes_mentioning(str(self.state_dir)):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    work = tmp_path / "work"
    work.mkdir()
    rt = Runtime(state_dir=tmp_path / "state", work_dir=work)
    try:
        yield rt
    finally:
        rt.cleanup()


def generic_job(
    name: str,
    *,
    replicas: int = 1,
    cpu: str | int = "100m",
    memory: str = "64Mi",
    args: list[str] | None = None,
    run_policy: dict[str, Any] | None = None,
    job_type: str = "generic",
    role: str = "worker",
    extra_roles: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A job running replica_program.py."""
    roles = {
        role: {
            "count": replicas,
            "template": {
                "command": ["python", PROGRAM, *(args or [])],
                "resources": {"cpu": cpu, "memory": memory},
            },
        }
    }
    roles.update(extra_roles or {})
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {"type": job_type, "replicas": roles, "runPolicy": run_policy or {}},
    }


def program_role(
    count: int = 1,
    *,
    args: list[str] | None = None,
    cpu: str | int | None = "100m",
    memory: str | None = "64Mi",
    gpu: int | None = None,
) -> dict[str, Any]:
    """One role of a job running replica_program.py; resources left as None are for defaulting to fill."""
    resources: dict[str, Any] = {}
    for key, value in (("cpu", cpu), ("memory", memory), ("gpu", gpu)):
        if value is not None:
            resources[key] = value
    template: dict[str, Any] = {"command": ["python", PROGRAM, *(args or [])]}
    if resources:
        template["resources"] = resources
    return {"count": count, "template": template}


def typed_job(name: str, job_type: str, roles: dict[str, dict[str, Any]], **spec: Any) -> dict[str, Any]:
    """A TrainingJob of ``job_type`` with the given roles (see ``program_role``) and extra spec fields."""
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {"type": job_type, "replicas": roles, **spec},
    }


def read_envs(directory: Path) -> dict[str, dict[str, str]]:
    """The environments replicas wrote with ``--env-dir``, by ``<role>-<index>``."""
    if not directory.is_dir():
        return {}
    return {path.stem: json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))}


def parse_table(text: str, first_column: str = "NAME", *, stop_at: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """Rows of a table the CLI printed without borders, as {header: cell}.

    Columns start where the header's words start (headers may hold one space, columns are two apart). Rows
    end at a blank line or at a line in ``stop_at``; a row whose first cell is empty continues a folded one.
    """
    lines = text.splitlines()
    begin = next(i for i, line in enumerate(lines) if line.split()[:1] == [first_column])
    header = lines[begin]
    starts = [m.start() for m in re.finditer(r"(?:^|(?<=  ))\S", header)]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    names = [header[a:b].strip() for a, b in bounds]
    rows = []
    for line in lines[begin + 1 :]:
        if not line.strip() or line.strip() in stop_at:
            break
        cells = [line[a:b].strip() for a, b in bounds]
        if cells[0]:
            rows.append(dict(zip(names, cells, strict=True)))
    return rows
