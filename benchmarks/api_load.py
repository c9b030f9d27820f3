"""Load on the REST API: a real `phalanx server` on loopback over a fresh state directory, 200 concurrent clients.

The server is the command users run (``phalanx server --listen 127.0.0.1:PORT``, tokens on: every request sends
an admin token), in its own process, over a state directory made for the run and removed afterwards; no control
plane runs (jobs stay Pending: this measures the API, not the scheduler). The store is seeded with ``--jobs``
TrainingJobs (a ``team`` label on each) written straight into it, then, one step after another:

1. **get**: ``--clients`` clients (asyncio, one raw HTTP/1.1 keep-alive connection each, ``_raw_http``: an HTTP
   library's client costs as much CPU as the server's answer, and the clients share the server's machine) read
   random jobs, each at its own steady pace so that together they offer ``--get-rate`` requests per second for
   ``--get-seconds``: a bounded load, not a flood, so the latency is the server's and not a queue the clients
   built. p50/p99 of each GET.
2. **list**: one client walks every job in pages of ``--page`` (``limit`` and ``continue``), ``--walks`` times:
   p50/p95 of a page.
3. **submit**: ``--clients`` clients POST ``--submits`` new jobs as fast as the server takes them (each client
   sends its next one when the last was answered): jobs created per second, and p99 of a POST.
4. **watch**: ``--watchers`` clients watch the jobs (server-sent events) while 100 jobs are written to the store
   50 ms apart: p99 of the time until the last watcher has an event (``api_watch.watch_fanout_ms``).

Run from the repository root, on an otherwise idle machine (other work on the CPUs shows up in the numbers):

    python benchmarks/api_load.py [--jobs 10000] [--clients 200] [--get-rate 400] [--submits 2000]

It prints a table, then ``RESULT get_p99_ms=... list_10k_page_ms=... submit_per_s=... watch_fanout_ms=...``
(``list_10k_page_ms`` is the p95 page), and exits 1 when a number misses the issue's bar: get p99 < 50 ms, a
500-item page of 10,000 jobs < 200 ms, >= 500 submissions/s, an event at 100 watchers within 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from _api_server import start_server
from _raw_http import Connection, RawHttpError
from api_watch import watch_fanout_ms
from phalanx.adapters.auth.token_store import TokenStore
from phalanx.adapters.store import SqliteStore
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.validation import validate_job
from phalanx.services.embedded.layout import StateLayout

API = "/apis/phalanx.dev/v1alpha1"
JOBS = f"{API}/namespaces/default/trainingjobs"
SERVER = [sys.executable, "-m", "phalanx.entrypoints.cli", "server"]
#: The issue's bars: (RESULT key, the comparison, the bar).
BARS = {
    "get_p99_ms": ("<", 50.0),
    "list_10k_page_ms": ("<", 200.0),
    "submit_per_s": (">=", 500.0),
    "watch_fanout_ms": ("<", 100.0),
}


def job_document(name: str, team: int) -> dict[str, Any]:
    template = {"command": ["python", "train.py"], "resources": {"cpu": 1, "memory": "64Mi"}}
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "labels": {"team": f"t{team % 4}"}},
        "spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}},
    }


def seed(layout: StateLayout, count: int) -> None:
    """``count`` validated jobs written straight into the store (the API's create path is step 3's business)."""
    jobtypes = builtin_jobtypes()
    with SqliteStore(layout.database) as store:
        for index in range(count):
            store.create(validate_job(job_document(f"job-{index:05d}", index), jobtypes))


def cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system) the server has used so far, its worker processes' too; None without /proc."""
    try:
        total = 0
        for process in [pid, *_children(pid)]:
            fields = Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    except (OSError, IndexError, ValueError):
        return None
    return total / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found += [int(child), *_children(int(child))]
    return found


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def get_load(base: str, token: str, jobs: int, clients: int, rate: float, seconds: float) -> dict[str, Any]:
    """Bounded load: each client reads a random job every ``clients / rate`` seconds, offsets spread evenly."""
    interval = clients / rate
    latencies: list[float] = []
    errors = 0
    late = 0
    headers = {"Authorization": f"Bearer {token}"}
    connections = [Connection(base, headers) for _ in range(clients)]
    began = time.perf_counter()

    async def client(number: int) -> None:
        nonlocal errors, late
        picker = random.Random(number)
        due = began + interval * number / clients
        while due < began + seconds:
            pause = due - time.perf_counter()
            if pause > 0:
                await asyncio.sleep(pause)
            else:
                late += 1
            sent = time.perf_counter()
            try:
                code, _ = await connections[number].request("GET", f"{JOBS}/job-{picker.randrange(jobs):05d}")
                errors += code != 200
            except (OSError, RawHttpError, asyncio.IncompleteReadError):
                errors += 1
            latencies.append(time.perf_counter() - sent)
            due += interval

    try:
        await asyncio.gather(*(client(number) for number in range(clients)))
    finally:
        await asyncio.gather(*(connection.close() for connection in connections))
    elapsed = time.perf_counter() - began
    return {"latencies": latencies, "errors": errors, "late": late, "rate": len(latencies) / elapsed}


