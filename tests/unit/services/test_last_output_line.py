"""A failed replica's last line of output, read from the end of its log for the job's failure message."""

from __future__ import annotations

from pathlib import Path

from phalanx.model.replicas import LAST_OUTPUT_CHARS
from phalanx.services.embedded.node_runtime import LAST_OUTPUT_READ, last_output_line


def test_the_last_non_blank_line_is_read_from_the_end_of_a_long_log(tmp_path: Path) -> None:
    log = tmp_path / "replica.log"
    ending = "Traceback (most recent call last):\nValueError: bad lr\n\n  \n"
    log.write_text("step 1\n" * (LAST_OUTPUT_READ // 4) + ending)
    assert last_output_line(log) == "ValueError: bad lr"


def test_control_characters_are_blanked_and_a_long_line_is_cut(tmp_path: Path) -> None:
    log = tmp_path / "replica.log"
    log.write_bytes(b"\x1b[31merror\x00 here\x1b[0m\n")
    assert last_output_line(log) == " [31merror  here [0m"
    log.write_text("x" * (LAST_OUTPUT_CHARS * 2) + "\n")
    cut = last_output_line(log)
    assert len(cut) == LAST_OUTPUT_CHARS and cut.endswith("…")


def test_an_empty_or_missing_log_says_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_text("\n\n")
    assert last_output_line(empty) == ""
    assert last_output_line(tmp_path / "missing.log") == ""
