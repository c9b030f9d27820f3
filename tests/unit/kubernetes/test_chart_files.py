"""charts/phalanx is generated from the same models as deploy/ and committed; it must never drift from them.

What helm itself makes of the chart (its default render equals ``phalanx install --print``; it installs, upgrades
and uninstalls) is checked with the real helm in tests/e2e/test_helm_chart.py.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx.adapters.kubernetes.manifests import render_yaml
from phalanx.services.kubernetes import chart
from phalanx.services.kubernetes.install import deploy_files

CHART = Path(__file__).resolve().parents[3] / "charts" / "phalanx"
FIX = "charts/phalanx is stale: run scripts/generate-deploy and commit the result"


@functools.cache
def chart_files() -> dict[str, str]:
    """The generated chart, made once for the module (each make renders the install four ways; only read here)."""
    return chart.chart_files()


@pytest.mark.parametrize("relative", sorted(chart_files()))
def test_the_committed_chart_file_is_what_the_models_generate(relative: str) -> None:
    path = CHART / relative
    assert path.is_file(), f"{relative} is missing; {FIX}"
    assert path.read_text(encoding="utf-8") == chart_files()[relative], FIX


def test_no_generated_chart_file_is_left_over() -> None:
    committed = {
        path.relative_to(CHART).as_posix() for sub in ("crds", "templates") for path in (CHART / sub).iterdir()
    }
    assert committed == {name for name in chart_files() if name.startswith(("crds/", "templates/"))}, FIX


def test_the_charts_crds_are_the_installs() -> None:
    files = chart_files()
    for name, text in deploy_files().items():
        if name.startswith("crds/"):
            assert yaml.safe_load(files[name]) == yaml.safe_load(text)


def _lookup(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        assert isinstance(node, dict) and part in node, f".Values.{path} is not in values.yaml"
        node = node[part]
    return node


def test_every_value_a_template_reads_is_in_values_yaml_with_its_default() -> None:
    values = yaml.safe_load(chart.values_yaml())
    assert values == chart.default_values()
    used = {
        path
        for name, text in chart_files().items()
        if name.startswith("templates/")
        for path in re.findall(r"\.Values\.([A-Za-z0-9_.]+)", text)
    }
    assert {"image.repository", "healthPort", "nodeAgent.nodeSelector", "scheduler.config"} <= used
    for path in used:
        _lookup(values, path)


def _render(template: str, condition: str, holds: bool) -> str:
    """What helm's ``{{- if }}``/``{{- else }}``/``{{- end }}`` lines of ``_merge`` leave for one condition."""
    out, stack = [], [True]
    for line in template.splitlines():
        if line == f"{{{{- if {condition} }}}}":
            stack.append(stack[-1] and holds)
        elif line == "{{- else }}":
            stack[-1] = stack[-2] and not holds
        elif line == "{{- end }}":
            stack.pop()
        elif stack[-1]:
            out.append(line)
    assert stack == [True]
    return "".join(f"{line}\n" for line in out)


@pytest.mark.parametrize(
    ("then", "otherwise"),
    [
        ("a\nb\nc\n", "a\nc\n"),  # a run only one side has
        ("a\nx\nc\n", "a\ny\nc\n"),  # a run that differs
        ("a\nb\n", "a\nb\n"),  # no difference: no condition at all
        ("x\n", "y\nz\n"),
    ],
)
def test_merging_two_renders_gives_each_back_under_its_condition(then: str, otherwise: str) -> None:
    merged = chart._merge("c", then, otherwise)
    assert _render(merged, "c", True) == then
    assert _render(merged, "c", False) == otherwise
    assert ("{{- if" in merged) == (then != otherwise)


def test_a_token_left_where_no_template_can_replace_it_is_an_error() -> None:
    tokens = chart._Tokens()
    block = tokens.block(".Values.x")
    with pytest.raises(AssertionError, match="not where a template can replace it"):
        tokens.substitute(f"- {block}\n")  # a list item, not `key: TOKEN`


def test_docs_install_names_every_value() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "install.md").read_text()

    def paths(node: Any, prefix: str = "") -> list[str]:
        if isinstance(node, dict) and node and prefix.count(".") < 2:
            return [path for key, value in node.items() for path in paths(value, f"{prefix}{key}.")]
        return [prefix.rstrip(".")]

    missing = [path for path in paths(chart.default_values()) if f"`{path}`" not in docs]
    assert not missing, f"docs/install.md#values does not name {missing}"


