"""Phalanx: declare ML jobs; Phalanx admits whole gangs, places them well, runs them and tracks them.

The package is layered (see docs/architecture.md): ``model`` (API objects) → ``core`` (pure logic) →
``adapters`` (the outside world) → ``services`` (loops) → ``entrypoints`` (CLI, SDK).
"""

__version__ = "0.1.0"
