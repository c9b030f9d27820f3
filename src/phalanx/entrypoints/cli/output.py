"""Where the CLI writes, and how it fails: consoles, error messages and exit codes (no typer here).

Messages are written in rich's console markup (``[dim]...[/]``). To a terminal they go through rich: colours,
the live status line of ``phalanx run``. To a pipe or a file, where rich would only remove the tags, a
``PlainConsole`` removes them itself and writes each line as it is: importing rich costs about 25 ms, a fair
share of what ``phalanx run`` adds to a job, and a log line is worth more unfolded than folded to a width.
Tables (the typer commands' ``console``) always go through rich.

``Failure`` carries an exit code; the launcher and the typer app both turn it into the process's exit.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TextIO

if TYPE_CHECKING:
    from rich.console import Console

    # The consoles for tables, made on first use by __getattr__ below (rich is imported then).
    console: Console
    err_console: Console

# Rich's markup grammar (rich.markup): a tag is "[" + a letter, "#", "/" or "@" + anything but "[" + "]",
# preceded by backslashes, an odd number of which escape it.
_TAG = re.compile(r"((\\*)\[([a-z#/@][^[]*?)])")
_ESCAPABLE = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


def escape(text: str) -> str:
    """Escape ``text`` so that no part of it is read as markup; the same result as ``rich.markup.escape``."""
    text = _ESCAPABLE.sub(lambda match: f"{match[1]}{match[1]}\\{match[2]}", text)
    if text.endswith("\\") and not text.endswith("\\\\"):
        return text + "\\"
    return text


def strip_markup(markup: str) -> str:
    """The text rich shows for ``markup``, without its styles: tags dropped, escapes resolved."""
    if "[" not in markup:
        return markup
    parts: list[str] = []
    position = 0
    for match in _TAG.finditer(markup):
        whole, backslashes = match[1], match[2]
        # Like rich, an escaped bracket outside any tag loses its backslash too.
        parts.append(markup[position : match.start()].replace("\\[", "["))
        position = match.end()
        literal, escaped = divmod(len(backslashes), 2)
        parts.append("\\" * literal)
        if escaped:
            parts.append(whole[len(backslashes) :])
    parts.append(markup[position:].replace("\\[", "["))
    return "".join(parts)


class Writer(Protocol):
    """What the CLI prints through: a rich ``Console`` or a ``PlainConsole``."""

    @property
    def is_terminal(self) -> bool:
        """Whether the output is a terminal (rich then draws a live status line)."""
        ...

    def print(self, *objects: Any, highlight: bool | None = None) -> None:
        """Print markup, one line."""
        ...


class PlainConsole:
    """Writes markup as plain text, one flushed line per call, to the process's current stdout or stderr.

    The stream is looked up at every call, as rich does, so a test that swaps ``sys.stdout`` sees the output.
    """

    is_terminal = False

    def __init__(self, *, stderr: bool = False) -> None:
        self.stderr = stderr

    @property
    def file(self) -> TextIO:
        """The stream written to."""
        return sys.stderr if self.stderr else sys.stdout

    def print(self, *objects: Any, highlight: bool | None = None) -> None:
        """Print ``objects`` (markup strings), separated by spaces, as one line."""
        del highlight  # there are no colours to highlight with
        stream = self.file
        stream.write(" ".join(strip_markup(str(item)) for item in objects) + "\n")
        # Flushed per line, as rich does: a follower's lines must reach a pipe while the job runs.
        stream.flush()


def wants_terminal(stream: TextIO) -> bool:
    """Whether rich would treat ``stream`` as a terminal: its ``TTY_COMPATIBLE`` and ``FORCE_COLOR``, or isatty."""
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "1"
    force_colour = os.environ.get("FORCE_COLOR")
    if force_colour is not None:
        return force_colour != ""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _rich_console(stderr: bool) -> Console:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Pipes and CI logs get wide lines instead of rich's 80-column default, so tables do not fold.
    return Console(stderr=stderr, highlight=False, width=None if stream.isatty() else 160)


_consoles: dict[bool, Console] = {}


def rich_console(*, stderr: bool = False) -> Console:
    """The rich console of stdout (or stderr), made once."""
    if stderr not in _consoles:
        _consoles[stderr] = _rich_console(stderr)
    return _consoles[stderr]


def writer(*, stderr: bool = False) -> Writer:
    """Where messages go: rich's console to a terminal, a ``PlainConsole`` elsewhere (rich is not imported)."""
    if wants_terminal(sys.stderr if stderr else sys.stdout):
        return rich_console(stderr=stderr)
    return PlainConsole(stderr=stderr)


