"""Why a client cannot open a gRPC connection to an endpoint, found by asking the endpoint itself.

gRPC reports every failed connection as UNAVAILABLE, and its text ("Socket closed",
"Handshake read failed") is the same for a node that is restarting and for an
address that can never work: a CA that did not sign the node's certificate, a node
that wants a client certificate, plaintext against TLS, a Raft or metrics port given
as the gRPC port. So a client whose connection failed opens one of its own here,
with Python's ssl module, and reads what the endpoint does:

| the endpoint | finding |
|---|---|
| refuses, is unreachable, or says nothing in time | none: down or slow, retry |
| closes every connection at once, before anything is sent to it | none: a node at its connection limit, or a port mapping whose node is still starting |
| completes TLS and answers HTTP/2 | none: it works (the failure was transient) |
| presents a certificate the client's CA (or server name) does not verify | the CA file, or the server name |
| completes TLS, then closes without an HTTP/2 answer, twice | the client certificate: gRPC servers refuse a missing or unknown one this way, without a TLS alert |
| answers a TLS hello in something else, or closes on it once read and on a second one too, and answers HTTP/2 in plaintext | a plaintext node (--insecure) |
| the same, and does not answer HTTP/2 either (twice) | not a gRPC port (a node's Raft or metrics port, named when an endpoints.json records it) |

A plaintext client is checked the other way round (HTTP/2 first, then whether the
peer speaks TLS). A close counts as an answer only when a second connection sees it
too: one reset on a flaky link must not pass for a misconfiguration. Only a finding
is final: retrying cannot change it.
"""
from __future__ import annotations

import enum
import os
import socket
import ssl
from dataclasses import dataclass
from typing import Iterable

from coordinator.channels import ClientTLS
from coordinator.endpoints_file import port_role

# A client's HTTP/2 connection preface and an empty SETTINGS frame (RFC 9113 §3.4):
# every HTTP/2 server answers it with a SETTINGS frame of its own.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
SETTINGS_FRAME = 0x4
# How long a peer that closes connections by itself is given to do so before it is
# spoken to: a closing listener does so at once; a Raft port waits for a message.
UNPROMPTED_CLOSE_S = 0.25
# A peer's close is taken for an answer only when a second connection sees it too: a
# flaky link's reset looks the same once.
CONFIRMATIONS = 2

CA_SETTING = "the CA file (ClientTLS(ca_file=...), RAFTPOINT_CA_FILE, --ca-file)"
CERT_SETTING = ("the client certificate (ClientTLS(cert_file=..., key_file=...), RAFTPOINT_CERT_FILE and "
                "RAFTPOINT_KEY_FILE, --cert-file and --key-file)")
NAME_SETTING = "the server name (ClientTLS(server_name=...), RAFTPOINT_SERVER_NAME, --server-name)"
PLAINTEXT_SETTING = "plaintext (ClientTLS.plaintext(), RAFTPOINT_INSECURE=1, --insecure)"
CLUSTER_UP_PORTS = ("the port: is this a raftpoint gRPC port? `raftpoint cluster up` prints each node's gRPC port "
                    "and writes them to <data-dir>/endpoints.json (the \"grpc\" entries)")


@dataclass(frozen=True)
class Misconfigured:
    """What an endpoint showed that no retry can change, and what to check."""

    endpoint: str
    seen: str
    check: str

    def __str__(self) -> str:
        return summary([self])


def summary(findings: Iterable[Misconfigured]) -> str:
    """The findings in words, those alike said once for all their endpoints."""
    alike: dict[tuple[str, str], list[str]] = {}
    for f in findings:
        alike.setdefault((f.seen, f.check), []).append(f.endpoint)
    return "; ".join(f"{', '.join(endpoints)}: {seen}; check {check}" for (seen, check), endpoints in alike.items())


class _Answer(enum.Enum):
    SETTINGS = "an HTTP/2 SETTINGS frame"
    CLOSED = "closed"
    SILENT = "nothing"
    OTHER = "bytes of another protocol"


