"""hack/k8s-testenv's command line: every option of every command says what it is for."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

import k8s_testenv


@pytest.mark.parametrize("command", ["add-nodes", "start"])
def test_every_option_has_a_description(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        k8s_testenv.main([command, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    options = text.split("options:", 1)[1]
    # argparse prints an option without help as its flags alone on a line; with help, text follows on the line or
    # the next, indented further.
    lines = [line for line in options.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        stripped = line.strip()
        if not stripped.startswith("--") or stripped.startswith("-h"):
            continue
        flags_only = "  " not in stripped
        next_is_help = index + 1 < len(lines) and not lines[index + 1].strip().startswith("-")
        assert not flags_only or next_is_help, f"{command}: {stripped!r} has no description"


def test_add_nodes_help_gives_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        k8s_testenv.main(["add-nodes", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 2)" in text
    assert "(default: gpu-node-)" in text
    assert "(default: 8)" in text
