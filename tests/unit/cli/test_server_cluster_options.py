"""``phalanx server`` on a cluster: what it refuses before it serves, each with one sentence and exit 2."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from phalanx.entrypoints.cli.main import app


def test_no_auth_is_refused_on_a_cluster(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["server", "--no-auth", "--kubeconfig", str(tmp_path / "kubeconfig")])
    assert result.exit_code == 2
    assert "--no-auth is for the embedded backend: on a cluster, Kubernetes RBAC decides every request" in result.output


def test_a_kubeconfig_that_cannot_be_read_is_named_with_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "missing.kubeconfig"
    result = CliRunner().invoke(app, ["server", "--kubeconfig", str(missing), "--listen", "127.0.0.1:18089"])
    assert result.exit_code == 2, result.output
    assert f"cannot load a kubeconfig from {missing}" in result.output.replace("\n", "")
    assert "pass --kubeconfig FILE and --context NAME" in result.output.replace("\n", "")
    assert "Traceback" not in result.output


def test_a_history_url_that_is_no_database_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    result = CliRunner().invoke(
        app, ["server", "--state-dir", str(state), "--history-url", "mysql://db/x", "--listen", "127.0.0.1:18089"]
    )
    assert result.exit_code == 2, result.output
    assert "the history is kept in SQLite or PostgreSQL" in result.output.replace("\n", "")
