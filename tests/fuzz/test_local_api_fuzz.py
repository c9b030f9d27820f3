"""Fuzz the control plane's local API with malformed requests on its Unix socket (issue 13).

Hypothesis writes raw requests: random and hostile methods, targets, query strings (``wait``, ``after``),
protocol versions, headers (``Content-Length`` right, wrong or absurd, ``Transfer-Encoding``, ``Expect``) and
bodies (random bytes, random JSON, submit bodies with fields of every type). The property: every request gets an
HTTP answer with a status below 600 within the server's timeout (plus a margin) and, for an error, a JSON body
with one sentence; the control plane stays up and keeps answering a well-behaved client.

The control plane runs with a 1 s API timeout so that the requests whose body never fully arrives cost 1 s each;
the strategies keep those rare, which holds the run to a few hundred requests in about 30 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phalanx.services.embedded.layout import StateLayout
from support.waiting import wait_until

API_TIMEOUT = 1.0
ANSWER_WITHIN = API_TIMEOUT * 2 + 8.0  # the server's deadlines for head and body, and a loaded machine's margin
EXAMPLES = 400

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def socket_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real control plane process on a fresh state directory; the path of its API socket."""
    state = tmp_path_factory.mktemp("api-fuzz")
    log = state / "cp.log"
    with open(log, "wb") as sink:
        plane = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "phalanx.entrypoints.controlplane",
                "--state-dir",
                str(state),
                "--api-timeout",
                str(API_TIMEOUT),
                "--api-workers",
                "4",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its replicas, if any, go down with it
        )
    path = StateLayout(state).api_socket
    try:
        wait_until(lambda: answer_of(path, b"GET /v1/queues HTTP/1.1\r\n\r\n") is not None, message="the API socket")
        yield path
        assert plane.poll() is None, f"the control plane exited; log:\n{log.read_text()[-3000:]}"
    finally:
        if plane.poll() is None:
            os.killpg(plane.pid, signal.SIGTERM)
            try:
                plane.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(plane.pid, signal.SIGKILL)
                plane.wait(5)


def answer_of(path: Path, raw: bytes) -> tuple[int, dict[str, Any]] | None:
    """Send ``raw`` on a new connection; the first final answer as (status, JSON body), None if none came.

    Raises:
        AssertionError: the answer is not HTTP, or is cut short.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(ANSWER_WITHIN)
    try:
        sock.connect(str(path))
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    with sock:
        # The server may refuse a head before the rest of it is sent; its answer is still there to read.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(raw)
        data = b""
        while True:
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    assert not data, f"an answer cut short: {data[:200]!r}"
                    return None
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            status_line, *lines = head.decode("latin-1").split("\r\n")
            version, code, *_ = status_line.split(" ", 2)
            assert version == "HTTP/1.1" and code.isdigit(), f"not an HTTP answer: {status_line!r}"
            if code == "100":
                data = rest  # Continue: the final answer follows
                continue
            headers = {name.strip().lower(): value.strip() for name, _, value in (x.partition(":") for x in lines)}
            length = int(headers["content-length"])
            while len(rest) < length:
                chunk = sock.recv(65536)
                assert chunk, "an answer's body cut short"
                rest += chunk
            return int(code), json.loads(rest[:length])


# -- strategies ------------------------------------------------------------------------------------------------

TEXT = st.text(st.characters(codec="latin-1", exclude_characters="\r\n"), max_size=30)
NUMBERS = st.sampled_from(["0", "1", "0.5", "30", "31", "-1", "nan", "inf", "-inf", "1e308", "1e-9", "1" * 50, ""])


def mostly(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``usual`` four times in five: most requests should get past the request line to the routes."""
    return st.integers(0, 4).flatmap(lambda i: usual if i else odd)


