"""``--tls-cert``/``--tls-key``: a certificate and its key are served; each bad file is one sentence naming its option.

The files are real PEM files made in the test (``support.certificates``), read by the ``ssl`` module as uvicorn
will read them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from phalanx.entrypoints.cli.main import app
from phalanx.entrypoints.server.tls import TlsError, TlsFiles, tls_files
from support.certificates import Certificate, make_certificate


@pytest.fixture
def pair(tmp_path: Path) -> Certificate:
    return make_certificate(tmp_path / "tls")


def refusal(cert: Path | None, key: Path | None) -> str:
    with pytest.raises(TlsError) as caught:
        tls_files(cert, key)
    return str(caught.value)


def test_a_certificate_and_its_key_are_accepted(pair: Certificate) -> None:
    assert tls_files(pair.cert, pair.key) == TlsFiles(pair.cert, pair.key)
    assert tls_files(None, None) is None


def test_one_without_the_other_is_refused(pair: Certificate) -> None:
    assert refusal(pair.cert, None) == (
        "--tls-cert needs --tls-key too: give the certificate and its private key together"
    )
    assert refusal(None, pair.key).startswith("--tls-key needs --tls-cert too")


def test_a_missing_file_is_named_with_its_option(pair: Certificate, tmp_path: Path) -> None:
    assert (
        refusal(tmp_path / "nope.crt", pair.key)
        == f"--tls-cert {tmp_path / 'nope.crt'}: no such file; give the path of a PEM file"
    )
    assert refusal(pair.cert, tmp_path / "nope.key").startswith(f"--tls-key {tmp_path / 'nope.key'}: no such file")


def test_a_file_that_is_no_certificate_is_named(pair: Certificate, tmp_path: Path) -> None:
    # The key given as the certificate: a PEM file, just not a certificate.
    assert "is not a PEM certificate" in refusal(pair.key, pair.key)
    assert refusal(pair.key, pair.key).startswith(f"--tls-cert {pair.key}")


def test_a_key_that_is_no_key_or_another_certificates_is_named(pair: Certificate, tmp_path: Path) -> None:
    assert refusal(pair.cert, pair.cert).startswith(f"--tls-key {pair.cert} is not an unencrypted PEM private key")
    other = make_certificate(tmp_path / "other")
    assert refusal(pair.cert, other.key) == (
        f"--tls-key {other.key} is not the private key of --tls-cert {pair.cert}; give the key the certificate "
        "was made for"
    )


def test_an_encrypted_key_is_refused_rather_than_prompted_for(pair: Certificate, tmp_path: Path) -> None:
    serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization")
    key = serialization.load_pem_private_key(pair.key.read_bytes(), password=None)
    locked = tmp_path / "locked.key"
    locked.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    assert refusal(pair.cert, locked).startswith(f"--tls-key {locked} is encrypted")


def test_the_command_refuses_a_bad_pair_before_it_touches_anything(pair: Certificate, tmp_path: Path) -> None:
    state = tmp_path / "state"
    args = ["server", "--listen", "0.0.0.0:8443", "--tls-cert", str(pair.cert), "--tls-key", str(pair.cert)]
    result = CliRunner().invoke(app, [*args, "--state-dir", str(state)])
    assert result.exit_code == 2
    assert "--tls-key" in result.output and "is not an unencrypted PEM private key" in result.output
    assert "Traceback" not in result.output
    assert not state.exists()
