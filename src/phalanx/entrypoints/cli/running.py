"""`phalanx run`: submit a job through the control plane's local API and follow it to the end.

Free of typer and of the model layer on its fast path (a control plane is up): the launcher calls
``run_job`` directly for ``phalanx run``, so the command costs an interpreter and a socket (and rich, when it
writes to a terminal), nothing more. Without a control plane it validates locally, starts one, then takes the
same path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.entrypoints.cli.follow import ApiJobSource, follow
from phalanx.entrypoints.cli.local_api import ApiError, LocalApi
from phalanx.entrypoints.cli.output import Writer, escape, fail, spec_errors, writer
from phalanx.entrypoints.cli.styles import styled_phase
from phalanx.services.layout import StateLayout, default_state_dir

if TYPE_CHECKING:
    from phalanx.entrypoints.client import Client


@contextmanager
def session(state_dir: Path | None, namespace: str = "default") -> Iterator[Client]:
    """A client for one command; every expected error becomes a message on stderr and an exit code."""
    from phalanx.entrypoints.client import Client
    from phalanx.model.errors import SpecError
    from phalanx.services.daemon import DaemonError
    from phalanx.services.operations import OperationError

    with Client(state_dir=state_dir, namespace=namespace) as client:
        try:
            yield client
        except SpecError as err:
            spec_errors(err.source, [(e.path, e.message) for e in err.errors])
        except (OperationError, DaemonError, TimeoutError) as err:
            fail(str(err))


def run_job(
    file: Path,
    *,
    state_dir: Path | None = None,
    namespace: str = "default",
    detach: bool = False,
    logs: bool = True,
    inventory: Path | None = None,
) -> int:
    """Submit, follow and summarise; return the exit code (0 succeeded, 1 failed, 3 halted)."""
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
            from phalanx.services.daemon import start_control_plane

            documents = read_documents(file)
            client.ops.validate(documents, source=str(file))
            leader, started = start_control_plane(client.layout, inventory=inventory)
            word = "started" if started else "running"
            where = escape(str(client.layout.root))
            console.print(f"[dim]control plane {word} (pid {leader.pid}); state in {where}[/]")
    else:
        console.print(f"[dim]control plane running; state in {escape(str(layout.root))}[/]")
    try:
        submitted = api.submit(
            documents,
            submit_dir=Path(os.getcwd()),
            namespace=None if namespace == "default" else namespace,
            replace_finished=True,
            source=str(file),
        )
    except ApiError as err:
        if err.status == 422:
            spec_errors(err.body.get("source"), [(e["path"], e["message"]) for e in err.body["errors"]])
        fail(str(err))
    jobs = [s for s in submitted if s["kind"] == "TrainingJob"]
    for item in submitted:
        verb = "replaced" if item["replaced"] else "configured" if item.get("configured") else "created"
        console.print(f"{item['kind'].lower()}/{item['name']} {verb}")
    if detach or not jobs:
        return 0
    final = follow(ApiJobSource(api, jobs[0]["namespace"], jobs[0]["name"]), console, show_logs=logs)
    summary(final, console)
    phase = final["status"]["phase"]
    return 0 if phase == "Succeeded" else 3 if phase == "Halted" else 1


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
