"""TLS on a real node process: required by default, checked both ways, rotated on disk."""
from __future__ import annotations

import datetime as dt
import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from cryptography import x509

from agent_client.connection import Connection, CoordinatorUnavailable, TLSHandshakeFailed
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.channels import ClientTLS
from coordinator.harness.certs import LocalCA
from coordinator.harness.local_cluster import LocalCluster, free_ports, wait_for
from raftpoint.cli.main import main as raftpoint
from tests.support.cluster import FAST
from tests.support.tls import cli_tls

pytestmark = pytest.mark.cluster
STATUS = ("AdminService", "ClusterStatus", pb.ClusterStatusRequest())


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One node, TLS with a throw-away CA, client certificates required (the harness default)."""
    with LocalCluster(tmp_path_factory.mktemp("tls") / "c", 1, settings=FAST).start_all() as cluster:
        cluster.leader()
        yield cluster


def status(cluster: LocalCluster, tls: ClientTLS, deadline: float = 3.0) -> pb.ClusterStatusResponse:
    with Connection(cluster.endpoints(), tls=tls, deadline=deadline, rpc_timeout=1.0) as conn:
        return conn.call(*STATUS)


def test_the_clusters_own_client_settings_get_in(node: LocalCluster) -> None:
    assert status(node, node.client_tls()).node.role == "leader"


def test_a_plaintext_client_is_refused(node: LocalCluster) -> None:
    with pytest.raises(CoordinatorUnavailable):
        status(node, ClientTLS.plaintext(), deadline=1.0)


def test_a_node_certificate_from_another_ca_is_refused_at_once(node: LocalCluster, tmp_path: Path) -> None:
    stranger = LocalCA.create(tmp_path / "other")
    with pytest.raises(TLSHandshakeFailed, match="TLS handshake failed"):
        status(node, stranger.client_tls("admin"), deadline=10.0)  # not retried until the deadline


@pytest.mark.parametrize("port", ["raft", "metrics"])
def test_a_nodes_raft_or_metrics_port_given_as_its_grpc_port_is_named_at_once(node: LocalCluster, port: str) -> None:
    """The client reads the cluster's endpoints.json to say which port it was given."""
    me = node.nodes[0]
    started = time.monotonic()
    with pytest.raises(TLSHandshakeFailed) as caught:
        with Connection([getattr(me, port)], tls=node.client_tls(), deadline=10.0, rpc_timeout=2.0,
                        cluster_dirs=[node.root]) as conn:
            conn.call(*STATUS)
    took = time.monotonic() - started
    print(f"{port} port: TLSHandshakeFailed after {took:.2f}s: {caught.value}")
    assert took < 5.0, f"took {took:.1f}s: {caught.value}"
    role = "Raft" if port == "raft" else "metrics"
    assert (f"{getattr(me, port)}: not a gRPC port" in str(caught.value)
            and f"it is the {role} port of node0 in {node.root / 'endpoints.json'}; its gRPC port is {me.grpc}"
            in str(caught.value)), caught.value


def test_a_client_without_a_certificate_is_refused_when_one_is_required(node: LocalCluster) -> None:
    with pytest.raises(CoordinatorUnavailable):
        status(node, node.client_tls(None), deadline=1.0)


def test_an_expired_client_certificate_is_refused(node: LocalCluster) -> None:
    assert node.ca is not None
    old = node.ca.issue("client-expired", "admin", not_before=dt.datetime.now(dt.UTC) - dt.timedelta(days=2),
                        valid_for=dt.timedelta(days=1))
    expired = ClientTLS(str(node.ca.ca_file), str(old.cert_file), str(old.key_file))
    with pytest.raises(CoordinatorUnavailable):
        status(node, expired, deadline=1.0)
    # A client certificate from an unknown CA is refused the same way.
    stranger = LocalCA.create(node.root / "stranger").client("admin")
    with pytest.raises(CoordinatorUnavailable):
        status(node, ClientTLS(str(node.ca.ca_file), str(stranger.cert_file), str(stranger.key_file)), deadline=1.0)


def served_serial(cluster: LocalCluster) -> int:
    """The serial of the certificate a new handshake with the node presents."""
    tls = cluster.client_tls()
    context = ssl.create_default_context(cafile=tls.ca_file)
    context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    context.set_alpn_protocols(["h2"])
    host, port = cluster.nodes[0].grpc.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls_socket:
        der = tls_socket.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_a_certificate_rotated_on_disk_is_served_without_a_restart(node: LocalCluster) -> None:
    assert node.ca is not None
    first = served_serial(node)
    pid = node.nodes[0].process.pid
    with Connection(node.endpoints(), tls=node.client_tls()) as conn:
        conn.call(*STATUS)  # a connection made with the old certificate
        renewed = node.ca.server("node0", ["127.0.0.1"])
        assert renewed.serial != first
        wait_for(lambda: served_serial(node) == renewed.serial, "new handshakes to present the renewed certificate",
                 10)
        conn.call(*STATUS)
    assert node.nodes[0].process.pid == pid and node.nodes[0].alive
    # Half-written material (a key that is not the certificate's) is not taken: the last good one stays.
    node.ca.directory.joinpath("node0.key").write_bytes(LocalCA.create(node.root / "junk").server("x").key_file
                                                        .read_bytes())
    assert served_serial(node) == renewed.serial
    assert status(node, node.client_tls()).node.role == "leader"
    node.ca.server("node0", ["127.0.0.1"])  # and a consistent pair again is


