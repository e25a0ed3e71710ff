"""/readyz and /livez say what grpc.health.v1 says, on the metrics port and on the plain probe port."""
from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from coordinator.harness.local_cluster import LocalCluster, free_ports, wait_for
from tests.support.cluster import FAST

pytestmark = pytest.mark.cluster


def probe(address: str, path: str) -> tuple[int, str] | None:
    """(status, body) of GET http://address/path; None while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return None


def test_probes_follow_readiness_and_liveness(tmp_path: Path) -> None:
    [probe_port] = free_ports(1)
    probes = f"127.0.0.1:{probe_port}"
    with LocalCluster(tmp_path / "cluster", 3, settings={**FAST, "probe_address": probes}) as cluster:
        first = cluster.start(0)  # one of three: no quorum, so no leader
        del cluster.settings["probe_address"]  # one probe address: node 0's
        for address in (first.metrics, probes):
            live = wait_for(lambda: (p := probe(address, "/livez")) and p[0] == 200 and p, f"{address}/livez 200")
            assert live == (200, "ok\n")
            ready = probe(address, "/readyz")
            assert ready == (503, "no leader known\n"), f"{address}/readyz without a quorum: {ready}"
        assert probe(probes, "/metrics")[0] == 404, "the probe port serves the probes only"
        for address in (first.metrics, probes):
            assert probe(address, "/healthz")[0] == 404
        cluster.start(1, [0, 1, 2])
        cluster.start(2, [0, 1, 2])
        for address in (first.metrics, probes):
            wait_for(lambda: probe(address, "/readyz") == (200, "ok\n"),
                     f"{address}/readyz 200 once a leader is elected (last: {probe(address, '/readyz')})")
