"""The ``phalanx`` console script: `phalanx run FILE` and `submit FILE` on a fast path, the rest through typer.

The fast path is for the embedded runtime only; a run on a cluster (``--backend kubernetes``,
``PHALANX_BACKEND=kubernetes``, ``--context``/``--kubeconfig``) goes to the typer command.

When the state directory's control plane runs, it keeps a preloaded process with every module of the commands
imported (``preload``): the launcher hands most verbs to it (``preload_client``) and only waits for the exit
status, so a verb costs a fork there instead of imports here. Without it, everything below applies.

`run` is the command people time against running their script directly, and typer alone costs about
120 ms to start here (it imports pydantic to coerce parameters). The launcher parses `run`'s few options
with argparse and calls ``running.run_job``, the very function the typer command calls. Anything it does not
recognise (``--help``, a typo, another command) goes to the typer app, which owns the documentation and the
error messages. ``tests/unit/cli/test_launcher.py`` checks that both accept the same options. `submit` takes
the same way when a control plane runs (``fast_submit``); without one, typer's command stores the objects.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from phalanx.entrypoints.cli.local_api import ApiError  # standard library only, like this module

RUN_OPTIONS = (
    "--state-dir",
    "--namespace",
    "-n",
    "--detach",
    "-d",
    "--logs",
    "--no-logs",
    "--inventory",
    "--filename",
    "-f",
)
#: `run` options the launcher leaves to typer (an unknown option declines): ``--stand-in`` is checked with the model.
TYPER_RUN_OPTIONS = ("--stand-in",)
SUBMIT_OPTIONS = ("--state-dir", "--namespace", "-n", "--filename", "-f")
#: `submit` options the launcher leaves to typer: a dry run prints the defaulted objects, which needs the model.
TYPER_SUBMIT_OPTIONS = ("--dry-run", "--stand-in")


class _DeclinedError(Exception):
    """The arguments are not a plain `run`; typer takes them."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _DeclinedError(message)


def parse_run(argv: list[str]) -> argparse.Namespace:
    """Parse `run FILE [options]` exactly as the typer command does, or raise _DeclinedError.

    Raises:
        _DeclinedError: help was asked for, or the arguments are not a valid `run` invocation.
    """
    if not argv or argv[0] != "run" or any(a in ("--help", "-h") for a in argv):
        raise _DeclinedError("not a plain run")
    if any(a in ("-f", "--filename") or a.startswith("--filename=") for a in argv):
        raise _DeclinedError("the file given as -f: the typer command takes it that way")
    from phalanx.entrypoints.cli.backends import wants_kubernetes  # standard library only: cheap

    if wants_kubernetes(argv[1:], os.environ):
        raise _DeclinedError("a run on a cluster: the typer command handles the kubernetes backend")
    from phalanx.entrypoints.remote_settings import SERVER_ENV, config_path  # standard library only too

    if os.environ.get(SERVER_ENV, "").strip() or config_path(os.environ).exists():
        raise _DeclinedError("a server may be named: the typer command reads --server, its env and config file")
    parser = _Parser(prog="phalanx run", add_help=False)
    parser.add_argument("file", type=Path)
    parser.add_argument("--state-dir", type=Path, default=os.environ.get("PHALANX_HOME") or None)
    parser.add_argument("--namespace", "-n", default="default")
    parser.add_argument("--detach", "-d", action="store_true")
    parser.add_argument("--logs", dest="logs", action="store_true", default=True)
    parser.add_argument("--no-logs", dest="logs", action="store_false")
    parser.add_argument("--inventory", type=Path, default=None)
    return parser.parse_args(argv[1:])


def parse_submit(argv: list[str]) -> argparse.Namespace:
    """Parse `submit FILE` or `submit -f FILE` [options] as the typer command does, or raise _DeclinedError.

    Raises:
        _DeclinedError: help was asked for, a backend or server may be named, an option typer keeps, or the
            arguments are not a valid `submit` invocation (typer then says what is wrong).
    """
    if not argv or argv[0] != "submit" or any(a in ("--help", "-h") for a in argv):
        raise _DeclinedError("not a plain submit")
    from phalanx.entrypoints.cli.backends import wants_kubernetes

    if wants_kubernetes(argv[1:], os.environ):
        raise _DeclinedError("a submit to a cluster: the typer command handles the kubernetes backend")
    from phalanx.entrypoints.remote_settings import SERVER_ENV, config_path

    if os.environ.get(SERVER_ENV, "").strip() or config_path(os.environ).exists():
        raise _DeclinedError("a server may be named: the typer command reads --server, its env and config file")
    parser = _Parser(prog="phalanx submit", add_help=False)
    parser.add_argument("file", type=Path, nargs="?")
    parser.add_argument("--filename", "-f", type=Path, default=None)
    parser.add_argument("--state-dir", type=Path, default=os.environ.get("PHALANX_HOME") or None)
    parser.add_argument("--namespace", "-n", default=None)
    args = parser.parse_args(argv[1:])
    if (args.file is None) == (args.filename is None):
        raise _DeclinedError("the file given twice or not at all: the typer command says so")
    args.file = args.file or args.filename
    return args


def main() -> None:
    """Run the command in the state directory's preloaded process, else here; exit without finalisation."""
    from phalanx.entrypoints.cli.preload_client import forward

    argv = sys.argv[1:]
    code = forward(argv)
    if code is None:
        code = dispatch(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def dispatch(argv: list[str]) -> int:
    """Run one command in this process (a fast path, else typer) and return its exit code; output is not flushed.

    ``sys.argv`` must hold the same arguments: typer reads them from there.
    """
    code: int
    try:
        try:
            args = parse_run(argv)
        except _DeclinedError:
            code = _submit_or_typer(argv)
        else:
            from phalanx.entrypoints.cli.running import run_job

            state_dir = Path(args.state_dir) if args.state_dir else None
            code = run_job(
                args.file,
                state_dir=state_dir,
                namespace=args.namespace,
                detach=args.detach,
                logs=args.logs,
                inventory=args.inventory,
            )
    except ApiError as err:
        # The commands turn the API's answers into sentences; one that slips through still gets no traceback.
        from phalanx.entrypoints.cli.output import fail

        try:
            fail(f"the control plane answered: {err}")
        except SystemExit as failed:
            code = int(failed.code or 1)
    except SystemExit as exit_:
        if isinstance(exit_.code, str):
            sys.stderr.write(exit_.code + "\n")
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    return code


def _submit_or_typer(argv: list[str]) -> int:
    """A plain `submit` through the running control plane; anything else, or no control plane, through typer."""
    try:
        args = parse_submit(argv)
    except _DeclinedError:
        pass
    else:
        from phalanx.entrypoints.cli.fast_submit import submit_file

        state_dir = Path(args.state_dir) if args.state_dir else None
        done = submit_file(args.file, state_dir=state_dir, namespace=args.namespace)
        if done is not None:
            return done
    from phalanx.entrypoints.cli.main import run_app

    run_app()
    return 0