methods = mostly(
    st.sampled_from(["GET", "POST", "DELETE"]),
    st.one_of(
        st.sampled_from(["PUT", "PATCH", "HEAD", "OPTIONS", ""]),
        st.text(st.characters(codec="ascii", exclude_characters="\r\n "), min_size=1, max_size=12),
    ),
)
segments = st.one_of(
    st.sampled_from(["v1", "submit", "queues", "namespaces", "default", "trainingjobs", "logs", "..", "", "%00"]),
    st.text(st.characters(codec="ascii", exclude_characters="\r\n /?#"), max_size=12),
    st.text(max_size=8).map(lambda s: quote(s, safe="")),
    st.sampled_from(["%ff", "%", "%zz", "a%2Fb"]),
)
paths = mostly(
    st.sampled_from(
        [
            "/v1/submit",
            "/v1/queues",
            "/v1/queues/q",
            "/v1/namespaces/default/trainingjobs/job",
            "/v1/namespaces/default/trainingjobs/job/logs",
            "/v1/namespaces/default/trainingjobs/nope",
        ]
    ),
    st.one_of(st.lists(segments, max_size=7).map(lambda parts: "/" + "/".join(parts)), TEXT),
)
routes = mostly(
    st.sampled_from(
        [
            ("POST", "/v1/submit"),
            ("POST", "/v1/submit"),
            ("GET", "/v1/queues"),
            ("GET", "/v1/queues/q"),
            ("DELETE", "/v1/queues/q"),
            ("GET", "/v1/namespaces/default/trainingjobs/job"),
            ("GET", "/v1/namespaces/default/trainingjobs/job/logs"),
        ]
    ),
    st.tuples(methods, paths),
)
queries = st.one_of(
    st.just(""),
    st.dictionaries(
        st.sampled_from(["after", "wait", "x", ""]), mostly(NUMBERS, st.one_of(TEXT, TEXT.map(quote))), max_size=3
    ).map(lambda q: "?" + "&".join(f"{k}={v}" for k, v in q.items())),
    TEXT.map(lambda s: "?" + quote(s, safe="=&%")),
)
versions = mostly(st.just("HTTP/1.1"), st.sampled_from(["HTTP/1.0", "HTTP/2", "HTTP/1.1 extra", "http/1.1", ""]))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
jobs = st.builds(
    lambda name, cpu, extra: {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        # Never admitted (or refused): the fuzz run starts no replica.
        "spec": {
            "type": "generic",
            "replicas": {"w": {"count": 1, "template": {"command": ["true"], "resources": {"cpu": cpu}}}},
        }
        | extra,
    },
    st.sampled_from(["job", "other", "Bad_Name", ""]),
    st.sampled_from(["100000", "1e40", "-1", "nan", "abc", 100000]),
    st.dictionaries(st.sampled_from(["runPolicy", "datasets", "bogus"]), JSON, max_size=1),
)
well_formed_submits = st.tuples(
    st.one_of(
        st.lists(jobs, min_size=1, max_size=2).map(lambda documents: {"documents": documents}),
        st.one_of(TEXT, st.just("kind: TrainingJob\nmetadata: {name: x}\n")).map(lambda text: {"text": text}),
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "namespace": st.sampled_from(["default", "team-a", "Team-A", "", "a" * 64]),
            "replaceFinished": st.booleans(),
            "source": TEXT,
        },
    ),
).map(lambda parts: {"submitDir": "/tmp", **parts[0], **parts[1]})
odd_submits = st.fixed_dictionaries(
    {"submitDir": st.one_of(st.just("/tmp"), TEXT, JSON)},
    optional={
        "documents": st.one_of(JSON, st.lists(st.dictionaries(TEXT, JSON))),
        "text": st.one_of(TEXT, JSON),
        "namespace": st.one_of(TEXT, JSON),
        "replaceFinished": JSON,
        "source": st.one_of(TEXT, JSON),
        "standIns": st.one_of(JSON, st.dictionaries(TEXT, st.lists(TEXT, max_size=3), max_size=2)),
        "extra": JSON,
    },
)
submit_bodies = mostly(well_formed_submits, odd_submits)
bodies = st.one_of(
    st.just(b""),
    st.binary(max_size=200),
    JSON.map(lambda v: json.dumps(v).encode()),
    submit_bodies.map(lambda v: json.dumps(v).encode()),
    submit_bodies.map(lambda v: json.dumps(v).encode()),
    st.integers(1, 300).map(lambda depth: b"[" * depth + b"]" * depth),
)
extra_headers = mostly(
    st.just([]),
    st.lists(
        st.one_of(
            st.tuples(st.sampled_from(["Connection", "Expect", "Host", "X-Any", "Content-Type"]), TEXT),
            st.tuples(st.just("Transfer-Encoding"), st.sampled_from(["chunked", "gzip", "identity", ""])),
            st.tuples(st.just("Expect"), st.just("100-continue")),
            st.tuples(TEXT, TEXT),  # names with spaces, colons or nothing at all
        ),
        max_size=3,
    ),
)
# How Content-Length relates to the body: mostly right; a length past the body makes the server wait out its
# timeout (1 s), so that one is rare.
LENGTHS = ["auto"] * 12 + ["none", "short", "negative", "garbage", "huge", "digits", "twice", "long"]


@st.composite
def raw_requests(draw: st.DrawFn) -> bytes:
    method, path = draw(routes)
    body = draw(mostly(submit_bodies.map(lambda v: json.dumps(v).encode()), bodies) if path == "/v1/submit" else bodies)
    lines = [f"{method} {path}{draw(queries)} {draw(versions)}"]
    lines += [f"{name}: {value}" for name, value in draw(extra_headers)]
    length = draw(st.sampled_from(LENGTHS))
    values = {
        "auto": str(len(body)),
        "short": str(len(body) // 2),
        "negative": "-1",
        "garbage": draw(TEXT),
        "huge": str(2**64),
        "digits": "9" * 5000,
        "twice": f"{len(body)}\r\nContent-Length: {len(body) + 1}",
        "long": str(len(body) + 10),
    }
    if length != "none":
        lines.append(f"Content-Length: {values[length]}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(raw=raw_requests())
def test_every_request_gets_an_answer_and_the_server_stays_healthy(socket_path: Path, raw: bytes) -> None:
    started = time.monotonic()
    answer = answer_of(socket_path, raw)
    took = time.monotonic() - started
    assert answer is not None, f"no answer to {raw[:300]!r}"
    status, body = answer
    assert 100 <= status < 600
    assert took < ANSWER_WITHIN
    if status >= 400:
        sentence = body.get("message") or body.get("errors")
        assert sentence, f"{status} without a sentence: {body}"
        if isinstance(sentence, str):
            assert "\n" not in sentence and "Traceback" not in sentence
    assert status != 500, f"a route raised on {raw[:300]!r}: {body}"
    healthy = answer_of(socket_path, b"GET /v1/queues HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert healthy is not None
    assert healthy[0] == 200
