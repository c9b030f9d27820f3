"""Where the CLI writes, and how it fails: consoles, error messages and exit codes (no typer here).

``Failure`` carries an exit code; the launcher and the typer app both turn it into the process's exit.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

from rich.console import Console
from rich.markup import escape

# Pipes and CI logs get wide lines instead of rich's 80-column default, so tables and messages do not fold.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 160)


class Failure(SystemExit):
    """The command failed; the message is already printed and ``code`` is the exit code."""


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    err_console.print(f"[bold red]error:[/] {escape(message)}")
    raise Failure(code)


def spec_errors(source: str | None, errors: Sequence[tuple[str, str]]) -> NoReturn:
    """Print every field error of an invalid spec and exit 2."""
    where = f"{source}: " if source else ""
    err_console.print(f"[bold red]error:[/] {escape(where)}invalid spec, nothing was created:")
    for path, message in errors:
        err_console.print(f"  [yellow]{escape(path or '(document)')}[/]: {escape(message)}")
    raise Failure(2)