def __getattr__(name: str) -> Any:
    # ``console`` and ``err_console``, the rich consoles of the typer commands, cost rich's import: made on use.
    if name in ("console", "err_console"):
        return rich_console(stderr=name == "err_console")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Failure(SystemExit):
    """The command failed; the message is already printed and ``code`` is the exit code."""


# The exit code of a command that met a state store it cannot use for now (locked by another process, or its
# disk is full): nothing was done, and the same command may succeed later.
STORE_UNAVAILABLE_EXIT = 4


def mask_url(text: str) -> str:
    """``model.masking.mask_url``, imported on first use: the fast path of `phalanx run` loads no model code."""
    from phalanx.model.masking import mask_url as masked

    return masked(text)


# Control characters, and a newline that does not start an indented continuation line (a message's own lines,
# such as a spec error's list of problems, are indented; a newline inside a name or value is not).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]|\n(?!  )")


def one_line(text: str) -> str:
    r"""``text`` with control characters shown escaped (``\n``), so a name or value cannot split a message.

    Every line printed then starts with ``error:``, ``warning:`` or an indent, as scripts that read stderr expect.
    """
    return _CONTROL.sub(lambda match: repr(match.group())[1:-1], text)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``; URL passwords in it are masked."""
    writer(stderr=True).print(f"[bold red]error:[/] {escape(one_line(mask_url(message)))}")
    raise Failure(code)


def warn(message: str) -> None:
    """Print ``warning: message`` on stderr; URL passwords in it are masked."""
    writer(stderr=True).print(f"[bold yellow]warning:[/] {escape(one_line(mask_url(message)))}")


def print_submitted(items: Sequence[Any]) -> None:
    """One line per submitted object (``trainingjob/NAME created``), then its warnings (``operations.Submitted``)."""
    out = writer()
    for item in items:
        out.print(f"{escape(str(item.kind).lower())}/{escape(str(item.name))} {item.verb}")
        for warning in getattr(item, "warnings", ()):
            warn(warning)


def print_replica_logs(
    logs: Sequence[tuple[str, str, bool]], *, prefix: bool | None = None, job: str = "", phase: str = ""
) -> None:
    """`phalanx logs` on either backend: each (replica, log text, ended) in order.

    The lines go to stdout, prefixed with the replica's name when ``prefix`` (default: when there are several
    replicas). A replica that printed
    nothing gets a note on stderr (``note: worker-1 printed nothing``, or ``has printed nothing yet`` while it
    has not ended) instead of vanishing from the output, where it would read as a replica that does not exist;
    stdout stays the replicas' own output, for a script that reads it. A ``job`` none of whose replicas has a
    log yet (Queued) gets a note saying so, in its ``phase``, rather than no output at all.
    """
    if not logs and job:
        writer(stderr=True).print(
            f"[dim]note: no replica of job {escape(one_line(job))} has started yet (it is {phase})[/]"
        )
    prefix = len(logs) > 1 if prefix is None else prefix
    for replica, text, ended in logs:
        lines = text.splitlines()
        if not lines:
            sys.stdout.flush()  # the note lands between the replicas' lines it sits between
            said = "printed nothing" if ended else "has printed nothing yet"
            writer(stderr=True).print(f"[dim]note: {escape(one_line(replica))} {said}[/]")
        for line in lines:
            sys.stdout.write(f"{replica:>10} | {line}\n" if prefix else f"{line}\n")


@contextmanager
def operation_errors() -> Iterator[None]:
    """An invalid spec, a refused operation or a wait that timed out, raised inside: the message and exit code."""
    from phalanx.model.errors import SpecError
    from phalanx.services.operations import OperationError

    try:
        yield
    except SpecError as err:
        spec_errors(err.source, [(e.path, e.message) for e in err.errors])
    except (OperationError, TimeoutError) as err:
        fail(str(err))


def spec_errors(source: str | None, errors: Sequence[tuple[str, str]]) -> NoReturn:
    """Print every field error of an invalid spec and exit 2.

    A problem with the file as a whole (too large, not UTF-8, an alias bomb) is one error without a path whose
    sentence starts with the file's name: it is printed as that one ``error:`` line.
    """
    where = f"{source}: " if source else ""
    err = writer(stderr=True)
    if len(errors) == 1 and not errors[0][0] and errors[0][1].startswith(source or ""):
        fail(errors[0][1], 2)
    err.print(f"[bold red]error:[/] {escape(where)}invalid spec, nothing was created:")
    for path, message in errors:
        # A refused datasource URL is quoted in its message: never with its password.
        # One line per problem, whatever the path (a role name) or the message (a value it quotes) holds.
        shown_path, shown = (one_line(text) for text in (path or "(document)", mask_url(message)))
        err.print(f"  [yellow]{escape(shown_path)}[/]: {escape(shown)}")
    raise Failure(2)