def test_a_certificate_from_another_ca_is_not_switched_to(node: LocalCluster) -> None:
    """A valid pair from another CA written over the node's files was served, and every new
    connection failed; the node keeps the certificate it has and says why."""
    assert node.ca is not None
    served, log = served_serial(node), node.root / "node0.log"
    rogue = LocalCA.create(node.root / "rogue-ca").server("rogue", ["127.0.0.1"])
    for source, name in ((rogue.key_file, "node0.key"), (rogue.cert_file, "node0.crt")):
        temporary = node.ca.directory / f"{name}.new"
        temporary.write_bytes(source.read_bytes())
        temporary.replace(node.ca.directory / name)

    def refused() -> bool:
        # Each new handshake has the node look at its files first; every one must still verify.
        assert served_serial(node) == served
        return "fails where the served one passes" in log.read_text()

    wait_for(refused, "the node to log that it refused the certificate from another CA", 10)
    assert status(node, node.client_tls()).node.role == "leader"
    renewed = node.ca.server("node0", ["127.0.0.1"])  # the cluster's CA again: taken
    wait_for(lambda: served_serial(node) == renewed.serial, "new handshakes to present the renewed certificate", 10)


def test_status_command_with_and_without_the_right_ca(node: LocalCluster, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    endpoints = ",".join(node.endpoints())
    assert raftpoint(["status", "--endpoints", endpoints, *cli_tls(node)]) == 0
    assert "leader" in capsys.readouterr().out
    # `raftpoint cluster up` leaves the CA and an admin certificate in <data-dir>/tls: found without flags.
    assert raftpoint(["status", "--data-dir", str(node.root)]) == 0
    capsys.readouterr()
    stranger = LocalCA.create(tmp_path / "other")
    assert raftpoint(["status", "--endpoints", endpoints, "--ca-file", str(stranger.ca_file)]) == 1
    err = capsys.readouterr().err
    assert "TLS handshake failed" in err and "--ca-file" in err and "Traceback" not in err
    assert raftpoint(["status", "--endpoints", endpoints, "--ca-file", str(tmp_path / "missing.crt")]) == 2
    err = capsys.readouterr().err
    assert "missing.crt" in err and "Traceback" not in err


def run_node(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    raft, grpc, metrics = free_ports(3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTPOINT_")}
    env["RAFTPOINT_RAFT_PASSWORD"] = "a-test-password-of-32-characters"
    return subprocess.run([sys.executable, "-m", "coordinator", "--data-dir", str(tmp_path / "data"),
                           "--raft-address", f"127.0.0.1:{raft}", "--grpc-address", f"127.0.0.1:{grpc}",
                           "--metrics-address", f"127.0.0.1:{metrics}", *flags],
                          env=env, capture_output=True, text=True, timeout=30)


def _one_line_refusal(done: subprocess.CompletedProcess, code: int, *words: str) -> None:
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and all(w in lines[0] for w in words), done.stderr


def test_a_node_without_tls_material_or_insecure_refuses_to_start(tmp_path: Path) -> None:
    _one_line_refusal(run_node(tmp_path), 2, "TLS is required", "--insecure")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("case, words", [
    ("missing certificate", ("tls_cert_file", "none.crt")),
    ("key of another certificate", ("is not the key of",)),
    ("expired certificate", ("expired",)),
    ("a key as certificate", ("not a PEM certificate",)),
])
def test_bad_tls_files_stop_the_node_at_start(tmp_path: Path, case: str, words: tuple[str, ...]) -> None:
    ca = LocalCA.create(tmp_path / "ca")
    good, other = ca.server("good"), ca.server("other")
    expired = ca.server("old", not_before=dt.datetime.now(dt.UTC) - dt.timedelta(days=3),
                        valid_for=dt.timedelta(days=1))
    cert, key = {
        "missing certificate": (str(tmp_path / "none.crt"), str(good.key_file)),
        "key of another certificate": (str(good.cert_file), str(other.key_file)),
        "expired certificate": (str(expired.cert_file), str(expired.key_file)),
        "a key as certificate": (str(good.key_file), str(good.key_file)),
    }[case]
    _one_line_refusal(run_node(tmp_path, "--tls-cert-file", cert, "--tls-key-file", key), 1, *words)
    assert not (tmp_path / "data" / "state").exists()


def test_the_kubernetes_probe_checks_health_over_the_nodes_own_tls(node: LocalCluster, tmp_path: Path) -> None:
    assert node.ca is not None
    me = node.nodes[0]
    cert = node.server_certificate(me)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTPOINT_")}
    env.update({"RAFTPOINT_RAFT_PASSWORD": "an-unused-password-of-32-characters", "RAFTPOINT_RAFT_ADDRESS": me.raft,
                "RAFTPOINT_GRPC_ADDRESS": me.grpc, "RAFTPOINT_METRICS_ADDRESS": me.metrics,
                "RAFTPOINT_TLS_CERT_FILE": str(cert.cert_file), "RAFTPOINT_TLS_KEY_FILE": str(cert.key_file),
                "RAFTPOINT_TLS_CLIENT_CA_FILE": str(node.ca.ca_file), "RAFTPOINT_TLS_CLIENT_AUTH": "require"})

    def probe(extra: dict[str, str], *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "coordinator.service.probe", *args], env={**env, **extra},
                              capture_output=True, text=True, timeout=60)

    assert probe({}, "--service", "raftpoint.liveness").returncode == 0
    stranger = LocalCA.create(tmp_path / "other")
    refused = probe({"RAFTPOINT_TLS_CLIENT_CA_FILE": str(stranger.ca_file)})
    assert refused.returncode == 1 and "UNAVAILABLE" in refused.stderr and "Traceback" not in refused.stderr
