"""Every `phalanx ... --help`: each option says what it does, in words that fit the command it is on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer

from phalanx.entrypoints.cli.main import app


# Typed loosely: typer's command objects are click's, or its own copy of them, depending on the version.
def commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """Every command of the CLI with its full name (``dataset get``), groups included."""
    yield " ".join(path), group
    for name, command in getattr(group, "commands", {}).items():
        yield from commands(command, (*path, name))


def options_of(command: Any) -> Iterator[Any]:
    for param in command.params:
        if param.param_type_name == "option" and "--help" not in param.opts:
            yield param


def test_the_walk_sees_the_nested_commands() -> None:
    names = {name for name, _ in commands(typer.main.get_command(app))}
    assert {"get", "up", "sim run", "dataset get", "cache ls"} <= names


def test_every_option_of_every_command_has_a_help_text() -> None:
    missing = [
        f"phalanx {name} {'/'.join(option.opts)}"
        for name, command in commands(typer.main.get_command(app))
        for option in options_of(command)
        if not (option.help or "").strip()
    ]
    assert missing == []


def test_namespace_help_does_not_call_every_object_a_job() -> None:
    """`-n` of `dataset create` or `cache ls` selects no job; its help must not say it does."""
    cli = typer.main.get_command(app)
    wrong = [
        f"phalanx {name}: {option.help}"
        for name, command in commands(cli)
        if name.split(" ")[0] in {"dataset", "cache"}
        for option in options_of(command)
        if "--namespace" in option.opts and "job" in (option.help or "")
    ]
    assert wrong == []