@dataclass(frozen=True)
class _Peer:
    endpoint: str
    host: str
    port: int
    timeout: float
    data_dirs: tuple[str | os.PathLike[str], ...]

    def connect(self) -> socket.socket:
        """A TCP connection; OSError (refused, unreachable, timed out) when none can be had."""
        return socket.create_connection((self.host, self.port), timeout=self.timeout)

    def closes_unprompted(self) -> bool:
        """Whether the peer closes a connection before anything is sent on it (or no
        longer accepts one): what a busy node or a port mapping without its node does."""
        try:
            with self.connect() as sock:
                sock.settimeout(UNPROMPTED_CLOSE_S)
                return sock.recv(1) == b""
        except TimeoutError:
            return False
        except OSError:
            return True


def diagnose(endpoint: str, tls: ClientTLS, *, timeout: float = 1.0,
             data_dirs: Iterable[str | os.PathLike[str]] = ()) -> Misconfigured | None:
    """What is wrong with connecting to `endpoint` with `tls` (module doc); None when
    nothing final was found. `data_dirs`: where an endpoints.json may name the port.
    Takes at most a few times `timeout` (an unresponsive peer is given up on)."""
    host, _, port = endpoint.rpartition(":")
    try:
        peer = _Peer(endpoint, host.strip("[]"), int(port), timeout, tuple(data_dirs))
    except ValueError:
        return Misconfigured(endpoint, "it is not a host:port address", "the endpoints")
    try:
        return _plaintext(peer) if tls.insecure else _tls(peer, tls)
    except OSError:  # refused, reset while connecting, unreachable, timed out: nothing final
        return None


def _tls(peer: _Peer, tls: ClientTLS) -> Misconfigured | None:
    try:
        context = ssl.create_default_context(cafile=tls.ca_file)
    except (ssl.SSLError, OSError) as exc:
        return Misconfigured(peer.endpoint, f"the CA file {tls.ca_file} cannot be used ({exc})", CA_SETTING)
    context.set_alpn_protocols(["h2"])
    if tls.cert_file:
        try:
            context.load_cert_chain(tls.cert_file, tls.key_file)
        except (ssl.SSLError, OSError) as exc:
            return Misconfigured(peer.endpoint, f"the client certificate {tls.cert_file} or its key cannot be used "
                                                f"({exc})", CERT_SETTING)
    name = tls.server_name or peer.host
    for _ in range(CONFIRMATIONS):
        try:
            answer = _over_tls(peer, context, name)
        except ssl.SSLCertVerificationError as exc:
            return _untrusted(peer, tls, name, exc)
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionError):  # closed during the handshake
            return None if peer.closes_unprompted() or _speaks_tls(peer) else _not_tls(peer)
        except ssl.SSLError:  # answered, in something else than TLS
            return _not_tls(peer)
        if answer is not _Answer.CLOSED:
            break
    if answer is _Answer.CLOSED:
        return _client_refused(peer, tls)
    if answer is _Answer.OTHER:
        return Misconfigured(peer.endpoint, "it speaks TLS but not HTTP/2", CLUSTER_UP_PORTS)
    return None


def _plaintext(peer: _Peer) -> Misconfigured | None:
    answer = _over_plaintext(peer)
    if answer in (_Answer.SETTINGS, _Answer.SILENT):
        return None
    if answer is _Answer.CLOSED and peer.closes_unprompted():
        return None
    if _speaks_tls(peer):
        return Misconfigured(peer.endpoint, "the node serves TLS and this client connects in plaintext",
                             f"the settings: drop {PLAINTEXT_SETTING} and give {CA_SETTING}")
    return _not_grpc(peer, answer)


def _over_tls(peer: _Peer, context: ssl.SSLContext, name: str) -> _Answer:
    """The peer's first answer to an HTTP/2 preface over TLS (the handshake's failure raised)."""
    with peer.connect() as raw, context.wrap_socket(raw, server_hostname=name) as sock:
        sock.sendall(PREFACE)
        return _first_answer(sock, peer.timeout)


