"""Which backend a command talks to: the embedded runtime (a local state directory) or a Kubernetes cluster.

The rules, first match wins:

1. ``--backend embedded|kubernetes``;
2. the environment variable ``PHALANX_BACKEND``;
3. ``kubernetes`` when ``--context`` or ``--kubeconfig`` is given (naming a cluster is choosing one);
4. ``embedded``.

``--context``/``--kubeconfig`` with the embedded backend chosen explicitly is a contradiction and an error.
Standard library only: the launcher (``phalanx run``'s fast path) may ask ``wants_kubernetes`` before it
decides whether to hand the command to typer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from phalanx.entrypoints.remote_settings import ServerSettings

BACKEND_ENV = "PHALANX_BACKEND"
# The options that select (or configure) the kubernetes backend, on every verb.
KUBERNETES_OPTIONS = ("--backend", "--kubeconfig", "--context")


class Backend(StrEnum):
    """Where jobs run."""

    EMBEDDED = "embedded"
    KUBERNETES = "kubernetes"


class BackendError(ValueError):
    """The backend options contradict each other or name no backend (a usage error)."""


@dataclass(frozen=True)
class BackendChoice:
    """The backend a command uses and, for kubernetes, the kubeconfig and context that select the cluster."""

    backend: Backend
    kubeconfig: Path | None = None
    context: str | None = None
    server: ServerSettings | None = None
    """A Phalanx server the command talks to instead (``--server``, ``$PHALANX_SERVER``, the config file)."""

    @property
    def kubernetes(self) -> bool:
        """True for the kubernetes backend."""
        return self.server is None and self.backend is Backend.KUBERNETES

    @property
    def remote(self) -> bool:
        """True when the command talks to a Phalanx server (``cli.remote``)."""
        return self.server is not None


def choose_backend(
    flag: str | None,
    env: Mapping[str, str],
    *,
    kubeconfig: Path | str | None = None,
    context: str | None = None,
) -> BackendChoice:
    """Apply the rules of the module docstring.

    Args:
        flag: the ``--backend`` value, or None.
        env: the environment (``os.environ``), for ``PHALANX_BACKEND``.
        kubeconfig: the ``--kubeconfig`` value, or None.
        context: the ``--context`` value, or None.

    Raises:
        BackendError: an unknown backend, or a cluster named for the embedded backend.
    """
    kubeconfig_path = Path(kubeconfig) if kubeconfig else None
    names_cluster = bool(kubeconfig_path or context)
    if flag:
        source, value = "--backend", str(flag)
    elif env.get(BACKEND_ENV, "").strip():
        source, value = BACKEND_ENV, env[BACKEND_ENV]
    else:
        backend = Backend.KUBERNETES if names_cluster else Backend.EMBEDDED
        return BackendChoice(backend, kubeconfig_path, context or None)
    try:
        backend = Backend(value.strip().lower())
    except ValueError:
        known = ", ".join(b.value for b in Backend)
        raise BackendError(f"{source}: unknown backend {value!r}; use one of {known}") from None
    if backend is Backend.EMBEDDED and names_cluster:
        given = [option for option, value in (("--kubeconfig", kubeconfig_path), ("--context", context)) if value]
        verb = "select" if len(given) > 1 else "selects"
        raise BackendError(
            f"{' and '.join(given)} {verb} a Kubernetes cluster, but {source} chose the embedded backend; drop "
            f"{' and '.join(given)}, or use --backend kubernetes"
        )
    return BackendChoice(backend, kubeconfig_path, context or None)


def backend_arguments(argv: Sequence[str]) -> dict[str, str]:
    """The values of ``--backend``, ``--kubeconfig`` and ``--context`` in a command line.

    Both ``--x v`` and ``--x=v`` are read; nothing after ``--`` is an option.
    """
    found: dict[str, str] = {}
    position = 0
    while position < len(argv):
        argument = argv[position]
        if argument == "--":
            break
        name, equals, value = argument.partition("=")
        if name in KUBERNETES_OPTIONS:
            if not equals:
                position += 1
                value = argv[position] if position < len(argv) else ""
            found[name] = value
        position += 1
    return found


def wants_kubernetes(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    """True when a command line (without the program name) selects the kubernetes backend.

    A contradiction or an unknown backend also answers True: the typer command, which reports it, must see it.
    """
    found = backend_arguments(argv)
    try:
        choice = choose_backend(
            found.get("--backend"), env, kubeconfig=found.get("--kubeconfig"), context=found.get("--context")
        )
    except BackendError:
        return True
    return choice.kubernetes
