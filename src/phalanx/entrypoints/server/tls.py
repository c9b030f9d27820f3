"""The server's TLS certificate and key (``--tls-cert``, ``--tls-key``), checked before the server starts.

uvicorn reads the files itself once it starts, and a bad file then ends it with OpenSSL's words (``PEM lib``)
and a traceback. ``check_tls`` reads them first, the way uvicorn will (an ``ssl`` context), and turns each
failure into one sentence naming the option and the file: missing, not readable, not a PEM certificate, not
its private key.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path


class TlsError(ValueError):
    """A ``--tls-cert``/``--tls-key`` pair the server cannot use; the message names the option and the fix."""


@dataclass(frozen=True)
class TlsFiles:
    """A PEM certificate (its chain may follow it in the file) and the PEM private key it was made for."""

    cert: Path
    key: Path


def tls_files(cert: Path | None, key: Path | None) -> TlsFiles | None:
    """The pair given on the command line, None when neither is, each checked (``check_tls``).

    Raises:
        TlsError: one of the two alone, or a file the server cannot use.
    """
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given, missing = ("--tls-cert", "--tls-key") if key is None else ("--tls-key", "--tls-cert")
        raise TlsError(f"{given} needs {missing} too: give the certificate and its private key together")
    files = TlsFiles(cert, key)
    check_tls(files)
    return files


def check_tls(files: TlsFiles) -> None:
    """Load the certificate, then the pair, as the server will.

    Raises:
        TlsError: naming the option whose file is missing, unreadable or not what it should be.
    """
    for option, path in (("--tls-cert", files.cert), ("--tls-key", files.key)):
        if not path.is_file():
            raise TlsError(f"{option} {path}: no such file; give the path of a PEM file")
        try:
            path.read_bytes()
        except OSError as err:
            raise TlsError(f"{option} {path} cannot be read ({err.strerror}); check its permissions") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # Read as a CA file: this parses the certificate alone, so a failure here is the certificate's.
        context.load_verify_locations(cafile=str(files.cert))
    except (ssl.SSLError, ValueError):
        raise TlsError(
            f"--tls-cert {files.cert} is not a PEM certificate (-----BEGIN CERTIFICATE-----); give the server's "
            "certificate"
        ) from None
    try:
        # A passphrase callback, so an encrypted key is refused here rather than prompted for on the terminal.
        context.load_cert_chain(certfile=str(files.cert), keyfile=str(files.key), password=_no_passphrase)
    except _EncryptedKeyError:
        raise TlsError(
            f"--tls-key {files.key} is encrypted, and the server cannot ask for its passphrase; give it an "
            "unencrypted copy (openssl pkey -in KEY -out PLAIN), readable by you only"
        ) from None
    except ssl.SSLError as err:
        if "KEY_VALUES_MISMATCH" in str(err):
            raise TlsError(
                f"--tls-key {files.key} is not the private key of --tls-cert {files.cert}; give the key the "
                "certificate was made for"
            ) from None
        raise TlsError(
            f"--tls-key {files.key} is not an unencrypted PEM private key (-----BEGIN PRIVATE KEY-----); give the "
            "certificate's key, without a passphrase"
        ) from None


class _EncryptedKeyError(Exception):
    """The key file asked for a passphrase."""


def _no_passphrase() -> bytes:
    raise _EncryptedKeyError
