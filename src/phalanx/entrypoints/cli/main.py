"""The ``phalanx`` command: kubectl-like verbs over the embedded runtime or a Kubernetes cluster.

This module is the table of commands: it builds the typer app and registers each command from the module of
its noun, in the order ``phalanx --help`` lists them (``jobs``: run, submit, get, describe, logs, halt, resume,
delete, explain; ``convert``; ``control_plane``: up, down, status; ``server``; ``history``; ``install``;
``sim``, ``dataset``, ``cache``, ``sweep`` and ``token`` groups).
The option types and the backend session every verb shares are in ``options``.

Every job verb takes ``--backend embedded|kubernetes`` (default: ``$PHALANX_BACKEND``, else kubernetes when
``--context`` or ``--kubeconfig`` names a cluster, else embedded; ``backends.choose_backend``). On Kubernetes the
verbs talk to the API server (``cluster.py``, ``services.kubernetes.operations``) and the phalanx-operator and
phalanx-scheduler run the jobs; ``up``, ``down`` and ``status`` are the embedded control plane's only.

``phalanx --server URL [--token-file FILE] VERB`` (or ``$PHALANX_SERVER``/``$PHALANX_TOKEN``, or the config file
``~/.config/phalanx/config.yaml``; ``entrypoints.remote_settings``) runs the verbs against a Phalanx server's REST
API instead (``remote.py``); the local state directory and its Unix socket stay the default.

Exit codes: 0 success; 1 the job failed (``run``) or an operation failed (e.g. no such job); 2 invalid input
(a spec error, a file that cannot be read, an unknown resource kind); 3 the job was halted while ``run``
followed it; 4 the state store cannot be used for now (locked by another process past the 10 s busy timeout,
or its disk is full): nothing was done, try again.

Imports of the model, store and services happen inside the commands: ``phalanx run`` talks to a running
control plane through its local API and loads none of them, which keeps its own start-up to the cost of
typer and rich.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from phalanx.entrypoints.cli import control_plane, convert, history, install, jobs, server
from phalanx.entrypoints.cli.caches import cache_app
from phalanx.entrypoints.cli.datasets import dataset_app
from phalanx.entrypoints.cli.sim import sim_app
from phalanx.entrypoints.cli.sim_fgd import fgd as _fgd  # noqa: F401  (registers `phalanx sim fgd`)
from phalanx.entrypoints.cli.sweeps import sweep_app
from phalanx.entrypoints.cli.tokens import token_app

app = typer.Typer(
    name="phalanx",
    help="Run ML training jobs: gang-scheduled, pinned to CPUs and GPUs, with a lifecycle you can read.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _global_options(
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar="PHALANX_SERVER",
            help="A Phalanx server's URL (phalanx server), e.g. http://127.0.0.1:8080: the verbs run there, with the "
            "token of --token-file, $PHALANX_TOKEN or ~/.config/phalanx/config.yaml (default: the local state "
            "directory; a config file's server counts).",
            show_default=False,
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option("--token-file", help="A file holding the server's token (mode 0600).", show_default=False),
    ] = None,
) -> None:
    """Run ML training jobs: gang-scheduled, pinned to CPUs and GPUs, with a lifecycle you can read."""
    from phalanx.entrypoints.cli.options import GLOBAL

    GLOBAL.server = server or None
    GLOBAL.token_file = token_file


for command in (
    jobs.run,
    jobs.submit,
    jobs.get,
    jobs.describe,
    jobs.logs,
    jobs.halt,
    jobs.resume,
    jobs.delete,
    jobs.explain,
    convert.convert,
    control_plane.up,
    control_plane.down,
    control_plane.status,
    server.server,
    history.history,
    install.install,
):
    app.command()(command)
app.add_typer(sim_app, name="sim")
app.add_typer(dataset_app, name="dataset")
app.add_typer(cache_app, name="cache")
app.add_typer(sweep_app, name="sweep")
app.add_typer(token_app, name="token")


_built: Any = None  # the click command typer makes of ``app``; see built_command


def built_command() -> Any:
    """The click command of ``app``, made once.

    ``app()`` makes it on every call, which reads the signature and type hints of every command: about half of
    what a preloaded command costs. The preloaded process makes it before it forks.
    """
    global _built
    if _built is None:
        _built = typer.main.get_command(app)
    return _built


def run_app() -> None:
    """``app()`` from the command made once (pretty exceptions are off, so typer's hook would change nothing)."""
    built_command()()


def main() -> None:
    """Entry point of ``python -m phalanx.entrypoints.cli.main`` (the console script uses the launcher)."""
    from phalanx.entrypoints.cli.launcher import main as launch

    launch()


if __name__ == "__main__":
    main()
