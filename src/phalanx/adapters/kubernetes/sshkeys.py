"""The SSH key pair of a job whose replicas reach each other over SSH (an MPIJob's launcher starting ranks).

One pair per job, made by the operator when it creates the job's Pods and kept in a Secret the job owns
(``rendering.render_ssh_secret``), so it goes with the job. The key is what mpi-operator makes: ECDSA on P-521,
the private key in PEM (``EC PRIVATE KEY``, which OpenSSH reads whatever the file is called) and the public key
in the ``authorized_keys`` form. Made with ``cryptography``, from the operating system's random source.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


@dataclass(frozen=True, slots=True)
class SshKeyPair:
    """A private key (PEM) and its public key (one ``authorized_keys`` line, newline-terminated)."""

    private_pem: str
    public_line: str


def generate_ssh_key_pair() -> SshKeyPair:
    """Make a new key pair."""
    key = ec.generate_private_key(ec.SECP521R1())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return SshKeyPair(private_pem=private.decode("ascii"), public_line=public.decode("ascii") + "\n")
