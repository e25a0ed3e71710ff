"""The node's TLS material: checked at start-up, re-read when the files change.

Kubernetes replaces a mounted Secret's files in place when a certificate is renewed;
a node must serve the new one without a restart. gRPC asks `fetch()` before every
new handshake; it compares the files' (mtime, size, inode) with what it loaded and
re-reads only on a change. New material that does not check out (a key that does not
match, half-written files) is logged and skipped: the node keeps serving the last good
certificate rather than refusing every client. So is a valid pair that would fail the
handshakes the served one passes (a certificate for another host, or from another CA:
`rotation_problem`). Connections already open keep the certificate they were made with.

Client certificates: grpcio's Python server can either not ask for one or require
one (and verify it against the client CA); it cannot ask and accept a missing one.
So `tls_client_auth` is `none` (bearer tokens, or no client identity) or `require`.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import os
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509 import verification

from coordinator.channels import ClientTLS
from coordinator.config import NodeConfig
from coordinator.observability import metrics

log = logging.getLogger(__name__)
# Hosts a node may bind that name no one (every address of the machine).
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})


class TLSMaterialError(ValueError):
    """A TLS file is missing, unreadable or unusable; the message names it and says why."""


@dataclass(frozen=True)
class ServerTLS:
    """Where the node's certificate, key and client CA are, and whether clients must show one."""

    cert_file: str
    key_file: str
    client_ca_file: str = ""
    client_auth: str = "none"
    # The names the node is reached at (its gRPC address's host, as its peers and its
    # probe dial it): a new certificate must pass for each that the served one passes for.
    names: tuple[str, ...] = ()

    @classmethod
    def of(cls, cfg: NodeConfig) -> "ServerTLS | None":
        """The node's TLS settings; None for a node run with --insecure."""
        if cfg.insecure:
            return None
        host = cfg.grpc_address.rpartition(":")[0]
        names = () if host in WILDCARD_HOSTS else (host.strip("[]"),)
        return cls(cfg.tls_cert_file, cfg.tls_key_file, cfg.tls_client_ca_file, cfg.tls_client_auth, names)

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
    not_after: dt.datetime
    # The earliest expiry among the client CA file's certificates (None: no such file).
    client_ca_not_after: dt.datetime | None = None


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
    now = now or dt.datetime.now(dt.UTC)
    if now > cert.not_valid_after_utc:
        raise TLSMaterialError(f"tls_cert_file {tls.cert_file!r} expired at {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")
    if now < cert.not_valid_before_utc:
        raise TLSMaterialError(f"tls_cert_file {tls.cert_file!r} is not valid before "
                               f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC")
    ca_not_after = None
    if ca_pem is not None:
        try:
            cas = x509.load_pem_x509_certificates(ca_pem)
            if not cas:
                raise ValueError("no certificate")
        except ValueError as exc:
            raise TLSMaterialError(f"tls_client_ca_file {tls.client_ca_file!r} holds no PEM certificate "
                                   f"({exc})") from None
        ca_not_after = min(ca.not_valid_after_utc for ca in cas)
    return Material(cert_pem, key_pem, ca_pem, cert.serial_number, cert.not_valid_after_utc, ca_not_after)


def rotation_problem(served: Material, new: Material, names: Sequence[str], now: dt.datetime) -> str | None:
    """Why `new` would fail a handshake `served` passes, or None.

    For each of the node's names, the check a client makes: the certificate chains to
    the CA in tls_client_ca_file (the cluster's CA, which peers and the probe trust;
    without one, the certificate's own names alone are checked) and covers the name.
    A name the served certificate does not pass for sets no rule (a node dialled by
    another name, or whose clients trust another CA), so no rotation that changes
    nothing for them is refused."""
    for name in names:
        if _handshake_failure(served, name, now) is None:
            failure = _handshake_failure(new, name, now)
            if failure is not None:
                return f"the new certificate fails where the served one passes, for {name!r}: {failure}"
    return None


def _handshake_failure(material: Material, name: str, now: dt.datetime) -> str | None:
    """Why a client dialling `name` and trusting the material's CA would refuse its certificate, or None."""
    try:
        subject: verification.Subject = verification.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        try:
            subject = verification.DNSName(name)
        except ValueError:
            return f"{name!r} is neither an IP address nor a DNS name"
    leaf, *chain = x509.load_pem_x509_certificates(material.cert)
    anchors = x509.load_pem_x509_certificates(material.client_ca) if material.client_ca else [leaf]
    verifier = verification.PolicyBuilder().store(verification.Store(anchors)).time(now).build_server_verifier(
        subject)
    try:
        verifier.verify(leaf, chain)
    except verification.VerificationError as exc:
        return str(exc)
    return None


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


def _in_force(material: Material) -> None:
    """The files on disk are what is served: say so, and when what is served expires."""
    metrics.TLS_FILES_UNUSABLE.set(0)
    metrics.TLS_CERT_EXPIRY.labels("node").set(material.not_after.timestamp())
    if material.client_ca_not_after is not None:
        metrics.TLS_CERT_EXPIRY.labels("client_ca").set(material.client_ca_not_after.timestamp())


class _Reloader:
    """gRPC's certificate fetcher: a new configuration when the files changed and check out.

    `reports`: whether this watcher logs and sets the TLS metrics. A node's files are
    reported by one watcher, the gRPC port's; another listener following the same
    files watches silently, so a refused rotation is said once."""

    def __init__(self, tls: ServerTLS, reports: bool = True) -> None:
        self.tls = tls
        self._reports = reports
        self._paths = [p for p in (tls.cert_file, tls.key_file, tls.client_ca_file) if p]
        self._lock = threading.Lock()
        self._stamp = _stamp(self._paths)
        self.material = load(tls)
        self.initial = _configuration(self.material)
        if reports:
            _in_force(self.material)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        stamp = _stamp(self._paths)
        with self._lock:
            if stamp == self._stamp:
                return None
            self._stamp = stamp
            now = dt.datetime.now(dt.UTC)
            try:
                material = load(self.tls, now)
            except TLSMaterialError as exc:
                return self._keep(f"cannot be used yet ({exc})")
            if material == self.material:
                if self._reports:
                    metrics.TLS_FILES_UNUSABLE.set(0)
                return None
            problem = rotation_problem(self.material, material, self.tls.names, now)
            if problem is not None:
                return self._keep(f"are refused: {problem}")
            if self._reports:
                log.info("TLS files changed: now serving certificate serial %x (was %x)", material.serial,
                         self.material.serial)
                _in_force(material)
            self.material = material
            return _configuration(material)

    def _keep(self, why: str) -> None:
        """Keep serving the last good material; say why the files on disk are not in force."""
        if not self._reports:
            return None
        log.warning("TLS files changed but %s; still serving certificate serial %x", why, self.material.serial)
        metrics.TLS_FILES_UNUSABLE.set(1)
        return None


class ContextReloader:
    """The ssl.SSLContext of another listener of this node (the metrics port), following
    the TLS files as the gRPC port does: rebuilt by `make` once they change and pass
    the same checks (_Reloader), else the last good one is kept. Call it for each
    connection: a changed file costs a stat of each until then. It watches silently:
    the gRPC port's watcher reports the files' state for the node."""

    def __init__(self, tls: ServerTLS, make: Callable[[ServerTLS], ssl.SSLContext]) -> None:
        self._watch = _Reloader(tls, reports=False)
        self._make = make
        self._context = make(tls)
        self._behind = False  # new material was accepted but not loaded yet

    def __call__(self) -> ssl.SSLContext:
        if self._watch.fetch() is not None or self._behind:
            try:
                self._context, self._behind = self._make(self._watch.tls), False
            except (ssl.SSLError, OSError) as exc:  # changed again since it was checked: the next call retries
                self._behind = True
                log.warning("TLS files changed but the metrics port could not load them: %s", exc)
        return self._context
