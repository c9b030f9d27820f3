"""Hypothesis strategies derived from the API models' JSON schemas, plus hostile mutations of their documents.

The walker reads ``model_json_schema(by_alias=True)`` of TrainingJob, JobType, Queue and Dataset, so a field
added to a model is fuzzed without a change here. A schema alone produces documents that validators refuse
almost always (a name is a plain ``string`` in the schema, a DNS-1123 label in the validator); ``HINTS`` biases
the few fields whose meaning the schema cannot carry towards values that pass, so that a useful share of the
documents is accepted and goes on to the core. Mutations then break a document the ways users and attackers do:
wrong types, huge and non-finite numbers, NUL bytes, odd unicode, empty and long strings, extra and missing fields.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from functools import cache
from typing import Any

from hypothesis import strategies as st

from fuzz.corpus import COMMON_BAD_NAMES
from phalanx.model.datasets import Dataset
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.queues import Queue
from phalanx.model.validation import allowed_fields

MODELS: dict[str, type[Any]] = {"TrainingJob": TrainingJob, "JobType": JobType, "Queue": Queue, "Dataset": Dataset}
BUILTIN_TYPES = ("generic", "pytorch", "tensorflow", "mpi", "jax", "xgboost")
# Fields Phalanx writes itself; the walker leaves them out (a mutation may still add them).
SKIPPED = {"status", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp"}

Json = Any
Strategy = st.SearchStrategy[Json]

# -- values that validators accept, and values that break them ---------------------------------------------------

# Built from text, not from_regex: regex strategies cost several times more per draw, and the tier draws a lot.
dns_labels: Strategy = st.one_of(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12).map(
        lambda s: f"a{s.strip('-')}" if s.strip("-") else "a"
    ),
    st.sampled_from(["a", "job", "worker", "x-1", "default", "team-a", "z" * 63]),
)
bad_names: Strategy = st.sampled_from([*COMMON_BAD_NAMES, "0" * 63])
names: Strategy = st.one_of(dns_labels, dns_labels, dns_labels, bad_names)

HUGE_NUMBERS = [
    10**30,
    -(10**30),
    2**63,
    2**63 - 1,
    -(2**63),
    2**64,
    10**20,
    1e20,
    1e308,
    -1e308,
    1_000_000_000_000,
    315_360_001,
    4097,
    1025,
]
NON_FINITE = [math.inf, -math.inf, math.nan]
huge_numbers: Strategy = st.sampled_from(HUGE_NUMBERS)
non_finite: Strategy = st.sampled_from(NON_FINITE)
odd_text: Strategy = st.one_of(
    st.sampled_from(
        [
            "",
            "\x00",
            "a\x00b",
            "\x00" * 3,
            "\ud7ff\ufeff",
            "\u202e\u200b",
            "x" * 10_000,
            "{{ rnak }}",
            "{{ host(nope, 9) }}",
            "..",
            ".",
            "/",
            "../../etc/passwd",
            "999999999999999999999999999999",
            ".inf",
            "nan",
            "1e400",
            "-1",
            "0",
            "500m",
            "1Pi",
            "1Ei",
        ]
    ),
    st.text(max_size=20),
)
quantities: Strategy = st.one_of(
    st.integers(min_value=1, max_value=64),
    st.sampled_from([0.5, 1.5, "100m", "250m", "1", "2", "500m"]),
)
memories: Strategy = st.sampled_from(["64Mi", "128Mi", "1Gi", "2Gi", 1048576, "512M", "1.5Gi"])
commands: Strategy = st.one_of(
    st.just(["true"]),
    st.just(["python", "-c", "pass"]),
    st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3),
)
env_maps: Strategy = st.dictionaries(
    st.text(alphabet="ABCXYZ_019", min_size=1, max_size=8).map(lambda s: f"V{s}"), st.text(max_size=12), max_size=3
)


def _replicas() -> Strategy:
    role = st.one_of(st.sampled_from(["worker", "master", "ps", "chief", "evaluator", "launcher"]), names)
    replica = st.fixed_dictionaries(
        {
            "template": st.fixed_dictionaries(
                {"command": commands},
                optional={
                    "args": st.lists(st.text(max_size=8), max_size=3),
                    "env": env_maps,
                    "workingDir": st.sampled_from(["work", "/tmp", "a/b"]),
                    "size": st.sampled_from(["small", "medium", "large", "xlarge"]),
                    "resources": st.fixed_dictionaries(
                        {},
                        optional={
                            "cpu": quantities,
                            "memory": memories,
                            "gpu": st.integers(min_value=0, max_value=2),
                            "gpuMilli": st.integers(min_value=1, max_value=1000),
                        },
                    ),
                },
            ),
        },
        optional={"count": st.one_of(st.integers(min_value=1, max_value=4), st.integers())},
    )
    return st.dictionaries(role, replica, min_size=1, max_size=3)


#: Fields whose meaning the schema cannot carry: (parent property, property) -> strategy. A parent of "*"
#: matches any parent.
HINTS: dict[tuple[str, str], Callable[[], Strategy]] = {
    ("metadata", "name"): lambda: names,
    ("metadata", "namespace"): lambda: names,
    ("metadata", "labels"): lambda: st.dictionaries(dns_labels, dns_labels, max_size=2),
    ("metadata", "annotations"): lambda: st.dictionaries(dns_labels, st.text(max_size=10), max_size=2),
    ("spec", "type"): lambda: st.sampled_from(BUILTIN_TYPES),
    ("spec", "replicas"): _replicas,
    ("spec", "datasets"): lambda: st.just([]),
    ("template", "command"): lambda: commands,
    ("template", "env"): lambda: env_maps,
    ("*", "env"): lambda: env_maps,
    ("*", "cpu"): lambda: quantities,
    ("*", "memory"): lambda: memories,
    ("*", "gpuModel"): lambda: st.sampled_from(["A100", "T4", "V100M16|V100M32", "H100 | A100"]),
    ("scheduling", "queue"): lambda: st.just("default"),
    ("scheduling", "priorityClass"): lambda: st.sampled_from(["low", "normal", "high", "critical"]),
    ("outputs", "path"): lambda: st.sampled_from(["outputs", "out/model", "results"]),
    ("outputs", "storeTo"): lambda: st.none(),
    ("runPolicy", "activeDeadlineSeconds"): lambda: st.integers(min_value=1, max_value=315_360_000),
    ("runPolicy", "ttlSecondsAfterFinished"): lambda: st.integers(min_value=0, max_value=315_360_000),
    ("spec", "roles"): lambda: st.dictionaries(
        st.one_of(dns_labels, names),
        st.fixed_dictionaries({}, optional={"defaultCount": st.integers(1, 3), "env": env_maps}),
        min_size=1,
        max_size=3,
    ),
    ("spec", "rankRoles"): lambda: st.none(),
    ("spec", "successRoles"): lambda: st.just([]),
    ("spec", "serviceRoles"): lambda: st.just([]),
    ("spec", "hostfileRoles"): lambda: st.just([]),
    ("spec", "cohort"): lambda: st.one_of(st.none(), dns_labels),
    ("spec", "borrowingLimit"): lambda: st.none(),
    ("spec", "namespaces"): lambda: st.lists(names, max_size=2),
    ("spec", "source"): lambda: st.one_of(
        st.fixed_dictionaries({"path": st.sampled_from(["data", "/data/mnist", "a/b.csv"])}),
        st.fixed_dictionaries({"url": st.sampled_from(["https://example.invalid/d.csv", "s3://bucket/prefix/"])}),
        st.fixed_dictionaries({"script": st.fixed_dictionaries({"command": commands})}),
        st.fixed_dictionaries({"fromJob": st.fixed_dictionaries({"job": dns_labels})}),
        st.fixed_dictionaries(
            {"sql": st.fixed_dictionaries({"url": st.just("sqlite:///data.db"), "query": st.just("select 1")})}
        ),
    ),
}


class SchemaWalker:
    """Turns a pydantic JSON schema into a hypothesis strategy, following ``$ref``s into ``$defs``."""

    def __init__(self, schema: dict[str, Json]) -> None:
        self.defs = schema.get("$defs", {})
        self.root = schema

    def strategy(self) -> Strategy:
        return self._node(self.root, parent="", name="")

    def _resolve(self, node: dict[str, Json]) -> dict[str, Json]:
        while "$ref" in node:
            node = {**self.defs[node["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in node.items() if k != "$ref"}}
        return node

    def _node(self, node: dict[str, Json], *, parent: str, name: str) -> Strategy:
        hint = HINTS.get((parent, name)) or HINTS.get(("*", name)) or HINTS.get((parent, "*"))
        if hint is not None:
            return hint()
        node = self._resolve(node)
        if "enum" in node:
            return st.sampled_from(node["enum"])
        if "const" in node:
            return st.just(node["const"])
        if "anyOf" in node or "oneOf" in node:
            options = [o for o in node.get("anyOf", node.get("oneOf")) if o.get("type") != "null"]
            return st.one_of(*[self._node(o, parent=parent, name=name) for o in options])
        kind = node.get("type")
        if kind == "object":
            return self._object(node, name=name)
        if kind == "array":
            items = self._node(node.get("items", {}), parent=name, name="[]")
            return st.lists(items, min_size=node.get("minItems", 0), max_size=3)
        if kind == "string":
            if "pattern" in node:
                return st.from_regex(node["pattern"], fullmatch=True)
            return st.text(min_size=node.get("minLength", 0), max_size=12)
        if kind == "integer":
            low = node["exclusiveMinimum"] + 1 if "exclusiveMinimum" in node else node.get("minimum", -(2**31))
            return st.integers(min_value=low, max_value=node.get("maximum", 2**31))
        if kind == "number":
            return st.floats(
                min_value=node.get("minimum", node.get("exclusiveMinimum")),
                max_value=node.get("maximum"),
                exclude_min="exclusiveMinimum" in node,
                allow_nan=False,
                allow_infinity=False,
            )
        if kind == "boolean":
            return st.booleans()
        return st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5))

    def _object(self, node: dict[str, Json], *, name: str) -> Strategy:
        properties = {k: v for k, v in node.get("properties", {}).items() if k not in SKIPPED}
        if properties:
            required = {
                k: self._node(v, parent=name, name=k) for k, v in properties.items() if k in node.get("required", [])
            }
            optional = {k: self._node(v, parent=name, name=k) for k, v in properties.items() if k not in required}
            return st.fixed_dictionaries(required, optional=optional)
        values = node.get("additionalProperties")
        if isinstance(values, dict):
            return st.dictionaries(dns_labels, self._node(values, parent=name, name="*"), max_size=3)
        return st.dictionaries(dns_labels, st.text(max_size=5), max_size=2)


@cache
def model_documents(kind: str) -> Strategy:
    """Documents of one kind, derived from its model's JSON schema (apiVersion and kind set)."""
    schema = MODELS[kind].model_json_schema(by_alias=True)
    return SchemaWalker(schema).strategy().map(lambda doc: {**doc, "apiVersion": "phalanx.dev/v1alpha1", "kind": kind})


