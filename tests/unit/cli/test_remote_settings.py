"""Which server and token the CLI and SDK use (``entrypoints.remote_settings``): flags, then env, then the config
file; a file holding a token that others may read is refused with the chmod that fixes it, and no server anywhere
leaves the local state directory in charge."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.entrypoints.remote_settings import ServerSettings, SettingsError, server_settings


def config(tmp_path: Path, text: str, mode: int = 0o600) -> dict[str, str]:
    path = tmp_path / "phalanx" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return {"XDG_CONFIG_HOME": str(tmp_path)}


def test_no_server_anywhere_is_none(tmp_path: Path) -> None:
    assert server_settings({"XDG_CONFIG_HOME": str(tmp_path)}) is None


def test_the_flag_beats_the_environment_which_beats_the_config_file(tmp_path: Path) -> None:
    env = config(tmp_path, "server: http://from-config:1\ntoken: t-config\n")
    path = tmp_path / "phalanx" / "config.yaml"
    assert server_settings(env) == ServerSettings("http://from-config:1", "t-config", f"the token of {path}")
    env |= {"PHALANX_SERVER": "http://from-env:2", "PHALANX_TOKEN": "t-env"}
    assert server_settings(env) == ServerSettings("http://from-env:2", "t-env", "the token in $PHALANX_TOKEN")
    token_file = tmp_path / "token"
    token_file.write_text("t-file\n")
    token_file.chmod(0o600)
    chosen = server_settings(env, server="http://flag:3", token_file=token_file)
    assert chosen == ServerSettings("http://flag:3", "t-file", f"the token of {token_file}")


def test_a_server_without_a_token_says_where_one_goes(tmp_path: Path) -> None:
    chosen = server_settings({"XDG_CONFIG_HOME": str(tmp_path)}, server="http://h:1")
    assert chosen is not None and chosen.token is None
    assert "--token-file, $PHALANX_TOKEN or the config file" in chosen.token_source


@pytest.mark.parametrize(
    ("text", "mode", "words"),
    [
        ("server: http://h:1\ntoken: t\n", 0o644, "others may read it (mode 0644); make it private: chmod 600"),
        ("server: [not, a, string]\n", 0o600, "server must be a string, got list"),
        ("servr: http://h:1\n", 0o600, "unknown key servr; it takes server and token"),
        ("- a list\n", 0o600, "is not a mapping"),
        ("server: 'unclosed\n", 0o600, "is not YAML"),
    ],
    ids=["readable by others", "not a string", "misspelt key", "a list", "not YAML"],
)
def test_a_config_file_that_cannot_be_used_is_one_sentence(tmp_path: Path, text: str, mode: int, words: str) -> None:
    with pytest.raises(SettingsError, match=words.replace("(", r"\(").replace(")", r"\)")):
        server_settings(config(tmp_path, text, mode))


def test_a_token_file_others_may_read_is_refused(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t\n")
    token_file.chmod(0o640)
    with pytest.raises(SettingsError, match=f"chmod 600 {token_file}$"):
        server_settings({}, server="http://h:1", token_file=token_file)
    with pytest.raises(SettingsError, match="cannot be read"):
        server_settings({}, server="http://h:1", token_file=tmp_path / "absent")


def test_phalanx_run_leaves_a_named_server_to_typer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The launcher's fast path talks to the local socket: a server in the env or a config file must reach typer."""
    from phalanx.entrypoints.cli import launcher

    monkeypatch.delenv("PHALANX_SERVER", raising=False)
    monkeypatch.delenv("PHALANX_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert launcher.parse_run(["run", "job.yaml"]).file == Path("job.yaml")  # nothing named: the fast path
    monkeypatch.setenv("PHALANX_SERVER", "http://127.0.0.1:8080")
    with pytest.raises(launcher._DeclinedError):
        launcher.parse_run(["run", "job.yaml"])
    monkeypatch.delenv("PHALANX_SERVER")
    config(tmp_path, "server: http://127.0.0.1:8080\n")
    with pytest.raises(launcher._DeclinedError):
        launcher.parse_run(["run", "job.yaml"])


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["get", "jobs", "--context", "kind"], "--context chose a backend, and --server"),
        (["up"], "`phalanx up` is for this machine's local control plane"),
        (["run", "job.yaml", "--stand-in", "img=./p"], "--stand-in names a program of this machine"),
    ],
    ids=["a cluster too", "up", "a stand-in"],
)
def test_what_a_server_cannot_do_is_refused_before_anything_is_sent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: list[str], words: str
) -> None:
    from typer.testing import CliRunner

    from phalanx.entrypoints.cli.main import app

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p").write_text("#!/bin/sh\n")
    (tmp_path / "p").chmod(0o700)
    result = CliRunner().invoke(app, ["--server", "http://127.0.0.1:9", *argv])
    assert result.exit_code == 2, result.output
    assert words in result.output
