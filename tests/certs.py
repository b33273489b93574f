"""Throwaway credentials for tests: a CA and a server certificate for 127.0.0.1 (openssl),
for TLS listeners that tests start on loopback, and members' signing keys."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from controller.wire.signing import generate


@dataclass(frozen=True)
class ServerCert:
    ca: Path
    cert: Path
    key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def server_cert(d: Path) -> ServerCert:
    """A CA (``ca.crt``) and a certificate it signed for IP 127.0.0.1, valid two days."""
    ca, ca_key = d / "ca.crt", d / "ca.key"
    cert, key, csr, ext = d / "server.crt", d / "server.key", d / "server.csr", d / "san.ext"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=ballast-test-ca", "-keyout", str(ca_key), "-out", str(ca))  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", str(key), "-out", str(csr))  # fmt: skip
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
             "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(cert))  # fmt: skip
    return ServerCert(ca, cert, key)


def member_keys(keys: Path, admitted: Path, members: Iterable[str]) -> Path:
    """A key pair per member in ``keys`` (``<member>.key`` signs its heartbeats) and the
    public halves alone in ``admitted``: what ``membership.member_keys_dir`` names."""
    admitted.mkdir(parents=True, exist_ok=True)
    for member in members:
        _, public = generate(keys, member)
        (admitted / public.name).write_bytes(public.read_bytes())
    return admitted
