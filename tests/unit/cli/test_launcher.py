"""The fast `phalanx run` parser accepts exactly what the typer `run` command accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.main

from phalanx.entrypoints.cli import launcher
from phalanx.entrypoints.cli.backends import KUBERNETES_OPTIONS
from phalanx.entrypoints.cli.main import app


def typer_options(verb: str) -> set[str]:
    """Every option name the typer command ``verb`` takes."""
    command = typer.main.get_command(app)
    names: set[str] = set()
    for param in command.commands[verb].params:  # type: ignore[attr-defined]
        names.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("-"))
    return names


def test_both_parsers_know_the_same_run_options() -> None:
    # The backend options are typer's alone: with any of them the launcher declines (an unknown option), and
    # typer's `run` takes the kubernetes path.
    assert typer_options("run") - set(KUBERNETES_OPTIONS) - set(launcher.TYPER_RUN_OPTIONS) == set(launcher.RUN_OPTIONS)


@pytest.mark.parametrize("argv", [["--stand-in", "img=./play.py"], ["--stand-in=img=./play.py"]])
def test_a_stand_in_is_left_to_typer(argv: list[str]) -> None:
    with pytest.raises(launcher._DeclinedError):
        launcher.parse_run(["run", "job.yaml", *argv])


@pytest.mark.parametrize("option", ["--backend=kubernetes", "--context=prod", "--kubeconfig=k.yaml"])
def test_a_backend_option_is_left_to_typer(option: str) -> None:
    with pytest.raises(launcher._DeclinedError):
        launcher.parse_run(["run", "job.yaml", option])


def test_a_full_run_invocation_is_parsed_like_typer_would() -> None:
    args = launcher.parse_run(
        ["run", "job.yaml", "-n", "team-a", "--no-logs", "-d", "--state-dir", "s", "--inventory", "inv.yaml"]
    )
    assert args.file == Path("job.yaml")
    assert (args.namespace, args.logs, args.detach) == ("team-a", False, True)
    assert (Path(args.state_dir), args.inventory) == (Path("s"), Path("inv.yaml"))


def test_defaults_match_the_typer_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHALANX_HOME", raising=False)
    args = launcher.parse_run(["run", "job.yaml"])
    assert (args.namespace, args.logs, args.detach, args.state_dir, args.inventory) == (
        "default",
        True,
        False,
        None,
        None,
    )


def test_the_state_directory_comes_from_the_environment_like_typer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHALANX_HOME", "from-env")
    assert launcher.parse_run(["run", "job.yaml"]).state_dir == Path("from-env")


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--help"],
        ["run"],
        ["run", "a.yaml", "b.yaml"],
        ["run", "job.yaml", "--bogus"],
        ["get", "jobs"],
        [],
    ],
    ids=["help", "no-file", "two-files", "unknown-option", "other-command", "nothing"],
)
def test_anything_else_is_left_to_typer(argv: list[str]) -> None:
    with pytest.raises(launcher._DeclinedError):
        launcher.parse_run(argv)


def test_phalanx_backend_kubernetes_in_the_environment_leaves_run_to_typer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHALANX_BACKEND", "kubernetes")
    with pytest.raises(launcher._DeclinedError):
        launcher.parse_run(["run", "job.yaml"])
    monkeypatch.setenv("PHALANX_BACKEND", "embedded")
    assert launcher.parse_run(["run", "job.yaml"]).file.name == "job.yaml"


def test_both_parsers_know_the_same_submit_options() -> None:
    kept = set(KUBERNETES_OPTIONS) | set(launcher.TYPER_SUBMIT_OPTIONS)
    assert typer_options("submit") - kept == set(launcher.SUBMIT_OPTIONS)


def test_a_submit_is_parsed_like_typer_would(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHALANX_HOME", raising=False)
    args = launcher.parse_submit(["submit", "-f", "jobs.yaml", "-n", "team-a", "--state-dir", "s"])
    assert (args.file, args.namespace, Path(args.state_dir)) == (Path("jobs.yaml"), "team-a", Path("s"))
    plain = launcher.parse_submit(["submit", "jobs.yaml"])
    assert (plain.file, plain.namespace, plain.state_dir) == (Path("jobs.yaml"), None, None)


@pytest.mark.parametrize(
    "argv",
    [
        ["submit", "jobs.yaml", "--dry-run"],
        ["submit", "jobs.yaml", "--stand-in", "img=./play.py"],
        ["submit", "jobs.yaml", "--context=prod"],
        ["submit", "--help"],
        ["submit"],
        ["submit", "-f", "a.yaml", "b.yaml"],
        ["submit", "a.yaml", "--bogus"],
    ],
    ids=["dry-run", "stand-in", "backend", "help", "no-file", "file-twice", "unknown-option"],
)
def test_a_submit_typer_must_see_is_left_to_it(argv: list[str]) -> None:
    with pytest.raises(launcher._DeclinedError):
        launcher.parse_submit(argv)
