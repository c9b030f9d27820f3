"""Which server the CLI and the SDK talk to, and with which token: flags, then the environment, then a config file.

The rules, first match wins:

- the server: ``--server URL`` (``Client.remote(server=...)``), ``$PHALANX_SERVER``, the config file's ``server``;
- the token: ``--token-file FILE`` (``token=`` in the SDK), ``$PHALANX_TOKEN``, the config file's ``token``.

The config file is ``$XDG_CONFIG_HOME/phalanx/config.yaml`` (default ``~/.config/phalanx/config.yaml``; another
with ``$PHALANX_CONFIG``), a mapping of ``server`` and ``token``. A file holding a token must be private (mode
0600, as ssh asks of a key): one that others may read is refused with the ``chmod`` that fixes it, never used. A
token file is held to the same rule. No server anywhere: the caller uses the local state directory (the Unix
socket's control plane), as without this module. Standard library only at import (YAML is read when a config
file is): the launcher asks ``config_path`` on ``phalanx run``'s fast path.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SERVER_ENV = "PHALANX_SERVER"
TOKEN_ENV = "PHALANX_TOKEN"  # nosec B105  # a name or message, not a secret
CONFIG_ENV = "PHALANX_CONFIG"
MAX_CONFIG_BYTES = 64 * 1024


class SettingsError(ValueError):
    """A setting that cannot be used: the message names where it came from and the fix."""


@dataclass(frozen=True)
class ServerSettings:
    """A server and the token to send it; ``token_source`` says where the token came from, for messages."""

    server: str
    token: str | None
    token_source: str


def config_path(env: Mapping[str, str]) -> Path:
    """The config file: ``$PHALANX_CONFIG``, else ``$XDG_CONFIG_HOME/phalanx/config.yaml``, else under ``~/.config``."""
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser()
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "phalanx" / "config.yaml"


def server_settings(
    env: Mapping[str, str], *, server: str | None = None, token_file: Path | None = None, token: str | None = None
) -> ServerSettings | None:
    """The server and token the rules of the module choose; None when no server is named anywhere.

    Args:
        env: the environment (``os.environ``).
        server: ``--server``, or the SDK's ``server=``.
        token_file: ``--token-file``.
        token: the SDK's ``token=``.

    Raises:
        SettingsError: a token file or config file that cannot be read, is not private, or says nothing usable.
    """
    config: dict[str, str] | None = None

    def from_config() -> dict[str, str]:
        nonlocal config
        if config is None:
            config = _read_config(config_path(env))
        return config

    chosen = server or env.get(SERVER_ENV, "").strip() or from_config().get("server")
    if not chosen:
        return None
    if token is not None:
        return ServerSettings(chosen, token, "the token given to the client")
    if token_file is not None:
        return ServerSettings(chosen, _read_private(token_file, "--token-file").strip(), f"the token of {token_file}")
    if env.get(TOKEN_ENV, "").strip():
        return ServerSettings(chosen, env[TOKEN_ENV].strip(), f"the token in ${TOKEN_ENV}")
    if from_config().get("token"):
        return ServerSettings(chosen, from_config()["token"], f"the token of {config_path(env)}")
    return ServerSettings(chosen, None, "no token (give one with --token-file, $PHALANX_TOKEN or the config file)")


def _read_config(path: Path) -> dict[str, str]:
    """The config file's ``server`` and ``token`` (empty when there is no file)."""
    if not path.exists():
        return {}
    import yaml  # here: the launcher asks config_path on phalanx run's fast path, which loads no YAML

    text = _read_private(path, "the config file")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise SettingsError(
            f"the config file {path} is not YAML ({err}); write `server: URL` and `token: TOKEN`"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"the config file {path} is not a mapping; write `server: URL` and `token: TOKEN`")
    unknown = sorted(str(key) for key in data if key not in ("server", "token"))
    if unknown:
        raise SettingsError(f"the config file {path}: unknown key {', '.join(unknown)}; it takes server and token")
    found: dict[str, str] = {}
    for key in ("server", "token"):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise SettingsError(f"the config file {path}: {key} must be a string, got {type(value).__name__}")
        if value:
            found[key] = value.strip()
    return found


def _read_private(path: Path, what: str) -> str:
    """A file only its owner may read (a token is in it); refused with the fix otherwise."""
    try:
        info = path.stat()
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            mode = stat.S_IMODE(info.st_mode)
            raise SettingsError(
                f"{what} {path} holds a token and others may read it (mode {mode:04o}); make it private: "
                f"chmod 600 {path}"
            )
        if info.st_size > MAX_CONFIG_BYTES:
            raise SettingsError(f"{what} {path} is {info.st_size} bytes; a token or config file is far smaller")
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise SettingsError(f"{what} {path} cannot be read ({err.strerror or err})") from None
    except UnicodeDecodeError:
        raise SettingsError(f"{what} {path} is not UTF-8 text") from None


def environment() -> Mapping[str, str]:
    """The process environment (one place to read it, for the CLI and the SDK)."""
    return os.environ
