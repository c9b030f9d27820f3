"""`phalanx server` over TLS, as a real process: listening on every address with a certificate made in the test.

The client (httpx) verifies the server against that certificate, so the test proves the server presents it and
speaks TLS; a client that does not trust it is refused by the handshake, and plain HTTP gets no API answer.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest

from conftest import Runtime, generic_job, wait_until
from support.certificates import make_certificate
from support.postgres import free_port

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/default/trainingjobs"


def test_the_server_serves_https_on_every_address_with_a_certificate(runtime: Runtime, tmp_path: Path) -> None:
    pair = make_certificate(tmp_path / "tls")
    port = free_port()
    log = tmp_path / "server.log"
    process = runtime.cli_background(
        "server",
        "--listen",
        f"0.0.0.0:{port}",  # beyond loopback: allowed because TLS is on
        "--tls-cert",
        str(pair.cert),
        "--tls-key",
        str(pair.key),
        output=log,
    )
    trusting = ssl.create_default_context(cafile=str(pair.cert))
    base = f"https://127.0.0.1:{port}"

    def answers() -> bool:
        if process.poll() is not None:
            pytest.fail(f"phalanx server exited {process.returncode}:\n{log.read_text()}")
        try:
            return httpx.get(f"{base}{JOBS}", verify=trusting, timeout=2).status_code == 401
        except httpx.TransportError:
            return False

    wait_until(answers, timeout=90, message="phalanx server to answer over TLS")
    assert f"https://0.0.0.0:{port}/apis/phalanx.dev/v1alpha1" in log.read_text()

    token = runtime.cli("token", "create", "ci", "--role", "editor", "--namespace", "default", check=True).stdout
    http = httpx.Client(
        base_url=base, verify=trusting, timeout=10, headers={"Authorization": f"Bearer {token.strip()}"}
    )
    created = http.post(JOBS, json=generic_job("over-tls"))
    assert created.status_code == 201, created.text
    assert [item["metadata"]["name"] for item in http.get(JOBS).json()["items"]] == ["over-tls"]

    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{base}{JOBS}", timeout=10)  # the system's CAs do not know this certificate
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}{JOBS}", timeout=10)  # no plain HTTP on a TLS port
