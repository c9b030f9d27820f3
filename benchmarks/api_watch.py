"""Watch fan-out: how long a write takes to reach every watcher of a real `phalanx server`.

``watch_fanout_ms(base_url, token, watchers=100)`` opens ``watchers`` watches (server-sent events, one HTTP/1.1
connection each) of one namespace, then creates ``writes`` TrainingJobs there one after another at a bounded pace
(``interval`` seconds apart), and returns the p99, over the writes, of the time from the write until the last
watcher has read its ADDED event (the event reached every watcher), in milliseconds. How a job is written:

- given ``state_dir`` (the server's state directory), straight into its store, as the control plane writes the
  phases a watcher mostly sees; the clock starts just before the store's create (the write) and the server
  notices the commit from another process, as it does the control plane's;
- otherwise with a POST to the server (the token must be allowed to create jobs there); the clock starts just
  before the POST is sent, so the time includes the POST's own work (validation, the write, the answer), which
  on a loaded machine is most of it: an event often reaches every watcher before its POST is answered.

``fanout_samples`` gives every (write, watcher) pair's time, each write's last watcher and each POST's own time.
The watchers read raw HTTP/1.1: a hundred HTTP-library parsers in one client process measured the client (about
1 ms per watcher per event on 2 cores).

Run alone, it starts the server users run (``phalanx server --listen 127.0.0.1:PORT``, tokens on) over a fresh
state directory, removed afterwards, with no control plane (jobs stay Pending: this measures the API), and
measures both ways:

    python benchmarks/api_watch.py [--watchers 100] [--writes 100] [--interval 0.05]

It prints a table, then ``RESULT watch_fanout_ms=... watch_fanout_post_ms=...`` (the first from store writes,
the second from POSTs), and exits 1 when ``watch_fanout_ms`` misses the issue's bar (an event reaches 100
watchers within 100 ms p99) or a watcher missed an event.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from _api_server import start_server

API = "/apis/phalanx.dev/v1alpha1"
NAMESPACE = "watch-bench"
BAR_MS = 100.0


def _job(name: str) -> dict[str, Any]:
    template = {"command": ["python", "train.py"], "resources": {"cpu": 1, "memory": "64Mi"}}
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}},
    }


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _store_writer(state_dir: Path) -> Callable[[str], float]:
    """Create a job straight in the store of ``state_dir``; the clock reading just before the write."""
    from phalanx.adapters.store import SqliteStore
    from phalanx.model.loading import builtin_jobtypes
    from phalanx.model.validation import validate_job
    from phalanx.services.embedded.layout import StateLayout

    store = SqliteStore(StateLayout(state_dir).database)
    jobtypes = builtin_jobtypes()

    def write(name: str) -> float:
        document = _job(name)
        document["metadata"]["namespace"] = NAMESPACE
        job = validate_job(document, jobtypes)  # before the clock: the door is the POST's business
        began = time.perf_counter()
        store.create(job)
        return began

    return write


async def _fanout(
    base: str, token: str, watchers: int, writes: int, interval: float, state_dir: Path | None
) -> dict[str, Any]:
    prefix = f"wb-{secrets.token_hex(3)}"
    names = [f"{prefix}-{index:04d}" for index in range(writes)]
    sent: dict[str, float] = {}
    answered: list[float] = []  # each POST's own time, for scale: an event may come before its POST's answer
    arrived: list[dict[str, float]] = [{} for _ in range(watchers)]
    connected = 0
    all_connected = asyncio.Event()
    headers = {"Authorization": f"Bearer {token}"}
    path = f"{API}/namespaces/{NAMESPACE}/trainingjobs"

    async def watcher(number: int) -> None:
        # A raw HTTP/1.1 reader, not an HTTP library: 100 parsers in this one process would measure the client.
        # Each name is searched for in the bytes as they come (the chunk framing around the events is ignored).
        nonlocal connected
        host, port = base.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        request = f"GET {path}?watch=true HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\r\n"
        writer.write(request.encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            length = re.search(rb"content-length: *([0-9]+)", head, re.IGNORECASE)
            body = await reader.readexactly(int(length.group(1))) if length else b""
            raise SystemExit(f"the watch answered {head.decode(errors='replace')}{body.decode(errors='replace')}")
        connected += 1
        if connected == watchers:
            all_connected.set()
        seen = arrived[number]
        pattern = re.compile(rb'"name":"(' + prefix.encode() + rb'-[0-9]{4})"')
        tail = b""
        try:
            while len(seen) < writes:
                chunk = await reader.read(1 << 16)
                if not chunk:
                    return
                now = time.perf_counter()
                text = tail + chunk
                for match in pattern.finditer(text):
                    seen.setdefault(match.group(1).decode(), now)
                tail = text[-64:]
        finally:
            writer.close()

    tasks = [asyncio.create_task(watcher(number)) for number in range(watchers)]
    await asyncio.wait_for(all_connected.wait(), 120)
    store_write = _store_writer(state_dir) if state_dir is not None else None
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as writer:
        for name in names:
            if store_write is not None:  # in a thread: the watchers' reads go on meanwhile
                sent[name] = await asyncio.to_thread(store_write, name)
            else:
                sent[name] = time.perf_counter()
                answer = await writer.post(path, json=_job(name))
                answered.append((time.perf_counter() - sent[name]) * 1000)
                if answer.status_code != 201:
                    raise SystemExit(f"creating {name} answered {answer.status_code}: {answer.text}")
            await asyncio.sleep(interval)  # the bounded pace of the writes, not a synchronisation
    done, pending = await asyncio.wait(tasks, timeout=30)
    for task in pending:
        task.cancel()
    for task in done:
        if task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
    samples = [(seen[name] - sent[name]) * 1000 for seen in arrived for name in names if name in seen]
    last = [max(seen[name] for seen in arrived) - sent[name] for name in names if all(name in s for s in arrived)]
    missed = watchers * writes - len(samples)
    return {"samples": samples, "last_ms": [t * 1000 for t in last], "missed": missed, "post_ms": answered}


def fanout_samples(
    base_url: str,
    token: str,
    watchers: int = 100,
    writes: int = 100,
    interval: float = 0.05,
    *,
    state_dir: Path | None = None,
) -> dict[str, Any]:
    """The times in ms: every (write, watcher) pair's, each write's last watcher's, each POST's own.

    Keys ``samples``, ``last_ms``, ``post_ms`` (empty for store writes), and ``missed``: events that never came.
    """
    return asyncio.run(_fanout(base_url, token, watchers, writes, interval, state_dir))


def watch_fanout_ms(
    base_url: str,
    token: str,
    watchers: int = 100,
    writes: int = 100,
    interval: float = 0.05,
    *,
    state_dir: Path | None = None,
) -> float:
    """p99 ms from a write to its event at every watcher (see the module); raises when a watcher missed one."""
    measured = fanout_samples(base_url, token, watchers, writes, interval, state_dir=state_dir)
    if measured["missed"]:
        raise RuntimeError(f"{measured['missed']} events never reached their watcher")
    return percentile(measured["last_ms"], 0.99)


def main() -> int:
    from phalanx.adapters.auth.token_store import TokenStore
    from phalanx.services.embedded.layout import StateLayout

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watchers", type=int, default=100, help="concurrent watches")
    parser.add_argument("--writes", type=int, default=100, help="jobs created, one after another")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between two writes")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="phalanx-api-watch-") as folder:
        layout = StateLayout(Path(folder) / "state")
        layout.ensure()
        tokens = TokenStore(layout.tokens_database)
        token = tokens.create("bench", "admin", ["*"])
        tokens.close()
        server, base = start_server(layout.root, Path(folder) / "server.log")
        try:
            # Warm-up, not counted: the first watch starts the kind's feed; the first POSTs warm the door.
            fanout_samples(base, token, watchers=2, writes=3, interval=args.interval)
            stored = fanout_samples(base, token, args.watchers, args.writes, args.interval, state_dir=layout.root)
            posted = fanout_samples(base, token, args.watchers, args.writes, args.interval)
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()

    print(f"\n{'measure':<40} {'samples':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    rows = (
        ("store write -> event, each watcher", stored["samples"]),
        ("store write -> event, last watcher", stored["last_ms"]),
        ("POST sent -> event, each watcher", posted["samples"]),
        ("POST sent -> event, last watcher", posted["last_ms"]),
        ("POST sent -> its answer", posted["post_ms"]),
    )
    for label, values in rows:
        if values:
            row = (len(values), statistics.median(values), percentile(values, 0.99), max(values))
            print(f"{label:<40} {row[0]:>8} {row[1]:>8.1f} {row[2]:>8.1f} {row[3]:>8.1f}")
    missed = stored["missed"] + posted["missed"]
    pace = f"{args.writes} writes {args.interval * 1000:.0f} ms apart"
    print(f"{args.watchers} watchers, {pace}, each way; events missed: {missed}")
    last, last_posted = stored["last_ms"], posted["last_ms"]
    p99 = percentile(last, 0.99) if last else float("inf")
    p99_posted = percentile(last_posted, 0.99) if last_posted else float("inf")
    print(f"RESULT watch_fanout_ms={p99:.1f} watch_fanout_post_ms={p99_posted:.1f}")
    problems = []
    if p99 >= BAR_MS:
        problems.append(f"watch_fanout_ms={p99:.1f} (needs < {BAR_MS:g})")
    if missed:
        problems.append(f"{missed} events never reached their watcher")
    for line in problems:
        print(f"MISSED {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
