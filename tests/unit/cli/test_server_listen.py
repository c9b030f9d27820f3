"""``phalanx server --listen``: HOST:PORT; beyond loopback only with TLS and tokens; the rest refused with the fix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from phalanx.entrypoints.cli.main import app
from phalanx.entrypoints.server.serving import ListenError, listen_address


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("127.0.0.2:1", ("127.0.0.2", 1)),
        ("localhost:65535", ("localhost", 65535)),
        ("[::1]:9000", ("::1", 9000)),
    ],
    ids=["ipv4", "other-loopback", "localhost", "ipv6"],
)
def test_loopback_addresses_are_served(text: str, address: tuple[str, int]) -> None:
    assert listen_address(text) == address


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("0.0.0.0:8080", "0.0.0.0 is not a loopback address"),
        ("192.168.1.4:8080", "give --tls-cert and --tls-key"),
        ("[::]:8080", ":: is not a loopback address"),
        ("example.org:8080", "example.org is not a loopback address"),
        ("8080", "is not HOST:PORT"),
        ("127.0.0.1:", "is not HOST:PORT"),
        ("127.0.0.1:0", "from 1 to 65535"),
        ("127.0.0.1:70000", "from 1 to 65535"),
        ("127.0.0.1:http", "from 1 to 65535"),
    ],
    ids=["any", "lan", "any-ipv6", "a-name", "port-only", "no-port", "zero", "too-high", "not-a-number"],
)
def test_other_addresses_are_refused_with_the_fix(text: str, words: str) -> None:
    with pytest.raises(ListenError) as caught:
        listen_address(text)
    assert words in str(caught.value)
    assert "--listen" in str(caught.value)


@pytest.mark.parametrize("text", ["0.0.0.0:8443", "192.168.1.4:8443", "[::]:8443", "api.example.org:8443"])
def test_any_address_is_served_with_tls_and_tokens(text: str) -> None:
    host = text.rpartition(":")[0].strip("[]")
    assert listen_address(text, tls=True) == (host, 8443)


def test_no_auth_beyond_loopback_is_refused_even_with_tls() -> None:
    with pytest.raises(ListenError) as caught:
        listen_address("0.0.0.0:8443", tls=True, tokens=False)
    assert "--no-auth serves on a loopback address only" in str(caught.value)
    assert listen_address("127.0.0.1:8443", tls=True, tokens=False) == ("127.0.0.1", 8443)


def test_the_command_refuses_a_public_address_before_it_touches_anything(tmp_path: Path) -> None:
    state = tmp_path / "state"
    result = CliRunner().invoke(app, ["server", "--listen", "0.0.0.0:8080", "--state-dir", str(state)])
    assert result.exit_code == 2
    assert "0.0.0.0 is not a loopback address" in result.output
    assert not state.exists()


def test_the_command_names_the_extra_when_fastapi_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fastapi", None)  # what an install without the server extra imports
    result = CliRunner().invoke(app, ["server", "--state-dir", str(tmp_path / "state")])
    assert result.exit_code == 2
    assert "pip install 'phalanx[server]'" in result.output