# -- mutations ------------------------------------------------------------------------------------------------


def paths_of(doc: Json, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path inside ``doc`` (keys and list indices), the root excluded."""
    found: list[tuple[Any, ...]] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            found.append((*prefix, key))
            found.extend(paths_of(value, (*prefix, key)))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found.append((*prefix, index))
            found.extend(paths_of(value, (*prefix, index)))
    return found


def _container(doc: Json, path: tuple[Any, ...]) -> Json:
    for part in path[:-1]:
        doc = doc[part]
    return doc


replacements: Strategy = st.one_of(
    huge_numbers,
    non_finite,
    odd_text,
    bad_names,
    st.sampled_from([None, True, False, 0, -1, [], {}, [1], {"a": 1}, 1.5, "abc"]),
)
extra_keys: Strategy = st.sampled_from(["bogus", "replica", "backofLimit", "valueFrom", "\x00", "", "spec", "x" * 300])


@st.composite
def mutated(draw: st.DrawFn, documents: Strategy, max_mutations: int = 3) -> Json:
    """A document from ``documents`` with 0..max_mutations hostile changes (replace, drop, add a field)."""
    doc = copy.deepcopy(draw(documents))
    for _ in range(draw(st.integers(min_value=0, max_value=max_mutations))):
        paths = paths_of(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        container = _container(doc, path)
        action = draw(st.sampled_from(["replace", "replace", "replace", "drop", "add"]))
        if action == "replace":
            container[path[-1]] = copy.deepcopy(draw(replacements))  # sampled values are shared objects
        elif action == "drop" and isinstance(container, dict):
            del container[path[-1]]
        elif action == "add" and isinstance(container[path[-1]], dict):
            container[path[-1]][draw(extra_keys)] = copy.deepcopy(draw(replacements))
    return doc


#: The dangerous values of issue 13, each at the place it hurt: (path inside a TrainingJob's replica role, value).
BOUNDARIES: list[tuple[tuple[str, ...], Json]] = [
    *(
        (("template", "resources", "cpu"), v)
        for v in ("999999999999999999999999999999", 10**30, math.inf, "1000001", 1_000_000)
    ),
    *((("template", "resources", "memory"), v) for v in ("1Ei", 2**50 + 1, 2**50, math.inf, "9999999999Pi")),
    *((("template", "resources", "gpu"), v) for v in (1024, 1025, 2**63)),
    *((("count",), v) for v in (4096, 4097, 2**63)),
    *((("template", "command"), v) for v in ([""], ["true\x00"], ["a", "b\x00"], [])),
    *((("template", "args"), v) for v in (["\x00"], ["x" * 200_000])),
    *((("template", "workingDir"), v) for v in ("a\x00b", "", "/")),
    *((("template", "env"), v) for v in ({"A": "\x00"}, [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}])),
]
SPEC_BOUNDARIES: list[tuple[tuple[str, ...], Json]] = [
    *((("runPolicy", "activeDeadlineSeconds"), v) for v in (10**12, 315_360_000, 315_360_001, 2**63, 1e20)),
    *((("runPolicy", "ttlSecondsAfterFinished"), v) for v in (1e20, 10**20, 315_360_000, 0)),
    (("outputs", "path"), "."),
    (("outputs", "path"), ""),
    (("outputs", "path"), "a\x00"),
    (("scheduling", "minAvailable"), 2**63),
    (("scheduling", "priority"), math.nan),
]


@st.composite
def boundary_jobs(draw: st.DrawFn) -> Json:
    """A generated TrainingJob with one dangerous value of issue 13 at the place it hurt."""
    doc = copy.deepcopy(draw(model_documents("TrainingJob")))
    spec = doc["spec"]
    if draw(st.booleans()):
        path, value = draw(st.sampled_from(SPEC_BOUNDARIES))
        target = spec
    else:
        path, value = draw(st.sampled_from(BOUNDARIES))
        target = spec["replicas"][draw(st.sampled_from(sorted(spec["replicas"])))]
    for part in path[:-1]:
        target = target.setdefault(part, {})
    target[path[-1]] = copy.deepcopy(value)
    return doc


documents_of_any_kind: Strategy = st.one_of(
    boundary_jobs(),
    mutated(model_documents("TrainingJob")),
    mutated(model_documents("TrainingJob")),
    mutated(model_documents("JobType")),
    mutated(model_documents("Queue")),
    mutated(model_documents("Dataset")),
)


def path_is_grounded(document: Json, path: str) -> bool:
    """Whether an error ``path`` names a place of ``document``: as far as it goes in the document, then fields.

    ``spec.replicas.worker.count`` is grounded when the document holds it, or holds ``spec.replicas.worker``
    and ``count`` is a field the model allows there (a missing field's error names the field, absent by
    definition). The root (``""``) always is. Keys may hold dots (a role named ``a.b``): each step tries the
    longest key that fits.
    """
    if path == "":
        return True
    model = MODELS.get(str(document.get("kind", "TrainingJob"))) if isinstance(document, dict) else None
    return _grounded(document, path, [], model)


def _grounded(node: Json, rest: str, loc: list[Any], model: type[Any] | None) -> bool:
    if rest == "":
        return True
    if rest.startswith("["):
        end = rest.find("]")
        index = rest[1:end]
        if end < 0 or not index.isdigit() or not isinstance(node, list) or int(index) >= len(node):
            return False
        return _grounded(node[int(index)], rest[end + 1 :].removeprefix("."), [*loc, int(index)], model)
    if isinstance(node, dict):
        for key in sorted((str(k) for k in node), key=len, reverse=True):
            if rest == key or rest.startswith((key + ".", key + "[")):
                value = next(v for k, v in node.items() if str(k) == key)
                if _grounded(value, rest[len(key) :].removeprefix("."), [*loc, key], model):
                    return True
    # What the document does not hold must be fields the model allows there.
    if model is None or "[" in rest:
        return False
    for part in rest.split("."):
        if part not in allowed_fields(model, _model_loc(loc)) and not _is_mapping_of_roles(model, _model_loc(loc)):
            return False
        loc = [*loc, part]
    return True


def _model_loc(loc: list[Any]) -> list[Any]:
    """The model's location for a document's: Kubernetes' list form of env (``env[i].valueFrom...``) is kept in
    the model's ``envValueFrom`` mapping, by the variable's name."""
    for at in range(len(loc) - 2):
        if loc[at] == "env" and isinstance(loc[at + 1], int) and loc[at + 2] == "valueFrom":
            return [*loc[:at], "envValueFrom", "name", *loc[at + 3 :]]
    return loc


def _is_mapping_of_roles(model: type[Any], loc: list[Any]) -> bool:
    # Under a mapping (replicas, roles, env) any key is a place: "spec.replicas.master" names a missing role.
    return bool(loc) and loc[-1] in ("replicas", "roles", "env") and not allowed_fields(model, loc)
