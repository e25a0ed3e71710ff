"""The node's TLS material: checked at start-up, re-read when the files change.

Kubernetes replaces a mounted Secret's files in place when a certificate is renewed;
a node must serve the new one without a restart. gRPC asks `fetch()` before every
new handshake; it compares the files' (mtime, size, inode) with what it loaded and
re-reads only on a change. New material that does not check out (a key that does not
match, half-written files) is logged and skipped: the node keeps serving the last good
certificate rather than refusing every client. Connections already open keep the
certificate they were made with.

Client certificates: grpcio's Python server can either not ask for one or require
one (and verify it against the client CA); it cannot ask and accept a missing one.
So `tls_client_auth` is `none` (bearer tokens, or no client identity) or `require`.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from coordinator.channels import ClientTLS
from coordinator.config import NodeConfig

log = logging.getLogger(__name__)


class TLSMaterialError(ValueError):
    """A TLS file is missing, unreadable or unusable; the message names it and says why."""


@dataclass(frozen=True)
class ServerTLS:
    """Where the node's certificate, key and client CA are, and whether clients must show one."""

    cert_file: str
    key_file: str
    client_ca_file: str = ""
    client_auth: str = "none"

    @classmethod
    def of(cls, cfg: NodeConfig) -> "ServerTLS | None":
        """The node's TLS settings; None for a node run with --insecure."""
        if cfg.insecure:
            return None
        return cls(cfg.tls_cert_file, cfg.tls_key_file, cfg.tls_client_ca_file, cfg.tls_client_auth)

    def peer_client(self) -> ClientTLS:
        """How this node calls its peers: its own certificate as client certificate, the
        client CA (the cluster's CA) as trust root."""
        return ClientTLS(ca_file=self.client_ca_file or None, cert_file=self.cert_file, key_file=self.key_file)

    def credentials(self) -> grpc.ServerCredentials:
        """Server credentials that follow the files; TLSMaterialError if they do not check out now."""
        reloader = _Reloader(self)
        return grpc.dynamic_ssl_server_credentials(reloader.initial, reloader.fetch,
                                                   require_client_authentication=self.client_auth == "require")


@dataclass(frozen=True)
class Material:
    """The bytes of one consistent set of files, checked."""

    cert: bytes
    key: bytes
    client_ca: bytes | None
    serial: int


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TLSMaterialError(f"{what} {path!r}: {exc.strerror or exc}") from None


def load(tls: ServerTLS, now: dt.datetime | None = None) -> Material:
    """Read and check the files: PEM, key matches certificate, certificate valid now."""
    cert_pem, key_pem = _read(tls.cert_file, "tls_cert_file"), _read(tls.key_file, "tls_key_file")
    ca_pem = _read(tls.client_ca_file, "tls_client_ca_file") if tls.client_ca_file else None
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise TLSMaterialError(f"tls_cert_file {tls.cert_file!r} is not a PEM certificate ({exc})") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise TLSMaterialError(f"tls_key_file {tls.key_file!r} is not an unencrypted PEM private key ({exc})") from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if (key.public_key().public_bytes(serialization.Encoding.DER, public)
            != cert.public_key().public_bytes(serialization.Encoding.DER, public)):
        raise TLSMaterialError(f"tls_key_file {tls.key_file!r} is not the key of tls_cert_file {tls.cert_file!r}")
    now = now or dt.datetime.now(dt.timezone.utc)
    if now > cert.not_valid_after_utc:
        raise TLSMaterialError(f"tls_cert_file {tls.cert_file!r} expired at {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")
    if now < cert.not_valid_before_utc:
        raise TLSMaterialError(f"tls_cert_file {tls.cert_file!r} is not valid before "
                               f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC")
    if ca_pem is not None:
        try:
            if not x509.load_pem_x509_certificates(ca_pem):
                raise ValueError("no certificate")
        except ValueError as exc:
            raise TLSMaterialError(f"tls_client_ca_file {tls.client_ca_file!r} holds no PEM certificate "
                                   f"({exc})") from None
    return Material(cert_pem, key_pem, ca_pem, cert.serial_number)


def _stamp(paths: list[str]) -> tuple[tuple[int, int, int], ...]:
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append((0, 0, 0))
    return tuple(out)


def _configuration(material: Material) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration([(material.key, material.cert)],
                                                     root_certificates=material.client_ca)


class _Reloader:
    """gRPC's certificate fetcher: a new configuration when the files changed and check out."""

    def __init__(self, tls: ServerTLS) -> None:
        self.tls = tls
        self._paths = [p for p in (tls.cert_file, tls.key_file, tls.client_ca_file) if p]
        self._lock = threading.Lock()
        self._stamp = _stamp(self._paths)
        self.material = load(tls)
        self.initial = _configuration(self.material)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        stamp = _stamp(self._paths)
        with self._lock:
            if stamp == self._stamp:
                return None
            self._stamp = stamp
            try:
                material = load(self.tls)
            except TLSMaterialError as exc:
                log.warning("TLS files changed but cannot be used yet (%s); still serving certificate serial %x",
                            exc, self.material.serial)
                return None
            if material == self.material:
                return None
            log.info("TLS files changed: now serving certificate serial %x (was %x)", material.serial,
                     self.material.serial)
            self.material = material
            return _configuration(material)
