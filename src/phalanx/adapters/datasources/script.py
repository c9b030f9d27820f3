"""Script sources: a command that writes the dataset.

The command runs with its working directory and ``$PHALANX_DATASET_OUTPUT`` set to the (temporary) output
directory, and ``$PHALANX_DATASET_SOURCE_DIR`` set to ``base_dir``. Because the working directory is the output,
relative arguments that name an existing file under ``base_dir`` (``python make.py``) are passed as absolute
paths. It runs without a shell, for at most ``timeout_s`` seconds; stdout and stderr go to temporary files
outside the dataset. It fails when it exits non-zero (the code and the end of its stderr are reported), writes
nothing, or leaves a symbolic link that points outside its output.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import shutil
import signal
import subprocess  # nosec B404  # runs a known program without a shell
import tempfile
from pathlib import Path
from typing import IO

from phalanx.adapters.datasources._types import SourceError, SourceRequest, field_of
from phalanx.adapters.datasources.hashing import list_files
from phalanx.adapters.datasources.paths import has_parent_reference
from phalanx.adapters.datasources.staging import Progress, WriteBudget

STDERR_TAIL = 2000


def _tail(handle: IO[bytes]) -> str:
    handle.flush()
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    handle.seek(max(0, size - STDERR_TAIL))
    text = handle.read().decode("utf-8", "replace").strip()
    return ("…" + text) if size > STDERR_TAIL else text


def _argv(command: tuple[str, ...], base_dir: Path | None, field: str) -> list[str]:
    if not command or not command[0].strip():
        raise SourceError(field, "a script source needs a command, e.g. [python, make_dataset.py]")
    base = base_dir if base_dir is not None else Path.cwd()
    argv: list[str] = []
    for arg in command:
        if arg and not arg.startswith("-") and not os.path.isabs(arg) and (base / arg).is_file():
            if has_parent_reference(arg):
                raise SourceError(field, f"argument {arg!r} has a '..' component; name files inside {base}")
            arg = str((base / arg).absolute())
        argv.append(arg)
    program = argv[0]
    if os.sep not in program and shutil.which(program) is None:
        raise SourceError(field, f"command {program!r} was not found on PATH; install it or give its full path")
    return argv


def run_script(
    request: SourceRequest,
    staging: Path,
    *,
    base_dir: Path | None,
    budget: WriteBudget,
    progress: Progress | None,
    timeout_s: float,
) -> str:
    """Run the command of ``request`` to write the dataset into ``staging``; returns the lineage line."""
    field = field_of(request, "command")
    argv = _argv(request.command, base_dir, field)
    shown = shlex.join(request.command)
    env = dict(os.environ)
    env["PHALANX_DATASET_OUTPUT"] = str(staging)
    env["PHALANX_DATASET_SOURCE_DIR"] = str(base_dir if base_dir is not None else Path.cwd())
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(  # the user's own command, without a shell  # nosec B603  # a list of arguments, no shell
                argv, cwd=staging, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
            )
        except OSError as exc:
            raise SourceError(field, f"cannot start script {shown} ({exc.strerror or exc}); check the command") from exc
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise SourceError(
                field, f"script {shown} ran past {timeout_s:g}s and was stopped; make it faster or raise the timeout"
            ) from exc
        if code != 0:
            tail = _tail(err)
            if "No space left on device" in tail:
                raise OSError(errno.ENOSPC, f"script {shown} reported: No space left on device")
            detail = f"; its stderr ends with:\n{tail}" if tail else " and wrote nothing to stderr"
            raise SourceError(field, f"script {shown} exited with code {code}{detail}")
    real = staging.resolve()
    for entry in staging.rglob("*"):
        if entry.is_symlink() and not entry.resolve().is_relative_to(real):
            rel = entry.relative_to(staging)
            raise SourceError(
                field, f"script {shown} left a link {rel} pointing outside its output; write the file itself"
            )
    files = list_files(staging)
    if not files:
        raise SourceError(
            field, f"script {shown} exited 0 but wrote no files; write the dataset into $PHALANX_DATASET_OUTPUT"
        )
    total = sum(path.stat().st_size for _, path in files)
    budget.charge(total)
    if progress is not None:
        progress(total, total)
    return f"script: {shown}"
