"""The CLI-level property: no traceback ever reaches a user; every failure is ``error:`` lines and a documented code.

In-process through typer's ``CliRunner`` for speed (each case in a forked child, so a bomb is a finding and not
a hung gate): ``submit --dry-run`` and ``submit`` of generated documents and of a sample of the hostile corpus,
then the read verbs on the same state directory (a row that slipped through must not break them), and odd
arguments (``-n`` values, job names). The exit codes are those of ``entrypoints/cli/main.py``'s docstring.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from fuzz.corpus import Case, cases
from fuzz.isolation import isolated
from fuzz.profiles import FUZZ, SCALE
from fuzz.strategies import bad_names, documents_of_any_kind, names
from phalanx.entrypoints.cli.main import app

DOCUMENTED_EXIT_CODES = {0, 1, 2, 3}
SECONDS_PER_CASE = 20.0
GENERATED_FILES = 40 * SCALE
ODD_ARGUMENTS = 25 * SCALE


@contextmanager
def _environment(state_dir: Path) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update({"PHALANX_HOME": str(state_dir), "COLUMNS": "200"})
    os.environ.pop("PHALANX_BACKEND", None)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def invoke_all(state_dir: Path, commands: list[list[str]]) -> list[tuple[list[str], int, str, str, str]]:
    """Run CLI commands in order: (args, exit code, stdout, stderr, escaped exception) for each."""
    runner = CliRunner()
    results = []
    with _environment(state_dir):
        for args in commands:
            result = runner.invoke(app, args, catch_exceptions=True)
            escaped = ""
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                escaped = f"{type(result.exception).__name__}: {str(result.exception)[:300]}"
            results.append((args, result.exit_code, result.stdout, result.stderr, escaped))
    return results


def check_answers(state_dir: Path, commands: list[list[str]]) -> list[tuple[list[str], int, str, str, str]]:
    """Run the commands in a forked child and assert every answer is clean; return the answers."""
    outcome = isolated(invoke_all, state_dir, commands, timeout=SECONDS_PER_CASE)
    assert outcome.kind == "returned", f"{commands[0]}: {outcome.kind}\n{outcome.error}"
    for args, code, stdout, stderr, escaped in outcome.value:
        shown = f"phalanx {' '.join(args)} -> {code}\nstdout: {stdout[-600:]}\nstderr: {stderr[-1500:]}"
        assert not escaped, f"an exception escaped the CLI ({escaped}): {shown}"
        assert "Traceback" not in stdout + stderr, f"a traceback reached the user: {shown}"
        assert code in DOCUMENTED_EXIT_CODES, f"undocumented exit code: {shown}"
        if code != 0:
            lines = [line for line in stderr.splitlines() if line.strip()]
            assert lines, f"a failure without a message: {shown}"
            assert lines[0].startswith("error: "), f"a failure that does not start with 'error: ': {shown}"
            strays = [line for line in lines if not line.startswith(("error: ", "warning: ", "  "))]
            assert not strays, f"lines that are neither error: nor its details: {strays[:3]}; {shown}"
    return outcome.value


def file_commands(path: Path, namespace: str | None) -> list[list[str]]:
    """Validate, submit, then read back: a row that slipped through must not break the read verbs."""
    # argv cannot carry a NUL byte: such a namespace never reaches the CLI from a shell.
    override = ["-n", namespace] if namespace is not None and "\x00" not in namespace else []
    return [
        ["submit", "--dry-run", *override, str(path)],
        ["submit", *override, str(path)],
        ["get", "jobs", "-A"],
    ]


def test_generated_files_and_namespaces_get_clean_answers(tmp_path_factory: pytest.TempPathFactory) -> None:
    @settings(FUZZ, max_examples=GENERATED_FILES)
    @given(document=documents_of_any_kind, namespace=st.one_of(st.none(), st.none(), names))
    def cli_property(document: object, namespace: str | None) -> None:
        root = tmp_path_factory.mktemp("cli")
        path = root / "spec.yaml"
        path.write_text(yaml.safe_dump(document, allow_unicode=True))
        check_answers(root / "state", file_commands(path, namespace))

    cli_property()


CORPUS_SAMPLE = cases()[::10]  # every kind of case; the whole corpus runs in scripts/hostile-corpus


@pytest.mark.parametrize("case", CORPUS_SAMPLE, ids=lambda case: case.name)
def test_a_hostile_file_gets_clean_answers(case: Case, tmp_path: Path) -> None:
    path = tmp_path / case.filename
    path.write_bytes(case.content)
    answers = check_answers(tmp_path / "state", file_commands(path, None)[:2])
    dry_run_code = answers[0][1]
    if case.verdict == "refuse":
        assert dry_run_code == 2, f"{case.name} must be refused (exit 2), got {dry_run_code}: {answers[0][2:4]}"
    elif case.verdict == "accept":
        assert dry_run_code == 0, f"{case.name} must be accepted, got {dry_run_code}: {answers[0][3]}"


def test_odd_names_and_namespaces_get_clean_answers(tmp_path_factory: pytest.TempPathFactory) -> None:
    @settings(FUZZ, max_examples=ODD_ARGUMENTS)
    @given(name=st.one_of(bad_names, names, st.text(max_size=30)), namespace=st.one_of(bad_names, names))
    def odd_arguments(name: str, namespace: str) -> None:
        root = tmp_path_factory.mktemp("args")
        commands = [
            ["get", "job", name, "-n", namespace],
            ["describe", "job", name, "-n", namespace],
            ["delete", "job", name, "-n", namespace],
            ["logs", name, "-n", namespace],
        ]
        check_answers(root / "state", [c for c in commands if not any("\x00" in arg for arg in c)])

    odd_arguments()
