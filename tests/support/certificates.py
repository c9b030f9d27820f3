"""A self-signed certificate for 127.0.0.1 and localhost, made in the test: for a server's TLS, and its client's CA.

Made with the ``cryptography`` package when it is installed, else with the ``openssl`` command; either way the
certificate is its own CA, so a client that trusts it (``httpx.Client(verify=ssl context)``) verifies the server
for real rather than turning verification off.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certificate:
    """The PEM files of one self-signed server certificate (also the CA that verifies it)."""

    cert: Path
    key: Path


def make_certificate(directory: Path, *, name: str = "server") -> Certificate:
    """``name.crt`` and ``name.key`` in ``directory``, valid for 127.0.0.1, ::1 and localhost for a day."""
    directory.mkdir(parents=True, exist_ok=True)
    made = Certificate(directory / f"{name}.crt", directory / f"{name}.key")
    try:
        _with_cryptography(made)
    except ImportError:
        _with_openssl(made)
    return made


def _with_cryptography(made: Certificate) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    names = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    made.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    made.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def _with_openssl(made: Certificate) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("making a test certificate needs the cryptography package or the openssl command")
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-days", "1", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1",
            "-keyout", str(made.key), "-out", str(made.cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
