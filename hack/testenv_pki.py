"""The test environment's throw-away PKI: a CA, serving and admin client certificates, a kubeconfig using them."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
from pathlib import Path

from testenv_base import TestEnvError


def _openssl(command: str, *extra: str, cwd: Path) -> None:
    """Run ``openssl COMMAND EXTRA...`` (COMMAND is split on spaces; EXTRA arguments are passed as they are)."""
    openssl = shutil.which("openssl")
    if not openssl:
        raise TestEnvError("openssl is not installed: the test environment makes its certificates with it")
    args = [*command.split(), *extra]
    result = subprocess.run([openssl, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise TestEnvError(f"`openssl {' '.join(args)}` failed: {result.stderr.strip()}")


def make_pki(directory: Path, days: int = 7) -> None:
    """A throw-away CA, a localhost serving certificate, an admin client certificate and a service-account key."""
    directory.mkdir(parents=True, exist_ok=True)
    valid = ("-days", str(days))

    def sign(name: str, subject: str, extensions: str) -> None:
        _openssl(f"req -newkey rsa:2048 -nodes -keyout {name}.key -out {name}.csr", "-subj", subject, cwd=directory)
        (directory / f"{name}.ext").write_text(extensions)
        x509 = f"x509 -req -in {name}.csr -CA ca.crt -CAkey ca.key -CAcreateserial -extfile {name}.ext -out {name}.crt"
        _openssl(x509, *valid, cwd=directory)

    ca = "req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt"
    _openssl(ca, "-subj", "/CN=phalanx-testenv-ca", *valid, cwd=directory)
    usage = "keyUsage=digitalSignature,keyEncipherment\n"
    sign("serving", "/CN=localhost", f"subjectAltName=DNS:localhost,IP:127.0.0.1\n{usage}extendedKeyUsage=serverAuth\n")
    # CN is the user name, O the group: system:masters is bound to cluster-admin.
    sign("admin", "/O=system:masters/CN=phalanx-admin", f"{usage}extendedKeyUsage=clientAuth\n")
    _openssl("genrsa -out sa.key 2048", cwd=directory)
    for path in directory.glob("*.key"):
        path.chmod(0o600)


def write_kubeconfig(path: Path, server: str, directory: Path) -> None:
    """A kubeconfig with one cluster, user and context; certificate paths are absolute (JSON is valid YAML)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "phalanx-testenv",
                "cluster": {"server": server, "certificate-authority": str(directory / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": "phalanx-admin",
                "user": {
                    "client-certificate": str(directory / "admin.crt"),
                    "client-key": str(directory / "admin.key"),
                },
            }
        ],
        "contexts": [{"name": "phalanx-testenv", "context": {"cluster": "phalanx-testenv", "user": "phalanx-admin"}}],
        "current-context": "phalanx-testenv",
    }
    path.write_text(json.dumps(config, indent=2) + "\n")


def tls_context(directory: Path, *, client_cert: bool = True) -> ssl.SSLContext:
    """Trust the test CA and, by default, present the admin client certificate."""
    context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    if client_cert:
        context.load_cert_chain(str(directory / "admin.crt"), str(directory / "admin.key"))
    return context