def test_the_values_schema_closes_every_value_the_chart_reads() -> None:
    schema = chart.values_schema()

    def check(values: dict[str, Any], node: dict[str, Any], prefix: str) -> None:
        assert node["additionalProperties"] is False, f"{prefix or 'the values'}: a misspelt key would pass"
        assert set(node["properties"]) == set(values), prefix
        for key, value in values.items():
            if node["properties"][key].get("additionalProperties") is False:
                check(value, node["properties"][key], f"{prefix}{key}.")

    check(chart.default_values(), schema, "")
    assert schema["properties"]["healthPort"] == {"type": "integer", "minimum": 1, "maximum": 65535}


def _holds(test: str, values: dict[str, bool]) -> bool:
    """A test ``_merge_all`` writes (``X``, ``not X``, ``and A (not B)``, ``or (and ..) (and ..)``), evaluated."""
    test = test.strip()
    if test.startswith("(") and test.endswith(")"):
        return _holds(test[1:-1], values)
    if test.startswith("not "):
        return not _holds(test[4:], values)
    for word, combine in (("and ", all), ("or ", any)):
        if test.startswith(word):
            terms = re.findall(r"\([^()]*(?:\([^()]*\))*[^()]*\)|\S+", test[len(word) :])
            return combine(_holds(term, values) for term in terms)
    return values[test]


def _render_all(template: str, values: dict[str, bool]) -> str:
    """What helm leaves of a template of flat ``if``/``else``/``end`` blocks for these values."""
    out: list[str] = []
    state: tuple[bool, bool] | None = None  # (inside a block, its test held)
    for line in template.splitlines():
        opened = re.fullmatch(r"\{\{- if (.+) \}\}", line)
        if opened:
            assert state is None, "a block opens inside another"
            state = (True, _holds(opened.group(1), values))
        elif line == "{{- else }}":
            assert state is not None
            state = (True, not state[1])
        elif line == "{{- end }}":
            assert state is not None
            state = None
        elif state is None or state[1]:
            out.append(line)
    assert state is None
    return "".join(f"{line}\n" for line in out)


def test_the_operator_template_renders_each_combination_of_the_dataset_and_artifact_claims() -> None:
    files = chart_files()
    for datasets in (True, False):
        for artifacts in (True, False):
            tokens = chart._Tokens()
            objects = chart._templated(tokens, datasets=datasets, artifacts=artifacts, kubelet=False)
            operator = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "phalanx-operator"]
            expected = tokens.substitute(render_yaml(operator))
            values = {chart.DATASETS_CLAIM: datasets, chart.ARTIFACTS_CLAIM: artifacts, chart.KUBELET_CONFIG: False}
            rendered = _render_all(files["templates/operator.yaml"], values)
            assert "".join(f"{line}\n" for line in rendered.splitlines() if not line.startswith("#")) == expected
            assert ("/var/lib/phalanx/artifacts" in rendered) == artifacts


@pytest.mark.parametrize(
    ("renders", "tests"),
    [
        ({(True, True): "a\nb\n", (True, False): "a\n", (False, True): "a\nc\n", (False, False): "a\n"}, 2),
        ({(True, True): "x\n", (True, False): "y\n", (False, True): "z\n", (False, False): "w\n"}, 4),
    ],
)
def test_merging_four_renders_gives_each_back_with_flat_blocks(
    renders: dict[tuple[bool, bool], str], tests: int
) -> None:
    merged = chart._merge_all(("p", "q"), renders)
    for (p, q), text in renders.items():
        assert _render_all(merged, {"p": p, "q": q}) == text
    assert merged.count("{{- if") <= tests


def test_the_node_agent_template_renders_each_combination_with_the_kubelet_configuration() -> None:
    files = chart_files()
    for datasets in (True, False):
        for kubelet in (True, False):
            tokens = chart._Tokens()
            objects = chart._templated(tokens, datasets=datasets, artifacts=False, kubelet=kubelet)
            agents = [o for o in objects if o["kind"] == "DaemonSet"]
            expected = tokens.substitute(render_yaml(agents))
            values = {chart.DATASETS_CLAIM: datasets, chart.ARTIFACTS_CLAIM: False, chart.KUBELET_CONFIG: kubelet}
            rendered = _render_all(files["templates/node-agent.yaml"], values)
            assert "".join(f"{line}\n" for line in rendered.splitlines() if not line.startswith("#")) == expected
            assert ("--kubelet-config" in rendered) == kubelet


def test_a_condition_only_one_value_decides_is_tested_on_that_value_alone() -> None:
    combos = frozenset((a, b, c) for a in (True, False) for b in (True, False) for c in (True, False))
    held = frozenset(combo for combo in combos if combo[2])
    assert chart._condition(("p", "q", "r"), held, combos) == "r"
    either = frozenset(combo for combo in combos if combo[0] or combo[2])
    assert chart._condition(("p", "q", "r"), either, combos) == "or (and p r) (and p (not r)) (and (not p) r)"