def list_walks(base: str, token: str, page: int, walks: int) -> dict[str, Any]:
    times: list[float] = []
    counts: list[int] = []
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        for _ in range(walks):
            params: dict[str, Any] = {"limit": page}
            seen = 0
            while True:
                sent = time.perf_counter()
                response = http.get(JOBS, params=params)
                body = response.json()  # read whole: the page's time includes its transfer
                times.append(time.perf_counter() - sent)
                if response.status_code != 200:
                    raise SystemExit(f"a page of the list failed: {response.status_code} {response.text[:300]}")
                seen += len(body["items"])
                token_next = body["metadata"].get("continue")
                if token_next is None:
                    break
                params = {"limit": page, "continue": token_next}
            counts.append(seen)
    return {"times": times, "counts": counts}


async def submit_load(base: str, token: str, clients: int, total: int) -> dict[str, Any]:
    """Closed loop: each client posts its next job when its last was answered, until ``total`` were sent."""
    latencies: list[float] = []
    codes: dict[int, int] = {}
    numbers = iter(range(total))
    headers = {"Authorization": f"Bearer {token}"}
    connections = [Connection(base, headers) for _ in range(clients)]
    bodies = {number: json.dumps(job_document(f"new-{number:05d}", number)).encode() for number in range(total)}
    began = time.perf_counter()

    async def client(connection: Connection) -> None:
        for number in numbers:
            sent = time.perf_counter()
            try:
                code, _ = await connection.request("POST", JOBS, bodies[number])
            except (OSError, RawHttpError, asyncio.IncompleteReadError):
                code = 0  # no answer
            latencies.append(time.perf_counter() - sent)
            codes[code] = codes.get(code, 0) + 1

    try:
        await asyncio.gather(*(client(connection) for connection in connections))
    finally:
        await asyncio.gather(*(connection.close() for connection in connections))
    elapsed = time.perf_counter() - began
    return {"latencies": latencies, "codes": codes, "per_s": codes.get(201, 0) / elapsed, "elapsed": elapsed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10000, help="jobs in the store before the load")
    parser.add_argument("--clients", type=int, default=200, help="concurrent clients of the get and submit steps")
    parser.add_argument("--get-rate", type=float, default=400.0, help="GETs per second all clients offer together")
    parser.add_argument("--get-seconds", type=float, default=10.0, help="how long the get step lasts")
    parser.add_argument("--page", type=int, default=500, help="the list step's limit")
    parser.add_argument("--walks", type=int, default=3, help="how many times the list step walks every page")
    parser.add_argument("--submits", type=int, default=2000, help="jobs the submit step creates")
    parser.add_argument("--watchers", type=int, default=100, help="watchers of the watch step (api_watch.py)")
    parser.add_argument(
        "--workers",
        type=int,
        default=max(1, min(4, os.cpu_count() or 1)),
        help="phalanx server --workers (default: one per CPU core, at most 4; the raw clients cost little)",
    )
    args = parser.parse_args()
    print(f"phalanx server --workers {args.workers}; {os.cpu_count()} CPU cores")

    with tempfile.TemporaryDirectory(prefix="phalanx-api-load-") as folder:
        layout = StateLayout(Path(folder) / "state")
        layout.ensure()
        began = time.perf_counter()
        seed(layout, args.jobs)
        print(f"seeded {args.jobs} jobs in {time.perf_counter() - began:.1f} s")
        tokens = TokenStore(layout.tokens_database)
        token = tokens.create("bench", "admin", ["*"])
        tokens.close()
        server, base = start_server(layout.root, Path(folder) / "server.log", args.workers)
        try:
            # Warm-up, not counted: the first requests build the app's routes' caches and the store's connections.
            asyncio.run(get_load(base, token, args.jobs, args.clients, args.get_rate, 1.0))
            cpu = [cpu_seconds(server.pid)]
            got = asyncio.run(get_load(base, token, args.jobs, args.clients, args.get_rate, args.get_seconds))
            cpu.append(cpu_seconds(server.pid))
            listed = list_walks(base, token, args.page, args.walks)
            cpu.append(cpu_seconds(server.pid))
            submitted = asyncio.run(submit_load(base, token, args.clients, args.submits))
            cpu.append(cpu_seconds(server.pid))
            # An event reaching every watcher: the writes go to the store, as the control plane writes phases.
            fanout = watch_fanout_ms(base, token, watchers=args.watchers, state_dir=layout.root)
        except BaseException:
            # The state directory goes with the run: the server's own account of the failure is printed now.
            print(f"the run failed; the server's log:\n{(Path(folder) / 'server.log').read_text()[-8000:]}")
            raise
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()

    get_ms = [t * 1000 for t in got["latencies"]]
    page_ms = [t * 1000 for t in listed["times"]]
    post_ms = [t * 1000 for t in submitted["latencies"]]
    counts = [len(get_ms), len(page_ms), len(post_ms)]
    # The server's own CPU time per request: what the numbers above cost, whatever else the CPUs were doing.
    spent = [
        (after - before) * 1000 / count if before is not None and after is not None and count else float("nan")
        for before, after, count in zip(cpu[:-1], cpu[1:], counts, strict=True)
    ]
    rows = [
        ("get", f"{len(get_ms)} at {got['rate']:.0f}/s", statistics.median(get_ms), percentile(get_ms, 0.99)),
        (f"list page of {args.page}", f"{len(page_ms)} pages", statistics.median(page_ms), percentile(page_ms, 0.95)),
        (
            "submit",
            f"{len(post_ms)} at {submitted['per_s']:.0f}/s",
            statistics.median(post_ms),
            percentile(post_ms, 0.99),
        ),
    ]
    print(f"\n{'step':<20} {'requests':>18} {'p50 ms':>9} {'p99/p95 ms':>11} {'server CPU ms each':>19}")
    for (label, count, p50, tail), cost in zip(rows, spent, strict=True):
        print(f"{label:<20} {count:>18} {p50:>9.1f} {tail:>11.1f} {cost:>19.2f}")
    print(f"get: {got['errors']} errors, {got['late']} sends behind their client's pace")
    print(f"list: every walk saw {sorted(set(listed['counts']))} jobs (expected {args.jobs})")
    print(f"submit: answers {dict(sorted(submitted['codes'].items()))} in {submitted['elapsed']:.1f} s")
    print(f"watch: an event at all {args.watchers} watchers within {fanout:.1f} ms (p99 of 100 writes)")

    results = {
        "get_p99_ms": percentile(get_ms, 0.99),
        "list_10k_page_ms": percentile(page_ms, 0.95),
        "submit_per_s": submitted["per_s"],
        "watch_fanout_ms": fanout,
    }
    print("RESULT " + " ".join(f"{key}={value:.1f}" for key, value in results.items()))
    missed = [
        f"{key}={results[key]:.1f} (needs {op} {bar:g})"
        for key, (op, bar) in BARS.items()
        if not (results[key] < bar if op == "<" else results[key] >= bar)
    ]
    problems = []
    if got["errors"] or submitted["codes"].get(201, 0) != args.submits:
        problems.append("some requests failed (see above)")
    if set(listed["counts"]) != {args.jobs}:
        problems.append("a walk of the list did not see every job")
    for line in missed + problems:
        print(f"MISSED {line}")
    return 1 if missed or problems else 0


if __name__ == "__main__":
    sys.exit(main())
