"""Phalanx: declare ML jobs; Phalanx admits whole gangs, places them well, runs them and tracks them.

The package is layered (see docs/architecture.md): ``model`` (API objects) → ``core`` (pure logic) →
``adapters`` (the outside world) → ``services`` (loops) → ``entrypoints`` (CLI, SDK).
"""

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phalanx.entrypoints.client import Client
    from phalanx.services.operations import JobExistsError, OperationError

__all__ = ["Client", "JobExistsError", "OperationError", "__version__"]


def __getattr__(name: str) -> Any:
    # Imported lazily so that `import phalanx` stays cheap for replicas and tools that need only the model.
    if name == "Client":
        from phalanx.entrypoints.client import Client

        return Client
    if name in ("JobExistsError", "OperationError"):  # what the Client's verbs raise
        from phalanx.services import operations

        return getattr(operations, name)
    raise AttributeError(name)
