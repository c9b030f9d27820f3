"""`phalanx run`: submit a job through the control plane's local API and follow it to the end.

A file with no TrainingJob but a Sweep or a PipelineRun is followed by ``follow_flows`` instead.

Free of typer and of the model layer on its fast path (a control plane is up): the launcher calls
``run_job`` directly for ``phalanx run``, so the command costs an interpreter and a socket (and rich, when it
writes to a terminal), nothing more. Without a control plane it validates locally, starts one, then takes the
same path.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.entrypoints.cli.follow import ApiConnectionLostError, ApiJobSource, follow
from phalanx.entrypoints.cli.local_api import ApiError, LocalApi
from phalanx.entrypoints.cli.output import STORE_UNAVAILABLE_EXIT, Writer, escape, fail, spec_errors, writer
from phalanx.entrypoints.cli.styles import styled_phase
from phalanx.services.embedded.layout import StateLayout, default_state_dir

if TYPE_CHECKING:
    from phalanx.entrypoints.client import Client


@contextmanager
def session(state_dir: Path | None, namespace: str = "default") -> Iterator[Client]:
    """A client for one command; every expected error becomes a message on stderr and an exit code."""
    from phalanx.adapters.store import StoreError, StoreUnavailableError, UnreadableError
    from phalanx.entrypoints.client import Client
    from phalanx.model.errors import SpecError
    from phalanx.services.embedded.daemon import DaemonError
    from phalanx.services.operations import OperationError

    try:
        with Client(state_dir=state_dir, namespace=namespace) as client:
            try:
                yield client
            except SpecError as err:
                spec_errors(err.source, [(e.path, e.message) for e in err.errors])
            except (OperationError, DaemonError, TimeoutError, UnreadableError) as err:
                fail(str(err))
    except StoreUnavailableError as err:
        fail(str(err), STORE_UNAVAILABLE_EXIT)
    except StoreError as err:
        fail(str(err))


def refuse_bad_namespace(namespace: str | None) -> None:
    """``-n`` says where objects are stored: a bad one is refused before anything is read, started or stored.

    The model's rule (``model.names``, standard library only: this runs on ``run``'s fast path); the operations
    check it again for the SDK and the local API.
    """
    if namespace is None:
        return
    from phalanx.model.names import check_dns_label

    try:
        check_dns_label(namespace, "namespace")
    except ValueError as err:
        fail(str(err), 2)


def run_job(
    file: Path,
    *,
    state_dir: Path | None = None,
    namespace: str = "default",
    detach: bool = False,
    logs: bool = True,
    inventory: Path | None = None,
    stand_ins: dict[str, list[str]] | None = None,
) -> int:
    """Submit, follow and summarise; return the exit code (0 succeeded, 1 failed, 3 halted).

    The first TrainingJob of the file is followed; without one, its first Sweep or PipelineRun.

    ``stand_ins``: image -> the words of a local program that plays it (``--stand-in``).
    """
    refuse_bad_namespace(namespace)
    layout = StateLayout(state_dir or default_state_dir())
    api = LocalApi(layout.api_socket)
    console = writer()
    documents: list[dict[str, Any]] | str
    # A small module without pydantic or YAML: it bounds the size and decodes as the full path below would.
    from phalanx.model.textfiles import FileTextError, read_spec_text

    try:
        documents = read_spec_text(file)  # the control plane parses it
    except (OSError, FileTextError):
        documents = ""  # the full path below reports the problem
    if not documents or not api.available():
        # No control plane yet (or a file that cannot be read): validate here first, so that a bad spec
        # never leaves a control plane behind, then start one.
        with session(state_dir, namespace) as client:
            from phalanx.model.loading import read_documents
            from phalanx.services.embedded.daemon import start_control_plane

            documents = read_documents(file)
            client.ops.validate(
                documents,
                source=str(file),
                namespace=None if namespace == "default" else namespace,
                stand_ins=stand_ins,
            )
            leader, started = start_control_plane(client.layout, inventory=inventory)
            word = "started" if started else "running"
            where = escape(str(client.layout.root))
            console.print(f"[dim]control plane {word} (pid {leader.pid}); state in {where}[/]")
    else:
        console.print(f"[dim]control plane running; state in {escape(str(layout.root))}[/]")
    submitted_at = time.time()
    submitted_clock = time.monotonic()  # the elapsed times `run` shows count from here
    from phalanx.entrypoints.cli.fast_submit import submit_through, submitted_verb

    submitted = submit_through(
        api, documents, namespace=namespace, replace_finished=True, source=str(file), stand_ins=stand_ins
    )
    jobs = [s for s in submitted if s["kind"] == "TrainingJob"]
    for item in submitted:
        console.print(f"{item['kind'].lower()}/{item['name']} {submitted_verb(item)}")
    if detach:
        return 0
    if not jobs:
        from phalanx.entrypoints.cli.follow_flows import flow_made, follow_flow

        flow = flow_made([(s["kind"], s["namespace"], s["name"]) for s in submitted], console)
        if flow is None:
            return 0

        def alive() -> bool:
            probe = LocalApi(layout.api_socket)  # a fresh connection each time: the last one may be to a dead plane
            try:
                return probe.available()
            finally:
                probe.close()

        with session(state_dir, namespace) as client:
            return follow_flow(client.ops, *flow, console, alive, started=submitted_clock)
    namespace, name = jobs[0]["namespace"], jobs[0]["name"]

    def when_gone(last: dict[str, Any] | None) -> dict[str, Any]:
        return final_of_deleted(layout, namespace, name, last, since=submitted_at)

    lost: Exception
    try:
        final = follow(ApiJobSource(api, namespace, name, when_gone=when_gone), console, show_logs=logs)
    except ApiError as err:
        if err.status != 503:
            fail(f"cannot follow job {namespace}/{name}: {err}; it keeps running: see `phalanx get jobs`")
        lost = err  # 503: the control plane is stopping
    except ApiConnectionLostError as err:
        lost = err  # it went away mid-answer, or stopped answering
    else:
        summary(final, console)
        phase = final["status"]["phase"]
        return 0 if phase == "Succeeded" else 3 if phase == "Halted" else 1
    fail(
        f"lost the control plane while following job {namespace}/{name} ({lost}); the job is not lost: "
        f"`phalanx up`, then `phalanx logs -f {name}`"
    )


def final_of_deleted(
    layout: StateLayout, namespace: str, name: str, last: dict[str, Any] | None, *, since: float
) -> dict[str, Any]:
    """The final form of a followed job the API no longer finds, rebuilt from its events in the store.

    A job with ``ttlSecondsAfterFinished: 0`` is deleted as it finishes, maybe before the follower saw it
    finish; its events stay. It Succeeded if it recorded the Succeeded event; otherwise it was deleted before
    it finished (by TTL after failing, or by someone), which counts as a failure.

    Raises:
        Failure: the job is still stored (the API cannot find it by this name): an error sentence, exit 1.
    """
    from datetime import UTC, datetime

    from phalanx.adapters.store import SqliteStore
    from phalanx.model.jobs import Phase, TrainingJob

    store = SqliteStore(layout.database)
    try:
        if store.try_get(TrainingJob, namespace, name) is not None:
            fail(
                f"job {namespace}/{name!r} was created, but the control plane's API cannot find it by that name; "
                "see it with `phalanx get jobs`"
            )
        records = store.list_event_records("TrainingJob", namespace, name)
    finally:
        store.close()
    created = (last or {}).get("metadata", {}).get("creationTimestamp")
    # Events of an earlier job of the same name are not this one's (the clock is this machine's in both).
    start = datetime.fromisoformat(created) if created else datetime.fromtimestamp(since - 1.0, UTC)
    mine = [r for r in records if r.last_time >= start]
    succeeded = next((r for r in reversed(mine) if r.event.reason == Phase.SUCCEEDED.value), None)
    deleted = next((r for r in reversed(mine) if r.event.reason == "Deleted"), None)
    status = dict((last or {}).get("status", {}))
    if succeeded is not None:
        phase, message, when = Phase.SUCCEEDED.value, succeeded.event.message, succeeded.last_time
    else:
        warning = next((r for r in reversed(mine) if r.event.type == "Warning"), None)
        said = f"{warning.event.reason}: {warning.event.message}" if warning is not None else None
        if deleted is not None:  # deleted by the control plane (TTL), which says what the job had become
            message = f"{said} (then deleted: {deleted.event.message})" if said else f"deleted: {deleted.event.message}"
        else:  # deleted by someone before it finished
            message = "the job was deleted before it finished" + (f"; last warning: {said}" if said else "")
        latest = deleted or warning or (mine[-1] if mine else None)
        phase, when = Phase.FAILED.value, latest.last_time if latest is not None else datetime.now(UTC)
    stamp = when.isoformat()
    condition = {"type": phase, "status": "True", "reason": phase, "message": message, "lastTransitionTime": stamp}
    status.update(
        phase=phase,
        message=message,
        completionTime=stamp,
        conditions=[*status.get("conditions", []), condition],
    )
    return {"metadata": (last or {}).get("metadata", {"name": name, "namespace": namespace}), "status": status}


def summary(job: dict[str, Any], console: Writer) -> None:
    """The closing lines of `run`: result, duration, metrics, artifacts."""
    from datetime import datetime

    status = job.get("status", {})
    conditions = status.get("conditions", [])
    first = conditions[0]["lastTransitionTime"] if conditions else job["metadata"].get("creationTimestamp")
    done = status.get("completionTime")
    line = f"job {job['metadata']['name']} {styled_phase(status.get('phase', ''))}"
    if first and done:
        took = datetime.fromisoformat(done).timestamp() - datetime.fromisoformat(first).timestamp()
        line += f" in {took:.1f}s"
    if status.get("phase") == "Failed":
        line += f": {escape(status.get('message') or status.get('reason', ''))}"
    console.print(line)
    if metrics := status.get("metrics"):
        console.print("metrics: " + ", ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
    if artifacts := status.get("artifacts"):
        console.print(f"artifacts: {escape(str(artifacts))}")
