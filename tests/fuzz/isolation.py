"""Run one hostile input in a forked child with a time and memory limit, so a bomb cannot take the tier down.

A YAML alias bomb made ``submit --dry-run`` run past 90 s and end in a MemoryError (issue 13, defect 5). In the
test process such an input would hang the gate or exhaust the machine; in a forked child it is a verdict:
``hang`` after the time limit, or ``crash`` when the child dies. Forking keeps the parent's imports, so a case
costs milliseconds, not an interpreter start.
"""

from __future__ import annotations

import multiprocessing
import resource
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Address space a child may use: far above what a refused file needs, far below what a bomb would take.
MEMORY_LIMIT = 3 * 2**30


@dataclass(frozen=True)
class Outcome:
    """What happened to one input: ``returned`` (with ``value``), ``raised`` (with ``error``), ``hang``, ``crash``."""

    kind: str
    value: Any = None
    error: str = ""


def _child(connection: Any, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    try:
        connection.send(Outcome("returned", value=function(*args)))
    except BaseException as err:  # every escape is a finding, reported to the parent
        connection.send(Outcome("raised", value=type(err).__name__, error=traceback.format_exc()))
    finally:
        connection.close()


def isolated(function: Callable[..., Any], *args: Any, timeout: float) -> Outcome:
    """``function(*args)`` in a forked child; its return value must pickle."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(sender, function, args), daemon=True)
    child.start()
    sender.close()
    try:
        if receiver.poll(timeout):
            try:
                return receiver.recv()
            except EOFError:
                pass
        else:
            child.kill()
            return Outcome("hang", error=f"no answer within {timeout:.0f}s")
    finally:
        child.join(5)
        if child.is_alive():
            child.kill()
            child.join(5)
        receiver.close()
    return Outcome("crash", error=f"the child died with exit code {child.exitcode}")
