"""docs/frameworks.md shows the tested programs: every code block that names an example file is that file."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "frameworks.md"
EXAMPLES = REPO / "examples" / "frameworks"
# A fenced block whose first line is a comment naming an example file: `# examples/frameworks/<name>/<file>`.
BLOCK = re.compile(r"^```[a-z]*\n(# (examples/frameworks/\S+)\n.*?)^```$", re.MULTILINE | re.DOTALL)


def shown_files() -> dict[str, str]:
    return {path: body for body, path in BLOCK.findall(DOC.read_text())}


def test_every_example_block_in_the_doc_is_the_file_it_names() -> None:
    shown = shown_files()
    for path, body in shown.items():
        file = REPO / path
        assert file.is_file(), f"docs/frameworks.md shows {path}, which does not exist"
        assert body == file.read_text(), f"docs/frameworks.md shows {path} differently from the file"


def test_every_example_file_is_shown_in_the_doc() -> None:
    files = sorted(
        str(p.relative_to(REPO)) for p in EXAMPLES.rglob("*") if p.is_file() and p.suffix in {".py", ".yaml", ".sh"}
    )
    assert files, "examples/frameworks holds no example"
    missing = [f for f in files if f not in shown_files()]
    assert not missing, f"docs/frameworks.md does not show {missing}"


def test_every_example_file_starts_with_a_comment_naming_itself() -> None:
    for path in EXAMPLES.rglob("*"):
        if path.is_file() and path.suffix in {".py", ".yaml", ".sh"}:
            first = path.read_text().splitlines()[0]
            assert first == f"# {path.relative_to(REPO)}", f"{path.name}: the first line must be '# <its path>'"
