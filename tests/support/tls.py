"""TLS settings of a harness cluster or in-process coordinator, as command-line flags."""
from __future__ import annotations

from typing import ContextManager, Protocol

from coordinator import channels
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


def clients_trust(server: HasClientTLS) -> ContextManager[None]:
    """While the block runs, clients made without TLS settings in this process (the chaos
    workloads' connections, the node sampler) and the processes it starts (agents) find
    `server`'s CA and admin certificate in RAFTPOINT_CA_FILE etc., as deployed agents do."""
    return channels.environment(server.client_tls())
