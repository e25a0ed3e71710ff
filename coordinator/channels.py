"""How a client opens a gRPC channel to a node: TLS unless plaintext is asked for by name.

Shared by the agent library (`agent_client.Connection`), the console commands and the
nodes themselves (a node calls its peers with its own certificate), so there is one
rule for which files are read and what a missing one means. It needs grpcio only.

Settings come from arguments or, for programs that take none, from the environment:

    RAFTPOINT_CA_FILE      PEM bundle of the CA(s) that signed the nodes' certificates
                           (default: the system's trust store)
    RAFTPOINT_CERT_FILE    this client's certificate (PEM), for clusters that ask for one
    RAFTPOINT_KEY_FILE     its private key (PEM)
    RAFTPOINT_SERVER_NAME  the name to check the node's certificate against, when the
                           address dialled is not in it (e.g. a port-forward)
    RAFTPOINT_INSECURE     1/true: plaintext (a node started with --insecure)
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import grpc

CA_FILE_ENV = "RAFTPOINT_CA_FILE"
CERT_FILE_ENV = "RAFTPOINT_CERT_FILE"
KEY_FILE_ENV = "RAFTPOINT_KEY_FILE"
SERVER_NAME_ENV = "RAFTPOINT_SERVER_NAME"
INSECURE_ENV = "RAFTPOINT_INSECURE"
CLIENT_ENV = (CA_FILE_ENV, CERT_FILE_ENV, KEY_FILE_ENV, SERVER_NAME_ENV, INSECURE_ENV)
Options = Sequence[tuple[str, object]]


class ClientTLSError(ValueError):
    """A client TLS file is missing or unreadable, or a certificate came without its key."""


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class ClientTLS:
    """What a client trusts and shows when it connects to a node.

    `ca_file`: the CA bundle that signed the nodes' certificates (None: system roots);
    `cert_file`/`key_file`: this client's identity for clusters that check client
    certificates (both or neither); `server_name`: overrides the host name the node's
    certificate is checked against; `insecure`: plaintext, for a node run with
    --insecure (no other field may be set then)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None
    insecure: bool = False

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ClientTLSError("a client certificate needs its key and a key its certificate "
                                 f"(cert_file={self.cert_file!r}, key_file={self.key_file!r})")
        if self.insecure and (self.ca_file or self.cert_file or self.server_name):
            raise ClientTLSError("insecure (plaintext) leaves no room for CA, certificate or server name settings")

    @classmethod
    def plaintext(cls) -> "ClientTLS":
        """No TLS: only for a node started with --insecure."""
        return cls(insecure=True)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "ClientTLS":
        """The RAFTPOINT_CA_FILE/CERT_FILE/KEY_FILE/SERVER_NAME/INSECURE settings (module doc)."""
        env = os.environ if env is None else env
        if _truthy(env.get(INSECURE_ENV, "")):
            return cls.plaintext()
        return cls(ca_file=env.get(CA_FILE_ENV) or None, cert_file=env.get(CERT_FILE_ENV) or None,
                   key_file=env.get(KEY_FILE_ENV) or None, server_name=env.get(SERVER_NAME_ENV) or None)

    def credentials(self) -> grpc.ChannelCredentials:
        """Reads the files now; ClientTLSError names the one that cannot be read."""
        if self.insecure:
            raise ClientTLSError("plaintext settings have no channel credentials")
        return grpc.ssl_channel_credentials(root_certificates=_read(self.ca_file, "CA file"),
                                            private_key=_read(self.key_file, "client key file"),
                                            certificate_chain=_read(self.cert_file, "client certificate file"))

    def options(self, extra: Options = ()) -> list[tuple[str, object]]:
        names = [] if self.insecure or not self.server_name else [("grpc.ssl_target_name_override", self.server_name)]
        return [*extra, *names]

    def channel(self, target: str, options: Options = ()) -> grpc.Channel:
        """A blocking channel to `target` with these settings."""
        if self.insecure:
            return grpc.insecure_channel(target, options=list(options))
        return grpc.secure_channel(target, self.credentials(), options=self.options(options))

    def environment(self) -> dict[str, str]:
        """These settings as the RAFTPOINT_* variables from_env() reads (for child processes)."""
        if self.insecure:
            return {INSECURE_ENV: "1"}
        pairs = ((CA_FILE_ENV, self.ca_file), (CERT_FILE_ENV, self.cert_file), (KEY_FILE_ENV, self.key_file),
                 (SERVER_NAME_ENV, self.server_name))
        return {name: value for name, value in pairs if value}

    def aio_channel(self, target: str, options: Options = ()) -> grpc.aio.Channel:
        """An asyncio channel to `target` with these settings."""
        if self.insecure:
            return grpc.aio.insecure_channel(target, options=list(options))
        return grpc.aio.secure_channel(target, self.credentials(), options=self.options(options))


def _read(path: str | None, what: str) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ClientTLSError(f"{what} {path!r}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def environment(tls: ClientTLS) -> Iterator[None]:
    """`tls` as this process's RAFTPOINT_* client variables while the block runs (every
    client made without explicit settings, and every child process, uses it); the
    variables as they were afterwards."""
    saved = {name: os.environ.get(name) for name in CLIENT_ENV}
    for name in CLIENT_ENV:
        os.environ.pop(name, None)
    os.environ.update(tls.environment())
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def resolve(tls: ClientTLS | None) -> ClientTLS:
    """`tls` as given, or the environment's settings (TLS with system roots when it has none)."""
    return ClientTLS.from_env() if tls is None else tls
