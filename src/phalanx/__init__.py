"""Phalanx: declare ML jobs; Phalanx admits whole gangs, places them well, runs them and tracks them.

The package is layered (see docs/architecture.md): ``model`` (API objects) → ``core`` (pure logic) →
``adapters`` (the outside world) → ``services`` (loops) → ``entrypoints`` (CLI, SDK).
"""

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phalanx.entrypoints.client import Client

__all__ = ["Client", "__version__"]


def __getattr__(name: str) -> Any:
    # Imported lazily so that `import phalanx` stays cheap for replicas and tools that need only the model.
    if name == "Client":
        from phalanx.entrypoints.client import Client

        return Client
    raise AttributeError(name)
