"""The /metrics server answers /metrics only, and no client holds it: half-sent
requests are cut at the deadline, connections beyond the cap are closed at once, and
a silent TLS client stops no scrape."""
from __future__ import annotations

import dataclasses
import socket
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from coordinator.config import NodeConfig
from coordinator.harness.certs import LocalCA
from coordinator.main import start_metrics
from coordinator.observability import metrics_server
from coordinator.observability.metrics_server import MetricsServer
from coordinator.transport.tls import ServerTLS

TIMEOUT_S = 0.5  # the tests' request deadline; the node's is metrics_server.REQUEST_TIMEOUT_S


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    s = metrics_server.start_metrics_server("127.0.0.1:0", request_timeout_s=TIMEOUT_S, max_connections=2)
    yield s
    s.shutdown()
    s.server_close()


def _url(s: MetricsServer, path: str = "/metrics", scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{s.server_address[1]}{path}"


def _closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed `sock` (reading EOF or a reset), None if still open after `seconds`."""
    started = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, BrokenPipeError):
        pass
    except TimeoutError:
        return None
    return time.monotonic() - started


def test_only_the_metrics_path_is_served(server: MetricsServer) -> None:
    with urllib.request.urlopen(_url(server), timeout=5) as reply:
        assert reply.status == 200 and b"raftpoint_raft_term" in reply.read()
    for path in ("/", "/metricsx", "/debug/pprof", "/favicon.ico"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(_url(server, path), timeout=5)
        assert refused.value.code == 404, f"{path}: {refused.value.code}"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(_url(server), data=b"x", method="POST"), timeout=5)
    assert refused.value.code == 405


def test_a_half_sent_request_is_dropped_at_the_deadline(server: MetricsServer) -> None:
    with socket.create_connection(server.server_address[:2]) as half:
        half.sendall(b"GET /metr")  # and nothing more
        waited = _closed_within(half, 20 * TIMEOUT_S)
    assert waited is not None, f"a half-sent request was still held after {20 * TIMEOUT_S} s"
    assert waited >= TIMEOUT_S * 0.8, f"dropped after {waited:.2f} s, before its deadline"


def test_connections_beyond_the_cap_are_closed_at_once_and_scrapes_resume(server: MetricsServer) -> None:
    holders = [socket.create_connection(server.server_address[:2]) for _ in range(2)]
    try:
        for h in holders:
            h.sendall(b"GET /metrics HTTP/1.1\r\n")  # the request line, never the end of the headers
        time.sleep(0.1)  # both accepted (a slot each) before the third arrives; the cut is 0.5 s away
        with socket.create_connection(server.server_address[:2]) as third:
            waited = _closed_within(third, TIMEOUT_S / 2)
        assert waited is not None, "a connection beyond the cap was kept"
    finally:
        for h in holders:
            h.close()
    deadline = time.monotonic() + 10
    while True:  # the slots come back once the holders are closed or cut
        try:
            with urllib.request.urlopen(_url(server), timeout=5) as reply:
                assert reply.status == 200
            break
        except (urllib.error.URLError, ConnectionError) as exc:
            assert time.monotonic() < deadline, f"no scrape answered after the holders left: {exc}"
            time.sleep(0.05)


def test_a_silent_client_stops_no_tls_scrape(tmp_path: Path) -> None:
    """The TLS handshake happens on the connection's thread, under its deadline: a
    client that connects and says nothing holds one slot, not the accepting thread."""
    ca = LocalCA.create(tmp_path)
    node = ca.server("node")
    tls = metrics_server.tls_context(str(node.cert_file), str(node.key_file))
    s = metrics_server.start_metrics_server("127.0.0.1:0", tls, request_timeout_s=30)
    try:
        with socket.create_connection(s.server_address[:2]):  # silent for the whole scrape below
            scraper = ssl.create_default_context(cafile=str(ca.ca_file))
            with urllib.request.urlopen(_url(s, scheme="https"), context=scraper, timeout=5) as reply:
                assert b"raftpoint_raft_term" in reply.read()
    finally:
        s.shutdown()
        s.server_close()


def test_a_node_with_tls_serves_metrics_over_tls_unless_told_otherwise(tmp_path: Path) -> None:
    ca = LocalCA.create(tmp_path)
    node, scraper_cert = ca.server("node"), ca.client("prometheus")
    # Not validated: a configuration names a fixed port, the test takes any free one.
    cfg = NodeConfig(metrics_address="127.0.0.1:0", tls_cert_file=str(node.cert_file),
                     tls_key_file=str(node.key_file), tls_client_ca_file=str(ca.ca_file), tls_client_auth="require")
    tls = ServerTLS.of(cfg)
    s = start_metrics(cfg, tls)
    try:
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):  # no plain HTTP
            urllib.request.urlopen(_url(s), timeout=5).read()
        scraper = ssl.create_default_context(cafile=str(ca.ca_file))
        scraper.load_cert_chain(str(scraper_cert.cert_file), str(scraper_cert.key_file))
        with urllib.request.urlopen(_url(s, scheme="https"), context=scraper, timeout=5) as reply:
            assert reply.status == 200
    finally:
        s.shutdown()
        s.server_close()
    plain = start_metrics(dataclasses.replace(cfg, metrics_plaintext=True), tls)
    try:
        with urllib.request.urlopen(_url(plain), timeout=5) as reply:
            assert reply.status == 200
    finally:
        plain.shutdown()
        plain.server_close()
