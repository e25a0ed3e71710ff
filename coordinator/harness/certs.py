"""Throw-away certificates for clusters on loopback: a CA, node and client certificates.

For local clusters, the demo, the chaos suite, benchmarks and tests only: the CA's
key sits on disk beside the certificates it signs. EC P-256 keys, because making
one takes about a millisecond. A client certificate's common name is its identity
(`admin`, `agent:<group>:<id>`, ...), left free-form for whoever maps it to a role.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from coordinator.channels import ClientTLS

CA_CERT, CA_KEY = "ca.crt", "ca.key"
LOOPBACK_NAMES = ("127.0.0.1", "localhost")
VALID_FOR = dt.timedelta(days=30)


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, as files."""

    cert_file: Path
    key_file: Path
    serial: int


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _write_private(path: Path, data: bytes) -> None:
    """Owner-only, written in full before it is renamed into place (a reader never sees half)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _san(names: Iterable[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def file_stem(identity: str) -> str:
    """A file name for an identity (`agent:g:a` -> `agent_g_a`)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", identity) or "_"


class LocalCA:
    """A CA whose files live in `directory` (ca.crt, ca.key) and the certificates it issues there."""

    def __init__(self, directory: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        self.directory, self._key, self._cert = Path(directory), key, cert

    @property
    def ca_file(self) -> Path:
        return self.directory / CA_CERT

    @classmethod
    def create(cls, directory: Path, name: str = "raftpoint local CA") -> "LocalCA":
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=3650))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        _write_private(directory / CA_KEY, _key_pem(key))
        _write_private(directory / CA_CERT, cert.public_bytes(serialization.Encoding.PEM))
        return cls(directory, key, cert)

    @classmethod
    def load(cls, directory: Path) -> "LocalCA":
        directory = Path(directory)
        key = serialization.load_pem_private_key((directory / CA_KEY).read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{directory / CA_KEY} is not an EC key")
        return cls(directory, key, x509.load_pem_x509_certificate((directory / CA_CERT).read_bytes()))

    @classmethod
    def load_or_create(cls, directory: Path) -> "LocalCA":
        """The CA kept in `directory` (a restarted local cluster keeps trusting its clients), else a new one."""
        directory = Path(directory)
        if (directory / CA_KEY).exists() and (directory / CA_CERT).exists():
            return cls.load(directory)
        return cls.create(directory)

    def issue(self, stem: str, common_name: str, *, hosts: Iterable[str] = (), server: bool = False,
              not_before: dt.datetime | None = None, valid_for: dt.timedelta = VALID_FOR) -> Issued:
        """A certificate for `common_name` written to <stem>.crt/.key (replacing older ones).

        `server`: for a node (SANs `hosts`, usable both to serve and to call its peers);
        otherwise a client certificate. `not_before`/`valid_for` let a test make one
        that is expired or not yet valid."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or _now() - dt.timedelta(minutes=5)
        usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server else \
            [ExtendedKeyUsageOID.CLIENT_AUTH]
        serial = x509.random_serial_number()
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
                   .issuer_name(self._cert.subject).public_key(key.public_key()).serial_number(serial)
                   .not_valid_before(start).not_valid_after(start + valid_for)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                                  critical=False))
        names = _san(hosts)
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        cert_file, key_file = self.directory / f"{stem}.crt", self.directory / f"{stem}.key"
        # Key first: a reloading server that sees the new certificate finds its key.
        _write_private(key_file, _key_pem(key))
        _write_private(cert_file, cert.public_bytes(serialization.Encoding.PEM))
        return Issued(cert_file, key_file, serial)

    def server(self, stem: str, hosts: Iterable[str] = (), **validity: dt.datetime | dt.timedelta) -> Issued:
        """A node's certificate: SANs `hosts` plus 127.0.0.1 and localhost."""
        hosts = [*hosts, *LOOPBACK_NAMES]
        return self.issue(stem, hosts[0], hosts=hosts, server=True, **validity)  # type: ignore[arg-type]

    def client(self, identity: str, **validity: dt.datetime | dt.timedelta) -> Issued:
        """A client certificate whose common name is `identity`."""
        return self.issue("client-" + file_stem(identity), identity, **validity)  # type: ignore[arg-type]

    def client_tls(self, identity: str | None = "admin") -> ClientTLS:
        """Client settings trusting this CA, with a certificate for `identity` (None: none)."""
        if identity is None:
            return ClientTLS(ca_file=str(self.ca_file))
        cert = self.directory / f"client-{file_stem(identity)}.crt"
        issued = Issued(cert, cert.with_suffix(".key"), 0) if cert.exists() else self.client(identity)
        return ClientTLS(ca_file=str(self.ca_file), cert_file=str(issued.cert_file), key_file=str(issued.key_file))
