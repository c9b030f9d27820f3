"""``phalanx history``: the jobs the job history kept (finished, deleted, TTL-removed), newest first.

It reads the history database directly, as the control plane writes it: ``history.db`` in the state directory,
or the database of ``--history-url`` / ``$PHALANX_HISTORY_URL`` (a PostgreSQL URL). ``--summary`` prints the
queueing and run times per queue instead of the jobs. Bad options exit 2 with one sentence naming the option.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from phalanx.entrypoints.cli.options import NamespaceOption, StateDirOption
from phalanx.entrypoints.cli.output import console, fail

_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_since(text: str, now: datetime, option: str = "--since") -> datetime:
    """``2h``, ``30m``, ``7d``, ``90s`` before ``now``, or an ISO 8601 time (UTC when it has no zone).

    ``option`` is how the refusal names the value (``since``, the REST API's query parameter).

    Raises:
        ValueError: neither; the message says what to write.
    """
    if match := _DURATION.match(text.strip()):
        return now - timedelta(**{_UNITS[match[2]]: int(match[1])})
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{option} {text!r} is neither a duration (90s, 30m, 2h, 7d) nor a time (2026-11-27T10:00:00Z)"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _time(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def history(
    namespace: NamespaceOption = None,
    queue: Annotated[str | None, typer.Option("--queue", help="Only the jobs of this queue.")] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only jobs that ended since: 2h, 30m, 7d, or an ISO time.")
    ] = None,
    phase: Annotated[str | None, typer.Option("--phase", help="Only jobs that ended in this phase.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="At most this many jobs.")] = 50,
    continue_: Annotated[
        str | None, typer.Option("--continue", help="The next page: the `next` value -o json printed.")
    ] = None,
    summary: Annotated[bool, typer.Option("--summary", help="Queueing and run times per queue instead.")] = False,
    output: Annotated[str, typer.Option("--output", "-o", help="table or json.")] = "table",
    state_dir: StateDirOption = None,
    history_url: Annotated[
        str | None,
        typer.Option("--history-url", envvar="PHALANX_HISTORY_URL", help="The history's database (PostgreSQL URL)."),
    ] = None,
) -> None:
    """List finished, deleted and TTL-removed jobs from the job history, newest first."""
    if output not in ("table", "json"):
        fail(f"--output {output!r}: write table or json", code=2)
    try:
        since_at = parse_since(since, datetime.now(UTC)) if since is not None else None
    except ValueError as err:
        fail(str(err), code=2)
    try:
        from phalanx.adapters.history.records import HistoryQuery
        from phalanx.adapters.history.store import HistoryError, HistoryStore
    except ImportError:
        fail("the job history needs its extra: pip install 'phalanx[history]'", code=2)
    from phalanx.services.embedded.layout import StateLayout, default_state_dir

    if history_url is None:
        path = StateLayout(Path(state_dir) if state_dir else default_state_dir()).history_database
        if not path.exists():
            fail(f"no job history in {path.parent} yet: the control plane records jobs once they end (phalanx up)")
        history_url = f"sqlite:///{path}"
    query = HistoryQuery(namespace=namespace, queue=queue, phase=phase, since=since_at, limit=limit, after=continue_)
    try:
        store = HistoryStore(history_url)
        try:
            if summary:
                _print_summaries(store.summaries(query), output)
            else:
                page = store.list(query)
                _print_records(page.records, page.next, output)
        finally:
            store.close()
    except HistoryError as err:
        fail(str(err))


def _print_records(records: list[Any], more: str | None, output: str) -> None:
    from phalanx.adapters.history.records import wire_form

    if output == "json":
        print(json.dumps({"items": [wire_form(r) for r in records], "next": more}, indent=2))
        return
    if not records:
        console.print("No jobs in the history match.")
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NAMESPACE", "NAME", "QUEUE", "PHASE", "ENDED", "QUEUED", "RAN", "DELETED"):
        table.add_column(column)
    for r in records:
        table.add_row(
            r.namespace,
            r.name,
            r.queue,
            r.phase,
            _time(r.ended_at),
            _seconds(r.queueing_seconds),
            _seconds(r.run_seconds),
            _time(r.deleted_at),
        )
    console.print(table)
    if more is not None:
        console.print(f"(more: raise --limit past {len(records)}, or page on with -o json and --continue)")


def _print_summaries(summaries: list[Any], output: str) -> None:
    from phalanx.adapters.history.records import wire_form

    if output == "json":
        print(json.dumps({"queues": [wire_form(s) for s in summaries]}, indent=2))
        return
    if not summaries:
        console.print("No jobs in the history match.")
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("QUEUE", "JOBS", "QUEUED P50", "QUEUED P95", "RAN P50", "RAN P95"):
        table.add_column(column)
    for s in summaries:
        table.add_row(
            s.queue,
            str(s.count),
            _seconds(s.queueing_p50),
            _seconds(s.queueing_p95),
            _seconds(s.run_p50),
            _seconds(s.run_p95),
        )
    console.print(table)
