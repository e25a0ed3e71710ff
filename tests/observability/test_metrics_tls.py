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
