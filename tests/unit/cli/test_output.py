"""Plain output for pipes: the same text rich shows, without importing rich on `phalanx run`'s path."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from rich.console import Console
from rich.markup import escape as rich_escape
from rich.markup import render

from phalanx.entrypoints.cli import output
from phalanx.entrypoints.cli.output import PlainConsole, escape, strip_markup

SAMPLES = [
    "",
    "plain text",
    "[dim]   0.01s[/]  [yellow]Queued      [/] waiting for quota and room",
    "[bold red]error:[/] job.yaml: invalid spec",
    "[cyan]  worker-0[/] | loss=[0.31] step [12/100]",
    "a \\[literal] bracket and a \\\\[dim]backslash[/]",
    "[bold]not closed, and [ stray brackets ]",
    "ends in a backslash \\",
    "[link=https://example.com]x[/link] [#ff0000]red[/] [@click]meta[/]",
    "escaped \\[ outside a tag, and \\\\\\[dim] an odd run",
]


@pytest.mark.parametrize("markup", SAMPLES)
def test_stripping_markup_gives_the_text_rich_shows(markup: str) -> None:
    assert strip_markup(markup) == render(markup, emoji=False).plain


@pytest.mark.parametrize("text", [*SAMPLES, "[x]", "\\", "a\\[b", "[[dim]]"])
def test_escaping_matches_rich_and_round_trips(text: str) -> None:
    assert escape(text) == rich_escape(text)
    assert strip_markup(escape(text)) == render(escape(text), emoji=False).plain


def test_a_plain_console_writes_lines_to_the_current_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    swapped = io.StringIO()
    monkeypatch.setattr(sys, "stdout", swapped)
    console = PlainConsole()

    console.print("[dim]control plane running[/]", highlight=False)
    console.print("job", "[green]Succeeded[/]")

    assert swapped.getvalue() == "control plane running\njob Succeeded\n"
    assert not console.is_terminal


def test_pipes_get_a_plain_console_and_terminals_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert isinstance(output.writer(), PlainConsole)

    monkeypatch.setenv("FORCE_COLOR", "1")  # as rich itself: colours even into a pipe
    assert isinstance(output.writer(), Console)
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    assert isinstance(output.writer(), PlainConsole)


def test_errors_go_to_stderr_as_plain_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)

    with pytest.raises(output.Failure) as failed:
        output.spec_errors("job.yaml", [("spec.replicas[0]", "must be >= 1")])

    assert failed.value.code == 2
    assert err.getvalue().splitlines() == [
        "error: job.yaml: invalid spec, nothing was created:",
        "  spec.replicas[0]: must be >= 1",
    ]


def test_a_problem_with_the_whole_file_is_one_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    sentence = "job.yaml is not UTF-8 text (byte 0xe9 at offset 20); save it as UTF-8"

    with pytest.raises(output.Failure) as failed:
        output.spec_errors("job.yaml", [("", sentence)])

    assert failed.value.code == 2
    assert err.getvalue() == f"error: {sentence}\n"


def test_the_run_fast_path_imports_no_rich_http_client_or_model() -> None:
    code = (
        "import sys\n"
        "import phalanx.entrypoints.cli.launcher, phalanx.entrypoints.cli.running\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    heavy = {"rich", "http.client", "email", "typer", "pydantic", "yaml", "phalanx.model", "phalanx.adapters"}
    assert sorted(m for m in loaded if m in heavy or m.split(".")[0] in heavy) == []


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param("job default/job\n not found", "job default/job\\n not found", id="newline-in-a-name"),
        pytest.param("invalid spec:\n  a: b\n  c: d", "invalid spec:\n  a: b\n  c: d", id="indented-lines-kept"),
        pytest.param("x\x00y\x1bz", "x\\x00y\\x1bz", id="control-characters"),
        pytest.param("tab\tstays", "tab\tstays", id="tab"),
    ],
)
def test_a_message_cannot_be_split_by_what_it_quotes(text: str, shown: str) -> None:
    from phalanx.entrypoints.cli.output import one_line

    assert one_line(text) == shown


def test_the_phases_run_stops_following_at_are_the_models_stopped_ones() -> None:
    from phalanx.entrypoints.cli.styles import STOP_FOLLOWING
    from phalanx.model.jobs import STOPPED_PHASES

    assert {str(phase) for phase in STOPPED_PHASES} == STOP_FOLLOWING
