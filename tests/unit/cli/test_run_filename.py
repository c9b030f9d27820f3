"""`phalanx run` takes its file as the argument or, kubectl-style, as `-f/--filename` (as `phalanx submit` does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from phalanx.entrypoints.cli import jobs
from phalanx.entrypoints.cli.main import app


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files `run` would have run (the control plane is not started)."""
    seen: list[Path] = []

    def fake_run_job(file: Path, **_: Any) -> int:
        seen.append(file)
        return 0

    monkeypatch.setattr(jobs, "run_job", fake_run_job)
    return seen


@pytest.mark.parametrize("argv", [["run", "job.yaml"], ["run", "-f", "job.yaml"], ["run", "--filename", "job.yaml"]])
def test_the_file_is_taken_either_way(argv: list[str], started: list[Path], tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [*argv, "--state-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert started == [Path("job.yaml")]


@pytest.mark.parametrize("argv", [["run"], ["run", "a.yaml", "-f", "b.yaml"]])
def test_no_file_or_two_files_is_refused_naming_both_forms(argv: list[str], started: list[Path]) -> None:
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2
    assert "give the file once: `phalanx run FILE` or `phalanx run -f FILE`" in result.output
    assert started == []
