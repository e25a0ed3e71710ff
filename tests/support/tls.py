"""TLS settings of a harness cluster or in-process coordinator, as command-line flags."""
from __future__ import annotations

from typing import Protocol

from coordinator.channels import ClientTLS


class HasClientTLS(Protocol):
    def client_tls(self, identity: str | None = "admin") -> ClientTLS: ...


def cli_tls(server: HasClientTLS, identity: str | None = "admin") -> list[str]:
    """--ca-file/--cert-file/--key-file (or --insecure) for a `raftpoint` command talking to `server`."""
    tls = server.client_tls(identity)
    if tls.insecure:
        return ["--insecure"]
    flags = ["--ca-file", str(tls.ca_file)]
    if tls.cert_file:
        flags += ["--cert-file", str(tls.cert_file), "--key-file", str(tls.key_file)]
    return flags