def _over_plaintext(peer: _Peer) -> _Answer:
    """The peer's first answer to an HTTP/2 preface in plaintext, a close confirmed."""
    for _ in range(CONFIRMATIONS):
        with peer.connect() as sock:
            sock.sendall(PREFACE)
            answer = _first_answer(sock, peer.timeout)
        if answer is not _Answer.CLOSED:
            break
    return answer


def _untrusted(peer: _Peer, tls: ClientTLS, name: str, exc: ssl.SSLCertVerificationError) -> Misconfigured:
    reason = exc.verify_message or str(exc)
    if exc.verify_code == 62:  # X509_V_ERR_HOSTNAME_MISMATCH
        return Misconfigured(peer.endpoint, f"TLS handshake failed: the node's certificate does not name {name} "
                                            f"({reason})", f"{NAME_SETTING}, or the address")
    trusted = tls.ca_file or "the system's trust store (no CA file given)"
    return Misconfigured(peer.endpoint, f"TLS handshake failed: the node's certificate does not verify against "
                                        f"{trusted} ({reason})",
                         f"{CA_SETTING}: it must be the CA that signed the nodes' certificates "
                         "(`raftpoint cluster up`: <data-dir>/tls/ca.crt)")


def _client_refused(peer: _Peer, tls: ClientTLS) -> Misconfigured:
    if not tls.cert_file:
        seen = ("the node closed the connection after the TLS handshake: it requires a client certificate "
                "and none was given")
    else:
        seen = (f"the node closed the connection after the TLS handshake: it refused the client certificate "
                f"{tls.cert_file} (not signed by the CA the node trusts, expired, or not yet valid)")
    return Misconfigured(peer.endpoint, seen, f"{CERT_SETTING} (`raftpoint cluster up`: "
                                              "<data-dir>/tls/client-<identity>.crt and .key)")


def _not_tls(peer: _Peer) -> Misconfigured:
    """The peer does not speak TLS: a plaintext node, or no gRPC port at all."""
    answer = _over_plaintext(peer)
    if answer is _Answer.SETTINGS:
        return Misconfigured(peer.endpoint, "the node serves plaintext gRPC (started with --insecure), not TLS",
                             f"{PLAINTEXT_SETTING}, or start the node with TLS")
    return _not_grpc(peer, answer)


def _not_grpc(peer: _Peer, answer: _Answer) -> Misconfigured:
    how = ("it closes the connection on a TLS hello and on an HTTP/2 preface" if answer is _Answer.CLOSED
           else "it answers neither TLS nor HTTP/2")
    role = port_role(peer.endpoint, peer.data_dirs)
    if role is None:
        return Misconfigured(peer.endpoint, f"not a gRPC port ({how})", CLUSTER_UP_PORTS)
    return Misconfigured(peer.endpoint, f"not a gRPC port ({how}): {role}",
                         "the endpoints: give each node's gRPC port")


def _speaks_tls(peer: _Peer) -> bool:
    """Whether the peer completes a TLS handshake (its certificate unchecked: only the protocol matters)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with peer.connect() as raw, context.wrap_socket(raw, server_hostname=peer.host):
            return True
    except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
        return False
    except ssl.SSLError as exc:  # a TLS alert (a TLS 1.2 server refusing us) still says it speaks TLS
        return "ALERT" in (exc.reason or "")
    except OSError:
        return False


def _first_answer(sock: socket.socket, timeout: float) -> _Answer:
    """What the peer sends first after our preface."""
    sock.settimeout(timeout)
    data = b""
    try:
        while len(data) < 4:
            chunk = sock.recv(4 - len(data))
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        return _Answer.OTHER if data else _Answer.SILENT
    except (ConnectionError, ssl.SSLError):
        return _Answer.CLOSED
    if not data:
        return _Answer.CLOSED
    return _Answer.SETTINGS if len(data) == 4 and data[3] == SETTINGS_FRAME else _Answer.OTHER
