"""``--stand-in IMAGE=PROGRAM``: a program file the system cannot start is refused before anything is created.

Found in a new-user trial: a stand-in written as a Python file without a ``#!`` line was accepted, and every
replica failed with "Exec format error" until the backoff limit ended the job.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from phalanx.entrypoints.cli.options import stand_in_map
from phalanx.entrypoints.cli.output import Failure

IMAGE = "example.org/mnist:1"


def refused(text: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(Failure):
        stand_in_map([text])
    return capsys.readouterr().err


def test_a_script_without_a_shebang_is_refused_with_the_interpreter_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "play.py").write_text("print('hi')\n")
    (tmp_path / "play.py").chmod(0o755)
    message = refused(f"{IMAGE}=./play.py", capsys)
    assert "has no #! line" in message
    assert f"--stand-in {IMAGE}='python3 {tmp_path / 'play.py'}'" in message  # absolute: replicas run elsewhere


def test_a_file_that_is_not_executable_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "play.sh").write_text("#!/bin/sh\necho hi\n")
    (tmp_path / "play.sh").chmod(0o644)
    assert "is not executable" in refused(f"{IMAGE}=./play.sh", capsys)


def test_a_script_with_a_shebang_or_an_interpreter_word_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "play.sh").write_text("#!/bin/sh\necho hi\n")
    (tmp_path / "play.sh").chmod(0o755)
    assert stand_in_map([f"{IMAGE}=./play.sh --quiet"]) == {IMAGE: [str(tmp_path / "play.sh"), "--quiet"]}
    assert stand_in_map([f"{IMAGE}=python3 ./play.py"]) == {IMAGE: ["python3", "./play.py"]}
    # a compiled program: the interpreter running these tests
    assert stand_in_map([f"{IMAGE}={Path(sys.executable).resolve()}"]) == {IMAGE: [str(Path(sys.executable).resolve())]}
