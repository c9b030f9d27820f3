"""Claims the docs make that the code can check: counts, tables and messages that went stale once already."""

from __future__ import annotations

import pkgutil
import re
import tomllib
from pathlib import Path

import pytest

import phalanx.adapters.kubernetes as kubernetes_adapter
from phalanx.adapters.kubernetes.crds import KINDS
from phalanx.core.lifecycle.transitions import TRANSITIONS
from phalanx.model.errors import SpecError
from phalanx.model.jobs import Phase
from phalanx.model.loading import parse_jobtype
from phalanx.model.validation import validate_job

DOCS = Path(__file__).resolve().parents[2] / "docs"
NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def rows(text: str, header: str) -> list[list[str]]:
    """The cells of the markdown table whose header row starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    found = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        found.append([cell.strip() for cell in line.strip("|").split("|")])
    return found


def test_kubernetes_md_counts_and_tabulates_every_crd() -> None:
    text = (DOCS / "kubernetes.md").read_text()
    spelled = NUMBERS[len(KINDS)]
    assert f"print only the {spelled} CRDs" in text and f"All {spelled} are in group `phalanx.dev`" in text
    stale = {NUMBERS[n] for n in NUMBERS if n != len(KINDS)}
    assert not [word for word in stale if re.search(rf"\b{word} CRDs\b", text, re.IGNORECASE)]
    (installed,) = [row for row in rows(text, "| object | name | why |") if row[0] == "CustomResourceDefinition"]
    assert installed[1] == ", ".join(f"`{kind.name}`" for kind in KINDS)

    expected = []
    for kind in KINDS:
        shown = ", ".join(column.name for column in kind.columns if not column.priority)
        wide = ", ".join(column.name for column in kind.columns if column.priority)
        short = ", ".join(f"`{name}`" for name in kind.short_names)
        status = "yes" if kind.has_status else "no"
        expected.append((kind.kind, kind.scope, short, status, f"{shown} ({wide})" if wide else shown))
    table = rows(text, "| kind | scope | short name |")
    # The status cell may explain itself after its yes or no: "no (a JobType has no status)".
    assert [
        (kind, scope, short, status.split()[0], columns) for kind, scope, short, status, columns in table
    ] == expected


def test_jobs_md_lifecycle_lists_every_phase_and_draws_exactly_the_transition_table() -> None:
    text = (DOCS / "jobs.md").read_text()
    assert sorted(row[0].strip("`") for row in rows(text, "| phase | meaning |")) == sorted(
        phase.value for phase in Phase
    )
    diagram = text[text.index("stateDiagram-v2") : text.index("```", text.index("stateDiagram-v2"))]
    edges = {
        (Phase(source), Phase(target))
        for source, target in re.findall(r"^\s+(\w+) --> (\w+)", diagram, re.MULTILINE)
        if source != "[*]" and target != "[*]"
    }
    assert edges == {(source, target) for source, targets in TRANSITIONS.items() for target in targets}
    assert "not built yet" not in text.split("## The lifecycle")[1].split("## ")[0]


def test_jobtypes_md_shows_what_submitting_a_job_with_too_few_replicas_for_host_says() -> None:
    pair = parse_jobtype(
        {
            "kind": "JobType",
            "metadata": {"name": "pair"},
            "spec": {"roles": {"server": {}, "client": {}}, "env": {"BACKUP": "{{ host(server, 1) }}"}},
        }
    )
    job = {
        "metadata": {"name": "p"},
        "spec": {"type": "pair", "replicas": {"server": {"template": {"command": ["s"]}}}},
    }
    with pytest.raises(SpecError) as refused:
        validate_job(job, {"pair": pair})
    text = (DOCS / "jobtypes.md").read_text()
    (error,) = refused.value.errors
    assert f"\n  {error}\n" in text
    assert "stops the control plane" not in text


def test_the_kubernetes_adapter_docstring_names_each_of_its_modules_and_crds() -> None:
    docstring = kubernetes_adapter.__doc__ or ""
    modules = {module.name for module in pkgutil.iter_modules(kubernetes_adapter.__path__)}
    assert {name for name in modules if f"``{name}``" not in docstring} == set()
    assert [kind.kind for kind in KINDS if kind.kind not in docstring] == []


def test_architecture_md_draws_paths_that_exist_and_the_contracts_the_project_keeps() -> None:
    text = (DOCS / "architecture.md").read_text()
    layout = text[text.index("```\nsrc/phalanx/\n") + 4 :]
    layout = layout[: layout.index("```")]
    source = Path(__file__).resolve().parents[2] / "src" / "phalanx"
    drawn, missing, parent = [], [], source
    for line in layout.splitlines()[1:]:
        found = re.match(r"^( {2}| {4})((?:\w+(?:/|\.py)(?:, )?)+)(?: |$)", line)
        if found is None:
            continue
        names = found.group(2).split(", ")
        base = source if found.group(1) == "  " else parent
        for name in names:
            drawn.append(base / name)
            if not (base / name).exists():
                missing.append(str((base / name).relative_to(source)))
        if found.group(1) == "  ":
            parent = source / names[0]
    assert len(drawn) > 25 and missing == []

    project = tomllib.loads((source.parents[1] / "pyproject.toml").read_text())
    configured = [contract["name"] for contract in project["tool"]["importlinter"]["contracts"]]
    listed = re.findall(r"^(.+) KEPT$", text, re.MULTILINE)
    assert sorted(listed) == sorted(configured)
    assert f"{NUMBERS[len(configured)].capitalize()} import-linter contracts" in text
    assert f"Contracts: {len(configured)} kept, 0 broken." in text


@pytest.mark.parametrize("page", ["security.md", "reliability.md"])
def test_every_test_a_promise_cites_exists(page: str) -> None:
    """security.md and reliability.md back each promise with a test: a renamed or deleted test must not leave it
    unbacked. A bare file name in a cell continues the path of the cell's first test."""
    text = (DOCS / page).read_text(encoding="utf-8")
    cited = re.findall(r"`((?:tests|benchmarks)/[\w/.]+\.py)`", text)
    assert len(cited) >= 6
    assert [path for path in cited if not (DOCS.parent / path).exists()] == []
    for row in (line for line in text.splitlines() if line.startswith("|") and "`tests/" in line):
        first = re.search(r"`(tests/[\w/]+/)[\w.]+\.py`", row)
        assert first is not None
        for name in re.findall(r"`(test_[\w]+\.py)`", row):
            assert (DOCS.parent / first.group(1) / name).exists(), (page, name)
