"""Hostile spec files through the real CLI: one ``error:`` sentence, exit code 2, no traceback, nothing stored."""

from __future__ import annotations

import codecs

import pytest
import yaml

from conftest import Runtime, generic_job

pytestmark = pytest.mark.timeout(120)

BOMB = "\n".join(
    ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 9) + "]" for n in range(1, 9)]
)


@pytest.mark.parametrize(
    ("content", "sentence"),
    [
        pytest.param(
            BOMB.encode(),
            "{path}: document 1 takes the file past 100,000 values once its aliases are expanded (at line 6); "
            "at most 100,000 are allowed",
            id="alias-bomb",
        ),
        pytest.param(
            ("[" * 10_000 + "]" * 10_000).encode(),
            "{path}: document 1 nests lists and mappings more than 100 deep (at line 1); "
            "at most 100 levels are allowed",
            id="deep",
        ),
        pytest.param(
            "metadata: {name: café}\n".encode("latin-1"),
            "{path} is not UTF-8 text (byte 0xe9 at offset 20); save it as UTF-8",
            id="latin-1",
        ),
    ],
)
def test_submit_dry_run_of_a_hostile_file_is_one_sentence_and_exit_2(
    runtime: Runtime, content: bytes, sentence: str
) -> None:
    path = runtime.work_dir / "hostile.yaml"
    path.write_bytes(content)

    result = runtime.cli("submit", "--dry-run", str(path), timeout=60)

    assert result.returncode == 2, result.stderr
    assert result.stderr == f"error: {sentence.format(path=path)}\n"
    assert result.stdout == ""


def test_a_duplicate_key_is_named_and_nothing_is_created(runtime: Runtime) -> None:
    document = yaml.safe_dump(generic_job("twice"), sort_keys=False)
    path = runtime.work_dir / "twice.yaml"
    path.write_text(document + "spec: {type: generic}\n")
    line = document.count("\n") + 1

    result = runtime.cli("submit", str(path))

    assert result.returncode == 2, result.stderr
    first = document.splitlines().index("spec:") + 1
    assert f"spec: key given twice, at lines {first} and {line}; keep one of them" in result.stderr
    assert "Traceback" not in result.stderr
    with runtime.client() as client:
        assert client.list() == []


def test_a_utf16_file_with_a_bom_is_submitted(runtime: Runtime) -> None:
    path = runtime.work_dir / "utf16.yaml"
    path.write_bytes(codecs.BOM_UTF16_LE + yaml.safe_dump(generic_job("wide")).encode("utf-16-le"))

    result = runtime.cli("submit", str(path))

    assert result.returncode == 0, result.stderr
    with runtime.client() as client:
        assert [job.metadata.name for job in client.list()] == ["wide"]


def test_run_of_an_alias_bomb_is_refused_by_a_running_control_plane_which_keeps_working(runtime: Runtime) -> None:
    # `run` hands the file's text to the control plane, which parses it: each level once cost it 10x more CPU.
    plane = runtime.start_control_plane()
    path = runtime.work_dir / "bomb.yaml"
    path.write_text(BOMB + "\nkind: TrainingJob\n")

    result = runtime.cli("run", str(path), "--no-logs", timeout=60)

    assert result.returncode == 2, result.stderr
    assert result.stderr.endswith(
        f"error: {path}: document 1 takes the file past 100,000 values once its aliases are expanded (at line 6); "
        "at most 100,000 are allowed\n"
    )
    assert plane.process.poll() is None
    good = runtime.write_job("after", generic_job("after"))
    assert runtime.cli("run", str(good), "--no-logs", timeout=60).returncode == 0
