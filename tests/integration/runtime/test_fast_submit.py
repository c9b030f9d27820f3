"""`phalanx submit FILE` with a control plane running takes the launcher's fast path: the control plane validates.

The console script (``launcher.main``) is run as users run it. With a control plane, the submission goes to its
local API without this process importing pydantic (the typer command's models and validation, about half a
second on a busy machine); the answers are the typer command's, word for word: created, unchanged, a spec's errors
at their paths (exit 2), a name in use (exit 1). Without a control plane the typer command stores the objects,
as it always did.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import Runtime, generic_job

LAUNCHER = "from phalanx.entrypoints.cli.launcher import main; main()"


def phalanx(runtime: Runtime, *args: str) -> subprocess.CompletedProcess[str]:
    """The console script with ``-X importtime``: stderr lists every module the process imported."""
    env = {**os.environ, "PHALANX_HOME": str(runtime.state_dir), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-c", LAUNCHER, *args],
        cwd=runtime.work_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def imported(result: subprocess.CompletedProcess[str], module: str) -> bool:
    return any(line.rsplit("|", 1)[-1].strip() == module for line in result.stderr.splitlines())


def said(result: subprocess.CompletedProcess[str]) -> str:
    """stderr without the import-time lines."""
    return "\n".join(line for line in result.stderr.splitlines() if not line.startswith("import time:"))


def write(path: Path, document: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


def test_a_submit_goes_to_the_running_control_plane_without_importing_the_models(runtime: Runtime) -> None:
    job = write(runtime.work_dir / "job.yaml", generic_job("quick"))
    queue = write(runtime.work_dir / "queue.yaml", {"kind": "Queue", "metadata": {"name": "qa"}, "spec": {}})
    bad = generic_job("broken")
    bad["spec"]["type"] = "genric"
    bad["spec"]["replicas"]["worker"]["count"] = 0
    broken = write(runtime.work_dir / "broken.yaml", bad)

    without = phalanx(runtime, "submit", str(queue))  # no control plane: the typer command, as always
    assert without.returncode == 0, said(without)
    assert without.stdout.splitlines()[0] == "queue/qa created"
    assert imported(without, "pydantic")

    runtime.start_control_plane()
    fast = phalanx(runtime, "submit", "-f", str(job))
    assert fast.returncode == 0, said(fast)
    assert fast.stdout.strip() == "trainingjob/quick created"
    assert not imported(fast, "pydantic"), "the fast path imported the models"
    assert phalanx(runtime, "submit", str(queue)).stdout.strip() == "queue/qa unchanged"
    taken = phalanx(runtime, "submit", str(job))
    assert taken.returncode == 1 and "error: job default/quick already exists" in said(taken), said(taken)
    refused = phalanx(runtime, "submit", str(broken))
    assert refused.returncode == 2, said(refused)
    assert said(refused).splitlines() == [
        f"error: {broken}: invalid spec, nothing was created:",
        "  spec.replicas.worker.count: must be >= 1, got 0",
        "  spec.type: unknown job type 'genric'; did you mean 'generic'?",
    ]
    with runtime.client() as client:
        assert [job.metadata.name for job in client.list()] == ["quick"]
