"""One lock for the heavy optional libraries a long-lived process imports on first use, from its threads.

Python locks a module only while it imports it. A library whose modules import each other in a circle
(SQLAlchemy, and Alembic and Optuna through it) breaks when two threads import it at once: one of them finds a
module the other has half-run and fails with "partially initialized module" or ``_DeadlockError``. A control plane
hit this at its start: the job history opened SQLAlchemy and Alembic on its own thread while a SQL Dataset's
materialisation imported SQLAlchemy on another, and the Dataset failed.

Every place that lazily imports such a library in a process with threads does it inside ``serially()``, and
also what first runs the library's own lazy imports (creating an engine loads its dialect and driver). The lock
is reentrant, so an import under it may take it again. Take it only inside a function, never at a module's top
level: a thread importing that module would hold the module's lock while waiting for this one.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_LOCK = threading.RLock()


@contextlib.contextmanager
def serially() -> Iterator[None]:
    """Hold the process's lazy-import lock: the heavy imports and first uses under it run one thread at a time."""
    with _LOCK:
        yield
