"""/metrics over HTTPS with a required client certificate (prometheus-client's own TLS)."""
from __future__ import annotations

import http.client
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from coordinator.harness.certs import LocalCA
from coordinator.observability import metrics_server
from coordinator.observability.health_report import HealthReport, Verdict


def test_metrics_over_tls_require_a_client_certificate_of_the_ca(tmp_path: Path) -> None:
    ca = LocalCA.create(tmp_path)
    node = ca.server("node")
    server = metrics_server.start_metrics_server("127.0.0.1:0", metrics_server.tls_context(
        str(node.cert_file), str(node.key_file), str(ca.ca_file), client_auth_required=True))
    url = "https://127.0.0.1:%d/metrics" % server.server_address[1]
    try:
        scraper = ssl.create_default_context(cafile=str(ca.ca_file))
        certificate = ca.client("prometheus")
        scraper.load_cert_chain(str(certificate.cert_file), str(certificate.key_file))
        with urllib.request.urlopen(url, context=scraper, timeout=5) as reply:
            assert b"raftpoint_raft_term" in reply.read()
        anonymous = ssl.create_default_context(cafile=str(ca.ca_file))
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            urllib.request.urlopen(url, context=anonymous, timeout=5).read()
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):  # nor plain HTTP
            urllib.request.urlopen(url.replace("https", "http"), timeout=5).read()
    finally:
        server.shutdown()
        server.server_close()


def test_the_probe_paths_follow_the_metrics_port_tls_and_the_probe_port_serves_them_plain(tmp_path: Path) -> None:
    """With client certificates required on the metrics port, a kubelet (no certificate)
    cannot probe it; the plain probe port answers it, and serves nothing else."""
    ca = LocalCA.create(tmp_path)
    node = ca.server("node")
    report = HealthReport()
    report.publish(Verdict(False, "no leader known"), Verdict(True, "live"))
    metrics = metrics_server.start_metrics_server("127.0.0.1:0", metrics_server.tls_context(
        str(node.cert_file), str(node.key_file), str(ca.ca_file), client_auth_required=True), report=report)
    probes = metrics_server.start_probe_server("127.0.0.1:0", report)
    try:
        operator = ssl.create_default_context(cafile=str(ca.ca_file))
        certificate = ca.client("admin")
        operator.load_cert_chain(str(certificate.cert_file), str(certificate.key_file))
        with urllib.request.urlopen(f"https://127.0.0.1:{metrics.server_address[1]}/livez", context=operator,
                                    timeout=5) as reply:
            assert (reply.status, reply.read()) == (200, b"ok\n")
        kubelet = ssl.create_default_context(cafile=str(ca.ca_file))
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            urllib.request.urlopen(f"https://127.0.0.1:{metrics.server_address[1]}/livez", context=kubelet,
                                   timeout=5).read()
        plain = f"http://127.0.0.1:{probes.server_address[1]}"
        with pytest.raises(urllib.error.HTTPError) as not_ready:
            urllib.request.urlopen(f"{plain}/readyz", timeout=5)
        assert (not_ready.value.code, not_ready.value.read()) == (503, b"no leader known\n")
        for path, code in (("/metrics", 404), ("/", 404)):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"{plain}{path}", timeout=5)
            assert refused.value.code == code, path
    finally:
        for server in (metrics, probes):
            server.shutdown()
            server.server_close()


def served_serial(port: int, context: ssl.SSLContext) -> int:
    import socket

    from cryptography import x509
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


def test_the_metrics_port_follows_a_renewed_certificate_as_the_grpc_port_does(tmp_path: Path) -> None:
    from coordinator.transport.tls import ContextReloader, ServerTLS

    ca = LocalCA.create(tmp_path)
    first = ca.server("node")
    settings = ServerTLS(str(first.cert_file), str(first.key_file), str(ca.ca_file), "require")
    server = metrics_server.start_metrics_server("127.0.0.1:0", ContextReloader(settings, lambda t: metrics_server.tls_context(
        t.cert_file, t.key_file, t.client_ca_file, client_auth_required=True)))
    try:
        scraper = ssl.create_default_context(cafile=str(ca.ca_file))
        certificate = ca.client("prometheus")
        scraper.load_cert_chain(str(certificate.cert_file), str(certificate.key_file))
        port = server.server_address[1]
        assert served_serial(port, scraper) == first.serial
        first.key_file.write_bytes(LocalCA.create(tmp_path / "x").server("x").key_file.read_bytes())
        assert served_serial(port, scraper) == first.serial, "a key that is not the certificate's was taken"
        renewed = ca.server("node")  # a renewal writes both files in place
        seen = served_serial(port, scraper)
        assert seen == renewed.serial != first.serial, f"served {seen:x}; first {first.serial:x}, renewed {renewed.serial:x}"
    finally:
        server.shutdown()
        server.server_close()
