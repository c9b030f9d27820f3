"""The README's Python snippet, extracted from README.md, run as a user would: after the quickstart, in a fresh
state directory, through the real SDK and control plane."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, Runtime
from phalanx import JobExistsError
from phalanx.services.embedded.daemon import stop_control_plane
from phalanx.services.embedded.layout import StateLayout


def readme_sdk_snippet() -> str:
    """The README's ```python block that uses ``Client``."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    (snippet,) = [block for block in blocks if "Client(" in block]
    return snippet


def test_the_readme_sdk_snippet_runs_after_the_quickstart(runtime: Runtime) -> None:
    shutil.copytree(REPO / "examples", runtime.work_dir / "examples")
    try:
        quickstart = runtime.cli("run", "examples/quickstart.yaml", "--no-logs", timeout=180)
        assert quickstart.returncode == 0, quickstart.stdout + quickstart.stderr

        snippet = subprocess.run(
            [sys.executable, "-c", readme_sdk_snippet()],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=runtime.work_dir,
            env={**os.environ, "PHALANX_HOME": str(runtime.state_dir)},
        )
        assert snippet.returncode == 0, snippet.stdout + snippet.stderr
        assert snippet.stdout.startswith("Succeeded {'accuracy': "), snippet.stdout

        # Without replace_finished, the taken name is one clear exception that says what to do.
        with runtime.client() as client, pytest.raises(JobExistsError) as refused:
            client.submit(runtime.work_dir / "examples" / "quickstart.yaml")
    finally:
        stop_control_plane(StateLayout(runtime.state_dir))
    assert str(refused.value) == (
        "job default/quickstart already exists (it is Succeeded); replace it (`phalanx run` does; "
        "submit(..., replace_finished=True) in Python), delete it (`phalanx delete job quickstart`; "
        "client.delete('quickstart') in Python), or choose another metadata.name"
    )
