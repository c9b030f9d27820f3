"""hack/frameworks_env.py against a real pip: a build that cannot install fails loudly and leaves nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import frameworks_env

pytestmark = pytest.mark.integration


def test_a_build_that_cannot_install_fails_with_pips_words_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHALANX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # no registry: what a machine without one sees
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    lock = tmp_path / "frameworks.lock"
    lock.write_text("phalanx-no-such-package==1.0\n")
    with pytest.raises(
        frameworks_env.FrameworksEnvError, match=re.escape("pip install -r hack/frameworks.lock failed")
    ):
        frameworks_env.build(lock=lock)
    assert not frameworks_env.env_dir(lock).exists()
    assert not frameworks_env.is_built(lock)
