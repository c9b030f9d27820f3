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
