"""The launcher's side of the preloaded command process: which verbs are handed over, to which state directory,
and what the request carries (``preload_client``), and the preloaded server's code signature (``preload``)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from phalanx.entrypoints.cli import preload_client
from phalanx.entrypoints.cli.preload import code_signature
from phalanx.entrypoints.cli.preload_client import HANDED_OVER, forward, request_of, state_dir_of, verb_of


@pytest.mark.parametrize(
    ("argv", "verb"),
    [
        (["get", "jobs"], "get"),
        (["--server", "http://h:1", "get", "jobs"], "get"),
        (["--server=http://h:1", "--token-file", "t", "logs", "x"], "logs"),
        (["--help"], None),
        ([], None),
        (["--server"], None),
    ],
)
def test_the_verb_comes_after_the_groups_own_options(argv: list[str], verb: str | None) -> None:
    assert verb_of(argv) == verb


def test_starting_and_stopping_verbs_are_not_handed_over() -> None:
    # They start or stop the very processes that would run them.
    assert not {"up", "down", "server", "install", "sim"} & HANDED_OVER
    assert {"run", "submit", "get", "describe", "logs"} <= HANDED_OVER


def test_the_state_directory_is_the_last_one_named_else_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHALANX_HOME", str(tmp_path / "home"))
    assert state_dir_of(["get", "jobs"]) == tmp_path / "home"
    assert state_dir_of(["get", "jobs", "--state-dir", "a", "--state-dir=b"]) == Path("b")
    assert state_dir_of(["run", "--state-dir", "~/s"]) == Path("~/s").expanduser()
    # After `--`, arguments are the command's own, not options.
    assert state_dir_of(["run", "f.yaml", "--", "--state-dir", "x"]) == tmp_path / "home"


def test_the_request_carries_what_the_command_runs_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PHALANX_TEST_MARK", "here")
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    old_mask = os.umask(0o027)
    try:
        request = request_of(["get", "jobs"])
    finally:
        os.umask(old_mask)
        signal.signal(signal.SIGINT, previous)
    assert request["argv"] == ["get", "jobs"]
    assert request["cwd"] == str(tmp_path)
    assert request["env"]["PHALANX_TEST_MARK"] == "here"
    assert request["umask"] == 0o027
    assert request["ignored_signals"] == [int(signal.SIGINT)]  # a background job's ignored Ctrl-C stays ignored
    assert Path(request["package"], "__init__.py").is_file()


def test_no_preloaded_process_leaves_the_command_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHALANX_HOME", str(tmp_path))
    assert forward(["get", "jobs"]) is None  # no socket
    (tmp_path / "cli.sock").write_text("")  # a file that is not a listening socket
    assert forward(["get", "jobs"]) is None
    monkeypatch.setenv(preload_client.PRELOAD_ENV, "0")
    assert forward(["get", "jobs"]) is None


def test_the_code_signature_changes_with_an_edit_or_a_new_file(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("A = 1\n")
    (package / "sub" / "b.py").write_text("B = 1\n")
    (package / "__pycache__").mkdir()
    first = code_signature(package)
    assert first[0] == 2
    (package / "__pycache__" / "a.cpython.pyc").write_bytes(b"")  # compiled files are not the code
    assert code_signature(package) == first
    os.utime(package / "sub" / "b.py", ns=(first[1] + 10**9, first[1] + 10**9))
    assert code_signature(package) != first
    second = code_signature(package)
    (package / "c.py").write_text("")
    os.utime(package / "c.py", ns=(0, 0))  # older than the rest: the count still tells
    assert code_signature(package)[0] == 3 and code_signature(package) != second
