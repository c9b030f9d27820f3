"""``phalanx up``, ``down`` and ``status``: the embedded backend's local control plane (refused on Kubernetes)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from phalanx.entrypoints.cli.options import (
    INSTALL_HINT,
    BackendOption,
    ContextOption,
    KubeconfigOption,
    StateDirOption,
    choose,
    embedded_only,
)
from phalanx.entrypoints.cli.output import console, fail, warn
from phalanx.entrypoints.cli.running import session
from phalanx.entrypoints.cli.styles import styled_phase


def up(
    state_dir: StateDirOption = None,
    inventory: Annotated[
        Path | None, typer.Option(help="Simulated nodes (YAML of Node objects) instead of this machine.")
    ] = None,
    cache_size: Annotated[
        str | None,
        typer.Option(help="Each node's dataset cache, e.g. 50Gi (default: as recorded; half the free disk when new)."),
    ] = None,
    scheduler_config: Annotated[
        Path | None,
        typer.Option(
            "--scheduler-config",
            help="A SchedulerConfiguration file (queue order, queueing strategy, placement, preemption, time "
            "slicing; docs/scheduling.md). Recorded in the state directory: later starts keep it.",
            show_default=False,
        ),
    ] = None,
    gpu_fault_file: Annotated[
        Path | None,
        typer.Option(help="A file of this machine's GPU indices to treat as unhealthy, read every 10 s."),
    ] = None,
    listen: Annotated[
        str | None,
        typer.Option(
            "--listen",
            help="Also serve the REST API from the control plane on HOST:PORT (loopback only, for now), with a "
            "/metrics that has the scheduler's counts (docs/server.md#metrics). Needs the server extra.",
            show_default=False,
        ),
    ] = None,
    no_auth: Annotated[
        bool,
        typer.Option("--no-auth", help="With --listen: serve every request without a token."),
    ] = False,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Start the local control plane in the background (or report the running one)."""
    from phalanx.model.loading import read_scheduler_configuration
    from phalanx.services.embedded.daemon import start_control_plane

    embedded_only(choose(backend, kubeconfig, context), "up", f"install Phalanx once: {INSTALL_HINT}")
    if no_auth and listen is None:
        fail("--no-auth only applies to --listen: add --listen 127.0.0.1:PORT, or leave --no-auth out", 2)
    if listen is not None:
        _check_listen(listen)
    if inventory is not None and gpu_fault_file is not None:
        fail(
            "--gpu-fault-file marks this machine's GPUs unhealthy and does nothing with --inventory: mark a GPU "
            "of the inventory `healthy: false` in its file instead (docs/scheduling.md, GPU health)",
            2,
        )

    with session(state_dir) as client:
        configuration = read_scheduler_configuration(scheduler_config) if scheduler_config is not None else None
        leader, started = start_control_plane(
            client.layout,
            inventory=inventory,
            cache_size=cache_size,
            gpu_fault_file=gpu_fault_file,
            scheduler_config=configuration,
            listen=listen,
            no_auth=no_auth,
        )
        word = "started" if started else "already running"
        console.print(f"control plane {word} (pid {leader.pid}); state in {client.layout.root}")
        console.print(f"log: {client.layout.control_plane_log}")
        if listen is not None and started:
            console.print(f"REST API and /metrics on http://{listen}" + (" (no token needed)" if no_auth else ""))
    # A running control plane keeps the nodes, cache size and fault file it started with: say so, not drop them.
    given = {
        "--inventory": inventory,
        "--cache-size": cache_size,
        "--gpu-fault-file": gpu_fault_file,
        "--listen": listen,
    }
    ignored = [flag for flag, value in given.items() if value is not None]
    if not started and ignored:
        warn(
            f"{' and '.join([', '.join(ignored[:-1]), ignored[-1]] if len(ignored) > 1 else ignored)} "
            f"{'was' if len(ignored) == 1 else 'were'} not applied: the control plane was "
            "already running and keeps what it started with; run `phalanx down`, then `phalanx up` with them"
        )


def _check_listen(listen: str) -> None:
    """Refuse a --listen the control plane could not serve, here rather than in its log."""
    from phalanx.entrypoints.server.serving import ListenError, listen_address

    try:
        listen_address(listen)
    except ListenError as err:
        fail(str(err), 2)
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        fail(
            "--listen needs FastAPI, uvicorn and prometheus_client, the server extra: pip install 'phalanx[server]'", 2
        )


def down(
    state_dir: StateDirOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Stop the local control plane. Running replicas keep running and are adopted by the next `up`."""
    embedded_only(choose(backend, kubeconfig, context), "down", "Phalanx runs in the cluster; nothing to stop")
    with session(state_dir) as client:
        stopped = client.down()
        console.print("control plane stopped" if stopped else "no control plane was running")


def status(
    state_dir: StateDirOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Is the control plane running, what does this machine hold, and what is quarantined?"""
    from phalanx.core.lifecycle.quarantine import shown_phase
    from phalanx.services.embedded.daemon import current_leader

    embedded_only(
        choose(backend, kubeconfig, context),
        "status",
        "see the components with `kubectl -n phalanx-system get pods` and the jobs with `phalanx get jobs`",
    )

    with session(state_dir) as client:
        leader = current_leader(client.store)
        if leader is None:
            console.print("control plane: [yellow]not running[/] (start it with `phalanx up`)")
        else:
            console.print(f"control plane: [green]running[/] (pid {leader.pid}, {leader.holder})")
        console.print(f"state: {client.layout.root}")
        jobs = client.ops.list_jobs(None)
        counts: dict[str, int] = {}
        for job in jobs:
            phase = shown_phase(job.status)
            counts[phase] = counts.get(phase, 0) + 1
        summary = ", ".join(f"{n} {styled_phase(p)}" for p, n in sorted(counts.items())) or "none"
        console.print(f"jobs: {summary}")
        console.print(f"nodes: {len(client.ops.list_nodes())}")
        records = client.ops.quarantined()
        if records:
            console.print(
                f"quarantined: [bold red]{len(records)}[/] object(s) the control plane leaves alone; delete them "
                "(`phalanx delete --quarantined`, or one job with `phalanx delete job NAME -n NAMESPACE`) or fix them"
            )
            for record in records:
                console.print(f"  {escape(record.key)}: {escape(record.message)}", soft_wrap=True)
