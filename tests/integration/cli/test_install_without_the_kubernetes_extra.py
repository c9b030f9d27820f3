"""`phalanx install --print` where the kubernetes extra is not installed: one error line naming it, no traceback.

Found by trying the install verb in a fresh clone with only the README's first command run: the manifests are
made with the Kubernetes adapter's types, whose module imports httpx, and the verb ended in a traceback. The test
runs the CLI in a process of its own where importing httpx fails, as it does without the extra.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

WITHOUT_HTTPX = (
    "import sys; sys.modules['httpx'] = None; sys.argv = ['phalanx', 'install', '--print']; "
    "from phalanx.entrypoints.cli.main import run_app; run_app()"
)


def test_install_without_the_extra_says_which_extra_to_install() -> None:
    result = subprocess.run([sys.executable, "-c", WITHOUT_HTTPX], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "phalanx install needs the kubernetes extra (httpx is not installed)" in result.stderr, result.stderr
    assert "pip install 'phalanx[kubernetes]'" in result.stderr
