"""A hostile spec corpus: about 450 files of every kind of input issue 13 found dangerous, each with its verdict.

Each case is the bytes of one file and what must happen to it:

- ``refuse``: the agreed limits (docs/limits.md) say no; ``phalanx submit`` must exit 2 with ``error:`` lines;
- ``accept``: valid, at a limit's edge; it must be created (it may then wait, with a reason);
- ``any``: either answer is right (e.g. a UTF-16 file: decoded or refused), as long as it is one clean answer.

Every case must end in one clean answer: no traceback, no hang, no crash of the control plane. The fuzz tier
runs the YAML cases in-process (``test_yaml_hostile``) and samples the rest through the CLI; the whole corpus
goes through a real control plane with ``scripts/hostile-corpus``.

Run ``python tests/fuzz/corpus.py DIR`` to write the files and ``DIR/manifest.json`` (file name -> verdict).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REFUSE, ACCEPT, ANY = "refuse", "accept", "any"
NUL = "\x00"

# Names every door refuses; the fuzz strategies draw from them too (``strategies.bad_names``).
COMMON_BAD_NAMES = [
    "",
    "Team-A",
    "job\n",
    "job\r\n",
    "-job",
    "job-",
    "a" * 64,
    "x" * 300,
    "../../x",
    "a/b",
    "a.b",
    "Worker_X",
    f"job{NUL}",
    "jöb",
    "\u202ejob",
    " job",
    "job ",
    "\t",
    "%2e%2e",
]
BAD_NAMES = [*COMMON_BAD_NAMES, "ab\u200bc"]


@dataclass(frozen=True)
class Case:
    """One corpus file: its name (without extension), its bytes and its verdict."""

    name: str
    content: bytes
    verdict: str
    suffix: str = ".yaml"

    @property
    def filename(self) -> str:
        return f"{self.name}{self.suffix}"


def _yaml(*documents: Any) -> bytes:
    # JSON is YAML: every string, NUL bytes included, survives the round trip exactly.
    return "\n---\n".join(json.dumps(doc) for doc in documents).encode()


def job(name: str, **spec: Any) -> dict[str, Any]:
    """A valid one-replica generic TrainingJob; ``spec`` keys replace the defaults."""
    body: dict[str, Any] = {
        "replicas": {"worker": {"count": 1, "template": {"command": ["true"], "resources": {"cpu": "100m"}}}},
    }
    body.update(spec)
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name}, "spec": body}


def with_template(name: str, **template: Any) -> dict[str, Any]:
    """A valid job whose worker template gets ``template`` keys."""
    document = job(name)
    document["spec"]["replicas"]["worker"]["template"].update(template)
    return document


def with_resources(name: str, **resources: Any) -> dict[str, Any]:
    """A valid job whose worker asks for ``resources``."""
    return with_template(name, resources=resources)


def _names() -> Iterator[Case]:
    others: dict[str, Callable[[str], dict[str, Any]]] = {
        "jobtype": lambda n: {"kind": "JobType", "metadata": {"name": n}, "spec": {"roles": {"worker": {}}}},
        "queue": lambda n: {"kind": "Queue", "metadata": {"name": n}, "spec": {}},
        "dataset": lambda n: {"kind": "Dataset", "metadata": {"name": n}, "spec": {"source": {"path": "data"}}},
    }
    for i, bad in enumerate(BAD_NAMES):
        yield Case(f"name-job-{i:02d}", _yaml(job(bad)), REFUSE)
        namespaced = job(f"ns-{i}")
        namespaced["metadata"]["namespace"] = bad or " "
        yield Case(f"namespace-job-{i:02d}", _yaml(namespaced), REFUSE)
        for kind, make in others.items():
            yield Case(f"name-{kind}-{i:02d}", _yaml(make(bad)), REFUSE)
        role = job(f"role-{i}")
        role["spec"]["replicas"] = {bad: role["spec"]["replicas"]["worker"]}
        yield Case(f"role-job-{i:02d}", _yaml(role), REFUSE)
        typed = {
            "kind": "JobType",
            "metadata": {"name": f"type-{i}"},
            "spec": {"roles": {bad: {"template": {"command": ["true"]}}}},
        }
        yield Case(f"role-jobtype-{i:02d}", _yaml(typed), REFUSE)
        queue_namespaces = {"kind": "Queue", "metadata": {"name": f"qn-{i}"}, "spec": {"namespaces": [bad]}}
        yield Case(f"namespace-queue-{i:02d}", _yaml(queue_namespaces), REFUSE)
        cohort = {"kind": "Queue", "metadata": {"name": f"qc-{i}"}, "spec": {"cohort": bad}}
        yield Case(f"cohort-queue-{i:02d}", _yaml(cohort), REFUSE)
        from_job = {"kind": "Dataset", "metadata": {"name": f"fj-{i}"}, "spec": {"source": {"fromJob": {"job": bad}}}}
        yield Case(f"name-from-job-{i:02d}", _yaml(from_job), REFUSE)
        yield Case(f"name-mount-{i:02d}", _yaml(job(f"mount-{i}", datasets=[{"name": bad}])), REFUSE)
    yield Case("name-job-63", _yaml(job("a" * 63)), ACCEPT)


def _quantities() -> Iterator[Case]:
    refused: dict[str, list[Any]] = {
        "cpu": ["9" * 30, 10**30, ".inf", "-.inf", ".nan", 1_000_001, "1000000001m", "1e3", -1, 0, "0m", True],
        "memory": ["1Ei", 2**50 + 1, "1025Ti", ".inf", ".nan", "9" * 30, -1, 0, "1.5Xi"],
        "gpu": [1025, 2**63, 10**30, -1, ".inf", 1.5],
        "gpuMilli": [0, 1001, ".nan"],
    }
    for field, values in refused.items():
        for i, value in enumerate(values):
            text = _yaml(with_resources(f"q-{field.lower()}-{i}", **{field: "__VALUE__"}))
            # .inf and .nan are YAML spellings that JSON cannot carry: put them in as YAML scalars.
            literal = value if isinstance(value, str) and value.startswith(("-.", ".")) else json.dumps(value)
            yield Case(f"quantity-{field.lower()}-{i:02d}", text.replace(b'"__VALUE__"', literal.encode()), REFUSE)
    for i, value in enumerate(["9" * 30, ".inf", ".nan", 10**30, -1]):
        for field in ("cpu", "memory", "gpu"):
            queue = {"kind": "Queue", "metadata": {"name": f"qq-{field}-{i}"}, "spec": {"quota": {field: "__V__"}}}
            text = _yaml(queue).replace(b'"__V__"', str(value).encode())
            yield Case(f"quantity-queue-{field}-{i}", text, REFUSE)
    edges = {"cpu": [1_000_000, "1000000", "1m"], "memory": ["1Pi", 2**50, 1], "gpu": [1024, 0]}
    for field, values in edges.items():
        for i, value in enumerate(values):
            yield Case(f"quantity-edge-{field}-{i}", _yaml(with_resources(f"e-{field}-{i}", **{field: value})), ACCEPT)


def _durations() -> Iterator[Case]:
    for field in ("activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        short = field[:6].lower()
        for i, value in enumerate([10**12, 315_360_001, "1e20", 2**63, 10**30, ".inf", ".nan", -1, "1.5"]):
            literal = value if isinstance(value, str) else json.dumps(value)
            text = _yaml(job(f"d-{short}-{i}", runPolicy={field: "__VALUE__"}))
            yield Case(f"duration-{short}-{i:02d}", text.replace(b'"__VALUE__"', literal.encode()), REFUSE)
        yield Case(f"duration-{short}-edge", _yaml(job(f"d-{short}-edge", runPolicy={field: 315_360_000})), ACCEPT)
    for i, value in enumerate(["1e20", ".inf", ".nan", 10**30]):
        text = _yaml(job(f"d-backoff-{i}", runPolicy={"backoffSeconds": "__VALUE__"}))
        yield Case(f"duration-backoff-{i}", text.replace(b'"__VALUE__"', str(value).encode()), REFUSE)


def _counts() -> Iterator[Case]:
    worker = {"template": {"command": ["true"], "resources": {"cpu": "1m", "memory": "1Mi"}}}
    yield Case("count-4097", _yaml(job("c-4097", replicas={"worker": {**worker, "count": 4097}})), REFUSE)
    yield Case("count-2-63", _yaml(job("c-2-63", replicas={"worker": {**worker, "count": 2**63}})), REFUSE)
    yield Case("count-float", _yaml(job("c-float", replicas={"worker": {**worker, "count": 1.5}})), REFUSE)
    yield Case("count-zero", _yaml(job("c-zero", replicas={"worker": {**worker, "count": 0}})), REFUSE)
    yield Case("count-4096", _yaml(job("c-4096", replicas={"worker": {**worker, "count": 4096}})), ACCEPT)
    many = {f"r{i}": {**worker, "count": 4096} for i in range(100)}
    yield Case("count-100-roles-x-4096", _yaml(job("c-100x4096", replicas=many)), REFUSE)
    yield Case("count-33-roles", _yaml(job("c-33", replicas={f"r{i}": worker for i in range(33)})), REFUSE)
    yield Case("count-32-roles", _yaml(job("c-32", replicas={f"r{i}": worker for i in range(32)})), ACCEPT)
    two = {"a": {**worker, "count": 4096}, "b": {**worker, "count": 1}}
    yield Case("count-4097-in-two-roles", _yaml(job("c-two", replicas=two)), REFUSE)
    yield Case("count-env-1025", _yaml(with_template("c-env", env={f"V{i}": "x" for i in range(1025)})), REFUSE)
    yield Case("count-env-1024", _yaml(with_template("c-env-ok", env={f"V{i}": "x" for i in range(1024)})), ACCEPT)
    yield Case("count-value-128k", _yaml(with_template("c-val", env={"A": "x" * (128 * 1024 + 1)})), REFUSE)
    yield Case("count-args-4097", _yaml(with_template("c-args", args=["x"] * 4097)), REFUSE)
    yield Case("count-min-available-huge", _yaml(job("c-min", scheduling={"minAvailable": 2**63})), REFUSE)
    yield Case("count-priority-huge", _yaml(job("c-prio", scheduling={"priority": 10**30})), REFUSE)
    yield Case("count-backoff-limit-huge", _yaml(job("c-bl", runPolicy={"backoffLimit": 10**30})), REFUSE)


def _nul_bytes() -> Iterator[Case]:
    places: dict[str, dict[str, Any]] = {
        "command": with_template("n-command", command=[f"tr{NUL}ue"]),
        "args": with_template("n-args", args=[NUL]),
        "env-value": with_template("n-env-value", env={"A": f"x{NUL}y"}),
        "env-key": with_template("n-env-key", env={f"A{NUL}": "x"}),
        "working-dir": with_template("n-wd", workingDir=f"a{NUL}b"),
        "image": with_template("n-image", image=f"busybox{NUL}"),
        "label-value": {**job("n-label"), "metadata": {"name": "n-label", "labels": {"a": NUL}}},
        "label-key": {**job("n-label-key"), "metadata": {"name": "n-label-key", "labels": {NUL: "a"}}},
        "annotation": {**job("n-annot"), "metadata": {"name": "n-annot", "annotations": {"a": NUL}}},
        "outputs": job("n-outputs", outputs={"path": f"out{NUL}"}),
        "queue": job("n-queue", scheduling={"queue": f"q{NUL}"}),
        "gpu-model": with_resources("n-gpu-model", gpuModel=f"A100{NUL}"),
        "type": job("n-type", type=f"generic{NUL}"),
        "dataset-url": {
            "kind": "Dataset",
            "metadata": {"name": "n-url"},
            "spec": {"source": {"url": f"https://example.invalid/{NUL}"}},
        },
        "dataset-path": {"kind": "Dataset", "metadata": {"name": "n-path"}, "spec": {"source": {"path": f"d{NUL}"}}},
        "dataset-sql": {
            "kind": "Dataset",
            "metadata": {"name": "n-sql"},
            "spec": {"source": {"sql": {"url": "sqlite:///d.db", "query": f"select 1{NUL}"}}},
        },
        "dataset-script": {
            "kind": "Dataset",
            "metadata": {"name": "n-script"},
            "spec": {"source": {"script": {"command": [f"x{NUL}"]}}},
        },
        "jobtype-env": {
            "kind": "JobType",
            "metadata": {"name": "n-jobtype"},
            "spec": {"roles": {"worker": {}}, "env": {"A": f"{NUL}"}},
        },
        "jobtype-description": {
            "kind": "JobType",
            "metadata": {"name": "n-jobtype-d"},
            "spec": {"roles": {"worker": {}}, "description": NUL},
        },
    }
    for place, document in places.items():
        yield Case(f"nul-{place}", _yaml(document), REFUSE)


def _fields() -> Iterator[Case]:
    value_from = with_template("f-value-from")
    value_from["spec"]["replicas"]["worker"]["template"]["env"] = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    ]
    yield Case("field-env-value-from", _yaml(value_from), REFUSE)
    yield Case("field-outputs-dot", _yaml(job("f-out-dot", outputs={"path": "."})), REFUSE)
    yield Case("field-outputs-dot-slash", _yaml(job("f-out-dot2", outputs={"path": "./"})), REFUSE)
    yield Case("field-outputs-empty", _yaml(job("f-out-empty", outputs={"path": ""})), REFUSE)
    yield Case("field-outputs-parent", _yaml(job("f-out-up", outputs={"path": "../x"})), REFUSE)
    yield Case("field-outputs-absolute", _yaml(job("f-out-abs", outputs={"path": "/etc"})), REFUSE)
    yield Case("field-command-empty-string", _yaml(with_template("f-cmd-empty", command=[""])), ANY)
    yield Case("field-command-missing", _yaml(with_template("f-cmd-none", command=[])), REFUSE)
    yield Case("field-working-dir-parent", _yaml(with_template("f-wd", workingDir="../..")), REFUSE)
    yield Case("field-unknown", _yaml({**job("f-unknown"), "bogus": 1}), REFUSE)
    yield Case("field-misspelt", _yaml(job("f-misspelt", runPolicy={"backofLimit": 2})), REFUSE)
    yield Case("field-kind-unknown", _yaml({**job("f-kind"), "kind": "Pod"}), REFUSE)
    yield Case("field-kind-long", _yaml({**job("f-kind-long"), "kind": "K" * 100_000}), REFUSE)
    yield Case("field-api-version", _yaml({**job("f-api"), "apiVersion": "v1"}), REFUSE)
    yield Case("field-spec-list", _yaml({**job("f-spec-list"), "spec": [1]}), REFUSE)
    yield Case("field-metadata-string", _yaml({**job("f-md"), "metadata": "x"}), REFUSE)
    yield Case("field-replicas-empty", _yaml(job("f-rep-empty", replicas={})), REFUSE)
    yield Case("field-status-injected", _yaml({**job("f-status"), "status": {"phase": "Succeeded"}}), ACCEPT)
    yield Case("field-type-unknown", _yaml(job("f-type", type="pytorh")), REFUSE)
    yield Case("field-priority-nan", _yaml(job("f-prio-nan", scheduling={"priority": "nan"})), REFUSE)
    yield Case("field-env-list-bad", _yaml(with_template("f-env-list", env=[1, 2])), REFUSE)
    yield Case("field-env-name-bad", _yaml(with_template("f-env-name", env={"1A": "x"})), REFUSE)
    yield Case("field-env-reserved", _yaml(with_template("f-env-res", env={"PHALANX_X": "x"})), REFUSE)
    yield Case("field-gpu-and-milli", _yaml(with_resources("f-gpu-milli", gpu=1, gpuMilli=500)), REFUSE)
    yield Case("field-dataset-missing", _yaml(job("f-ds", datasets=[{"name": "nope"}])), REFUSE)
    yield Case(
        "field-unicode-everywhere", _yaml(with_template("f-unicode", args=["\U0001f680", "\u202e", "\uff46"])), ACCEPT
    )
    yield Case("field-valid", _yaml(job("f-valid")), ACCEPT)
    queue = {"kind": "Queue", "metadata": {"name": "f-queue"}, "spec": {"quota": {"cpu": ".inf"}}}
    yield Case("field-queue-quota-inf", _yaml(queue).replace(b'".inf"', b".inf"), REFUSE)
    queue = {"kind": "Queue", "metadata": {"name": "f-queue-w"}, "spec": {"weight": 1e308}}
    yield Case("field-queue-weight-huge", _yaml(queue), REFUSE)
    template_type = {
        "kind": "JobType",
        "metadata": {"name": "f-jt-env"},
        "spec": {"roles": {"worker": {}}, "env": {"A": "{{ rnak }}", "B": "{{ nope }}"}},
    }
    yield Case("field-jobtype-two-bad-templates", _yaml(template_type), REFUSE)


SPEC_LINE = "spec: {replicas: {w: {template: {command: [/bin/true]}}}}\n"


def _alias_bomb(levels: int, width: int = 9) -> bytes:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels + 1):
        refs = ",".join(f"*a{level - 1}" for _ in range(width))
        lines.append(f"a{level}: &a{level} [{refs}]")
    return ("\n".join(lines) + "\n").encode()


def _bomb_in_job(levels: int) -> bytes:
    anchors = _alias_bomb(levels).decode().replace("\n", "\n  ")
    return (
        "kind: TrainingJob\nmetadata: {name: bomb}\nx-anchors:\n  "
        + anchors
        + "\nspec:\n  replicas:\n    worker:\n      template:\n"
        + f"        command: [/bin/true]\n        args: *a{levels}\n"
    ).encode()


def _yaml_cases() -> Iterator[Case]:
    for levels in (4, 6, 8, 9, 10, 12):
        yield Case(f"yaml-bomb-{levels}", _alias_bomb(levels), REFUSE)
        yield Case(f"yaml-bomb-in-job-{levels}", _bomb_in_job(levels), REFUSE)
    for depth in (101, 1_000, 10_000, 100_000):
        yield Case(f"yaml-deep-lists-{depth}", ("[" * depth + "]" * depth).encode(), REFUSE)
        yield Case(f"yaml-deep-maps-{depth}", ("{a: " * depth + "1" + "}" * depth).encode(), REFUSE)
    nested: Any = "x"
    for _ in range(150):
        nested = {"a": nested}
    yield Case("yaml-deep-in-job", _yaml({**job("deep"), "spec": {**job("deep")["spec"], "x": nested}}), REFUSE)
    yield Case("yaml-huge-5mib", _yaml(with_template("huge", args=["x" * (5 * 2**20)])), REFUSE)
    yield Case("yaml-huge-comment", b"# " + b"x" * (5 * 2**20) + b"\n" + _yaml(job("huge-comment")), REFUSE)
    yield Case("yaml-long-line", _yaml(with_template("long-line", args=["y" * 100_000])), ANY)
    yield Case("yaml-501-documents", _yaml(*[job(f"many-{i}") for i in range(501)]), REFUSE)
    yield Case("yaml-10000-empty-documents", b"---\n" * 10_000, REFUSE)
    yield Case("yaml-3-documents", _yaml(*[job(f"three-{i}") for i in range(3)]), ACCEPT)
    valid = "kind: TrainingJob\nmetadata: {name: enc-NAME}\n" + SPEC_LINE
    for codec in ("utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-8-sig"):
        yield Case(f"encoding-{codec}", valid.replace("NAME", codec).encode(codec), ANY)
    yield Case("encoding-latin-1", (valid.replace("NAME", "latin") + "# caf\xe9\n").encode("latin-1"), ANY)
    yield Case("encoding-invalid-bytes", valid.encode() + b"# \xff\xfe\xfd\x80\n", ANY)
    yield Case("encoding-invalid-in-value", valid.replace("[/bin/true]", '["\xff"]').encode("latin-1"), ANY)
    yield Case("encoding-nul-raw", valid.encode() + b"\x00\n", REFUSE)
    yield Case("encoding-binary", bytes(range(256)) * 64, REFUSE)
    yield Case("encoding-lone-surrogate", valid.replace("[/bin/true]", '["\\ud800"]').encode(), ANY)
    duplicate = (
        "kind: TrainingJob\nmetadata: {name: dup}\nspec:\n  replicas: {worker: {template: {command: [/bin/true]}}}\n"
    )
    yield Case("duplicate-spec", (duplicate + "spec:\n  replicas: {}\n").encode(), REFUSE)
    yield Case("duplicate-metadata", (duplicate + "metadata: {name: other}\n").encode(), REFUSE)
    nested_dup = duplicate.replace("{worker: {template:", "{worker: {count: 1, count: 2, template:")
    yield Case("duplicate-nested", nested_dup.encode(), REFUSE)
    yield Case("duplicate-json", b'{"kind": "TrainingJob", "kind": "Queue", "metadata": {"name": "dup-json"}}', REFUSE)
    yield Case(
        "duplicate-merge-key",
        (duplicate.replace("metadata: {name: dup}", "metadata: {<<: {name: a}, name: dup-merge}")).encode(),
        ANY,
    )
    tags = {
        "python-object": "!!python/object/apply:os.system ['echo pwned']",
        "python-name": "!!python/name:os.system",
        "python-module": "!!python/module:os",
        "python-tuple": "!!python/tuple [1, 2]",
        "custom": "!custom {a: 1}",
        "binary": "!!binary aGVsbG8=",
        "set": "!!set {a, b}",
        "timestamp": "2001-12-14t21:59:43.10-05:00",
    }
    for tag, value in tags.items():
        text = f"kind: TrainingJob\nmetadata: {{name: tag-{tag}}}\nx: {value}\n" + SPEC_LINE
        yield Case(f"tag-{tag}", text.encode(), REFUSE)
        yield Case(
            f"tag-{tag}-in-args",
            valid.replace("[/bin/true]", f"[/bin/true, {value}]").replace("NAME", tag).encode(),
            ANY,
        )
    yield Case("anchor-across-documents", b"a: &x {b: 1}\n---\nkind: TrainingJob\nc: *x\n", REFUSE)
    yield Case("anchor-undefined", b"kind: TrainingJob\nmetadata: *nope\n", REFUSE)
    yield Case("anchor-recursive", b"&a [*a]\n", REFUSE)
    yield Case("anchor-valid-reuse", _anchored_job().encode(), ACCEPT)
    for name, text in {
        "empty": b"",
        "only-comments": b"# nothing\n",
        "null": b"null\n",
        "scalar": b"42\n",
        "list": b"- a\n- b\n",
        "string": b"hello\n",
        "unterminated": b'kind: "TrainingJob\n',
        "tab-indent": b"kind: TrainingJob\nmetadata:\n\tname: tabs\n",
        "bad-indent": b"kind: TrainingJob\n metadata:\n name: x\n",
        "huge-int-key": b"99999999999999999999999999999: 1\n",
        "complex-key": b"? [a, b]\n: 1\n",
        "null-key": b"~: 1\nkind: TrainingJob\n",
        "bool-keys": b"kind: TrainingJob\nmetadata: {name: b}\n" + SPEC_LINE.replace("{w:", "{true:").encode(),
        "int-role": b"kind: TrainingJob\nmetadata: {name: i}\n" + SPEC_LINE.replace("{w:", "{1:").encode(),
        "directive": b"%YAML 1.1\n%TAG ! tag:evil.invalid,2000:\n---\nkind: !foo TrainingJob\n",
        "bom-twice": "\ufeff\ufeffkind: TrainingJob\n".encode(),
        "crlf": valid.replace("\n", "\r\n").replace("NAME", "crlf").encode(),
        "cr-only": valid.replace("\n", "\r").replace("NAME", "cr").encode(),
    }.items():
        verdict = ACCEPT if name == "crlf" else ANY if name in ("cr-only", "huge-int-key", "bom-twice") else REFUSE
        yield Case(f"yaml-{name}", text, verdict)


def _anchored_job() -> str:
    return (
        "kind: TrainingJob\nmetadata: {name: anchored}\nspec:\n  replicas:\n"
        "    worker: &w {count: 1, template: {command: [/bin/true], resources: {cpu: 100m}}}\n"
        "    helper: *w\n"
    )


def _json_cases() -> Iterator[Case]:
    yield Case("json-valid", json.dumps(job("json-valid")).encode(), ACCEPT, ".json")
    yield Case("json-nan", b'{"kind": "TrainingJob", "metadata": {"name": "j"}, "spec": NaN}', REFUSE, ".json")
    yield Case("json-truncated", json.dumps(job("json-trunc")).encode()[:-5], REFUSE, ".json")
    yield Case("json-array", json.dumps([job("json-array")]).encode(), REFUSE, ".json")
    big_number = json.dumps(with_resources("json-big", cpu=1)).replace('"cpu": 1', '"cpu": 1' + "0" * 400)
    yield Case("json-big-number", big_number.encode(), REFUSE, ".json")
    yield Case("json-float-exp", json.dumps(with_resources("json-exp", cpu=1e400)).encode(), REFUSE, ".json")


def cases() -> list[Case]:
    """Every case of the corpus, in a stable order with unique names."""
    found = [
        *_names(),
        *_quantities(),
        *_durations(),
        *_counts(),
        *_nul_bytes(),
        *_fields(),
        *_yaml_cases(),
        *_json_cases(),
    ]
    names = [case.name for case in found]
    assert len(set(names)) == len(names), "corpus case names must be unique"
    return found


def yaml_cases() -> list[Case]:
    """The cases about the YAML itself (bombs, depth, size, encodings, duplicates, tags, anchors)."""
    prefixes = ("yaml-", "encoding-", "duplicate-", "tag-", "anchor-", "json-")
    return [case for case in cases() if case.name.startswith(prefixes)]


def write_corpus(directory: Path) -> list[Path]:
    """Write every case and ``manifest.json`` (file name -> verdict) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for case in cases():
        path = directory / case.filename
        path.write_bytes(case.content)
        paths.append(path)
    manifest = {case.filename: case.verdict for case in cases()}
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return paths


def main(argv: list[str]) -> int:
    """``python tests/fuzz/corpus.py DIR``: write the corpus into DIR."""
    if len(argv) != 1:
        sys.stderr.write("usage: corpus.py DIR\n")
        return 2
    paths = write_corpus(Path(argv[0]))
    sys.stdout.write(f"wrote {len(paths)} files and manifest.json to {argv[0]}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
