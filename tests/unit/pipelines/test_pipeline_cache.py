"""Step cache keys: stable over what does not matter, different over what does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.unit.pipelines.builders import job_spec

from phalanx.core.pipelines.cache import (
    ArtifactDigests,
    ComponentDigester,
    cache_key,
    canonical_json,
    document_digest,
    step_definition_digest,
    tree_digest,
)
from phalanx.model.pipelines import Step, parse_pipeline

names = st.text(min_size=1, max_size=8)
values = st.dictionaries(names, st.text(max_size=12), max_size=5)
digests = st.dictionaries(names, st.text("0123456789abcdef", min_size=64, max_size=64), max_size=3)


@given(values, digests)
def test_the_key_does_not_depend_on_mapping_order(vals: dict[str, str], arts: dict[str, str]) -> None:
    forward = cache_key(component_digest="c", values=vals, artifact_digests=arts)
    backward = cache_key(
        component_digest="c", values=dict(reversed(vals.items())), artifact_digests=dict(reversed(arts.items()))
    )
    assert forward == backward and len(forward) == 64


@given(values, st.text(min_size=1, max_size=8), st.text(max_size=8))
def test_any_changed_value_changes_the_key(vals: dict[str, str], name: str, value: str) -> None:
    changed = {**vals, name: value}
    if changed == vals:
        return
    assert cache_key(component_digest="c", values=vals, artifact_digests={}) != cache_key(
        component_digest="c", values=changed, artifact_digests={}
    )


def test_component_values_and_artifacts_each_count_and_do_not_collide() -> None:
    base = cache_key(component_digest="c1", values={"a": "1"}, artifact_digests={})
    assert base != cache_key(component_digest="c2", values={"a": "1"}, artifact_digests={})
    # The same text as a value or as an artifact digest is not the same input.
    assert base != cache_key(component_digest="c1", values={}, artifact_digests={"a": "1"})


def test_the_key_is_pinned() -> None:
    # A change of the canonical form must be a deliberate version bump (old entries stop matching).
    key = cache_key(component_digest="abc", values={"lr": "0.1"}, artifact_digests={"data": "d" * 64}, namespace="ml")
    assert key == document_digest(
        {
            "version": "phalanx.dev/step-cache/v2",
            "namespace": "ml",
            "component": "abc",
            "values": {"lr": "0.1"},
            "artifacts": {"data": "d" * 64},
        }
    )
    assert canonical_json({"b": 1, "a": [1.5, "é"]}) == '{"a":[1.5,"é"],"b":1}'


def test_two_namespaces_never_share_a_key() -> None:
    """A tenant must not get another's outputs from the cache by running a step with the same inputs."""
    same = {"component_digest": "abc", "values": {"lr": "0.1"}, "artifact_digests": {}}
    assert cache_key(**same, namespace="team-a") != cache_key(**same, namespace="team-b")  # type: ignore[arg-type]
    assert cache_key(**same, namespace="team-a") == cache_key(**same, namespace="team-a")  # type: ignore[arg-type]


def test_nan_is_refused_rather_than_hashed() -> None:
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


@given(
    st.lists(
        st.tuples(st.text(max_size=6), st.text("0123456789abcdef", min_size=4, max_size=4)),
        unique_by=lambda entry: entry[0],
        max_size=6,
    ),
    st.randoms(),
)
def test_a_tree_digest_ignores_listing_order(files: list[tuple[str, str]], rnd) -> None:  # type: ignore[no-untyped-def]
    shuffled = list(files)
    rnd.shuffle(shuffled)
    assert tree_digest(files) == tree_digest(shuffled)


def test_a_tree_digest_sees_names_and_contents() -> None:
    tree = tree_digest([("a", "1"), ("b", "2")])
    assert tree != tree_digest([("a", "2"), ("b", "1")])
    assert tree != tree_digest([("a", "1"), ("c", "2")])


def _step(**fields: object) -> Step:
    raw = {
        "metadata": {"name": "p"},
        "spec": {"steps": [{"name": "t", "trainingJob": {"spec": job_spec("x")}, **fields}]},
    }
    return parse_pipeline(raw).spec.steps[0]


def test_a_job_step_digest_counts_what_it_computes_not_when_it_runs() -> None:
    base = step_definition_digest(_step())
    assert base == step_definition_digest(_step(retries=3, cache=False, after=[]))
    assert base != step_definition_digest(_step(outputs=[{"name": "model"}]))


def test_a_component_step_digest_comes_from_the_protocol() -> None:
    raw = {"metadata": {"name": "p"}, "spec": {"steps": [{"name": "c", "component": {"path": "c.yaml"}}]}}
    step = parse_pipeline(raw).spec.steps[0]
    with pytest.raises(ValueError, match="ComponentDigester"):
        step_definition_digest(step)

    class Fixed:
        def component_digest(self, step: Step) -> str:
            return "f" * 64

        def artifact_digest(self, location: str) -> str | None:
            return None

    digester: ComponentDigester = Fixed()
    artifacts: ArtifactDigests = Fixed()
    assert digester.component_digest(step) == "f" * 64 and artifacts.artifact_digest("x") is None
