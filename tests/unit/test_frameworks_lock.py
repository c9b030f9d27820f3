"""hack/frameworks.lock is the whole, exact closure of hack/frameworks.in and Phalanx's own dependencies.

The frameworks tier runs Phalanx's control plane from the environment built from the lock, so a dependency added
to pyproject.toml without relocking would fail there first; this says so in one line instead.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import frameworks_env

REPO = Path(__file__).resolve().parents[2]


def locked() -> dict[str, str]:
    pins = {}
    for line in frameworks_env.LOCK.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"hack/frameworks.lock: {line!r} is not pinned with =="
            pins[canonicalize_name(name)] = version.strip()
    return pins


def test_every_phalanx_dependency_is_locked_at_a_version_it_accepts() -> None:
    pins = locked()
    for text in frameworks_env.phalanx_dependencies():
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} (pyproject.toml) is not in hack/frameworks.lock: run --relock"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} does not satisfy {text}"


def test_every_top_level_pin_is_locked_exactly() -> None:
    pins = locked()
    for line in frameworks_env.REQUIREMENTS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            name = canonicalize_name(requirement.name)
            assert name in pins, f"{line} (hack/frameworks.in) is not in hack/frameworks.lock: run --relock"
            assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} does not satisfy {line}"


def test_an_edited_lock_gets_another_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHALANX_CACHE", str(tmp_path / "cache"))
    lock = tmp_path / "frameworks.lock"
    shutil.copy(frameworks_env.LOCK, lock)
    before = frameworks_env.env_dir(lock)
    assert before.parent == tmp_path / "cache" / "frameworks"
    lock.write_text(lock.read_text().replace("torch==", "torch==0.0.0+"))
    assert frameworks_env.env_dir(lock) != before
    assert not frameworks_env.is_built(lock)
