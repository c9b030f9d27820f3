"""What the repository holds speaks of the project only: no state databases a run left behind, and no text naming
a path of the machine a test or benchmark ran on (a pytest or tempfile folder, a cache under a home directory).

One commit once held the SQLite files of a benchmark's server, in a folder named after a Python object's repr.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MACHINE_PATH = re.compile(r"/tmp/pytest-of-|/tmp/tmp[a-z0-9_]{8}/|/root/\.cache/")
STATE_FILE = re.compile(r"\.db(-shm|-wal)?$")


def tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.fail("git ls-files failed: the hygiene check runs on a git checkout of the repository")
    return [ROOT / name for name in listed.split("\0") if name]


def test_no_state_database_is_tracked() -> None:
    found = [str(path.relative_to(ROOT)) for path in tracked_files() if STATE_FILE.search(path.name)]
    assert found == [], f"state databases are tracked (git rm them): {found[:10]}"


def test_no_tracked_text_names_a_path_of_the_machine_it_ran_on() -> None:
    found: list[str] = []
    for path in tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # images, and files deleted in the working tree but not yet from the index
        for number, line in enumerate(text.splitlines(), 1):
            if MACHINE_PATH.search(line) and path != Path(__file__).resolve():
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert found == [], "\n".join(found[:20])
