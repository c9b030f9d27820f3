"""Which backend a command uses: --backend, then PHALANX_BACKEND, then a named cluster, then embedded."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.main

from phalanx.entrypoints.cli.backends import (
    KUBERNETES_OPTIONS,
    Backend,
    BackendChoice,
    BackendError,
    backend_arguments,
    choose_backend,
    wants_kubernetes,
)
from phalanx.entrypoints.cli.main import app

EMBEDDED = BackendChoice(Backend.EMBEDDED)


def test_nothing_given_is_the_embedded_backend() -> None:
    assert choose_backend(None, {}) == EMBEDDED
    assert choose_backend(None, {"PHALANX_BACKEND": "  "}) == EMBEDDED


def test_the_flag_wins_over_the_environment() -> None:
    assert choose_backend("kubernetes", {"PHALANX_BACKEND": "embedded"}).backend is Backend.KUBERNETES
    assert choose_backend("embedded", {"PHALANX_BACKEND": "kubernetes"}) == EMBEDDED


@pytest.mark.parametrize("value", ["kubernetes", "Kubernetes", " kubernetes "])
def test_the_environment_selects_kubernetes(value: str) -> None:
    choice = choose_backend(None, {"PHALANX_BACKEND": value})
    assert choice.kubernetes
    assert (choice.kubeconfig, choice.context) == (None, None)


def test_the_environment_may_say_embedded_explicitly() -> None:
    assert choose_backend(None, {"PHALANX_BACKEND": "embedded"}) == EMBEDDED


@pytest.mark.parametrize(
    ("kubeconfig", "context"), [(Path("admin.kubeconfig"), None), (None, "prod"), ("k.yaml", "prod")]
)
def test_naming_a_cluster_selects_kubernetes(kubeconfig: Path | str | None, context: str | None) -> None:
    choice = choose_backend(None, {}, kubeconfig=kubeconfig, context=context)
    assert choice.backend is Backend.KUBERNETES
    assert choice.kubeconfig == (Path(kubeconfig) if kubeconfig else None)
    assert choice.context == context


def test_the_environment_keeps_the_cluster_options() -> None:
    choice = choose_backend(None, {"PHALANX_BACKEND": "kubernetes"}, context="prod")
    assert (choice.backend, choice.context) == (Backend.KUBERNETES, "prod")


@pytest.mark.parametrize(
    ("flag", "env", "source"),
    [("docker", {}, "--backend"), (None, {"PHALANX_BACKEND": "k8s"}, "PHALANX_BACKEND")],
)
def test_an_unknown_backend_names_where_it_came_from_and_the_known_ones(
    flag: str | None, env: dict[str, str], source: str
) -> None:
    with pytest.raises(BackendError, match=rf"^{source}: unknown backend .*; use one of embedded, kubernetes"):
        choose_backend(flag, env)


@pytest.mark.parametrize(
    ("flag", "env"), [("embedded", {}), (None, {"PHALANX_BACKEND": "embedded"})], ids=["flag", "environment"]
)
def test_a_cluster_for_the_embedded_backend_is_a_contradiction(flag: str | None, env: dict[str, str]) -> None:
    with pytest.raises(BackendError, match=r"--context selects a Kubernetes cluster, but .* chose the embedded"):
        choose_backend(flag, env, context="prod")
    with pytest.raises(BackendError, match="--kubeconfig and --context select"):
        choose_backend(flag, env, kubeconfig="k.yaml", context="prod")


def test_backend_arguments_reads_both_spellings_and_stops_at_a_double_dash() -> None:
    argv = ["run", "job.yaml", "--backend", "kubernetes", "--context=prod", "--", "--kubeconfig", "x"]
    assert backend_arguments(argv) == {"--backend": "kubernetes", "--context": "prod"}
    assert backend_arguments(["get", "jobs", "--kubeconfig"]) == {"--kubeconfig": ""}


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["run", "job.yaml"], {}, False),
        (["run", "job.yaml"], {"PHALANX_BACKEND": "kubernetes"}, True),
        (["run", "job.yaml", "--backend", "embedded"], {"PHALANX_BACKEND": "kubernetes"}, False),
        (["run", "job.yaml", "--context", "prod"], {}, True),
        (["run", "job.yaml", "--kubeconfig=k.yaml"], {}, True),
        (["run", "job.yaml", "--backend", "nonsense"], {}, True),  # typer reports it
        (["run", "job.yaml", "--backend", "embedded", "--context", "prod"], {}, True),  # so does this
    ],
)
def test_wants_kubernetes_tells_the_launcher_when_typer_must_run(
    argv: list[str], env: dict[str, str], expected: bool
) -> None:
    assert wants_kubernetes(argv, env) is expected


JOB_VERBS = ("run", "submit", "get", "describe", "logs", "halt", "resume", "delete", "explain")


@pytest.mark.parametrize("verb", [*JOB_VERBS, "up", "down", "status"])
def test_every_verb_takes_the_backend_options(verb: str) -> None:
    command = typer.main.get_command(app).commands[verb]  # type: ignore[attr-defined]
    options = {o for param in command.params for o in param.opts}
    assert set(KUBERNETES_OPTIONS) <= options
