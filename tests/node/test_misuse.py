"""Operator mistakes stop a node with a message that says what to fix, before it opens any state."""
from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agent_client.testing import InProcessCoordinator
from coordinator.harness.in_process import LocalReplica
from coordinator.harness.certs import LocalCA
from coordinator.harness.local_cluster import free_ports
from coordinator.service import node_server
from coordinator.storage.dir_lock import DataDirInUse, DataDirLock


def run_node(data_dir: Path, raft: int, grpc: int, metrics: int) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTPOINT_")}
    env["RAFTPOINT_RAFT_PASSWORD"] = "a test cluster password"
    ca = LocalCA.create(data_dir.parent / f"{data_dir.name}-tls")
    node = ca.server("node")
    bindings = data_dir.parent / f"{data_dir.name}-bindings.toml"
    bindings.write_text('["admin"]\nrole = "admin"\n')
    return subprocess.run([sys.executable, "-m", "coordinator", "--data-dir", str(data_dir),
                           "--raft-address", f"127.0.0.1:{raft}", "--grpc-address", f"127.0.0.1:{grpc}",
                           "--metrics-address", f"127.0.0.1:{metrics}", "--tls-cert-file", str(node.cert_file),
                           "--tls-key-file", str(node.key_file), "--tls-client-ca-file", str(ca.ca_file),
                           "--tls-client-auth", "require", "--auth-bindings-file", str(bindings)],
                          env=env, capture_output=True, text=True, timeout=30)


def test_a_second_lock_on_a_data_dir_is_refused_naming_the_holder(tmp_path: Path) -> None:
    with DataDirLock(tmp_path):
        with pytest.raises(DataDirInUse, match=f"PID {os.getpid()}"):
            DataDirLock(tmp_path).acquire()
    with DataDirLock(tmp_path):  # released: free again
        pass


def test_a_node_on_a_data_dir_in_use_stops_with_the_holders_pid(tmp_path: Path) -> None:
    with DataDirLock(tmp_path):
        done = run_node(tmp_path, *free_ports(3))
    assert done.returncode == 1, done.stderr
    assert f"is in use by another coordinator (PID {os.getpid()}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "state").exists(), "the refused node opened the store"


def test_a_raft_port_in_use_stops_the_node_naming_the_address(tmp_path: Path) -> None:
    raft, grpc, metrics = free_ports(3)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", raft))
        taken.listen()
        done = run_node(tmp_path, raft, grpc, metrics)
    assert done.returncode == 1, done.stderr
    assert f"cannot bind Raft address 127.0.0.1:{raft}" in done.stderr
    assert "Traceback" not in done.stderr


async def test_a_grpc_port_another_coordinator_serves_is_not_shared() -> None:
    with InProcessCoordinator() as other:
        with pytest.raises(OSError, match=f"cannot bind gRPC address {other.address}"):
            await asyncio.wait_for(node_server.serve(LocalReplica(other.address), other.address,
                                                     asyncio.Event()), 10)


def test_a_plaintext_node_taking_tokens_warns_that_they_travel_in_the_clear(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from coordinator.config import NodeConfig
    from coordinator.main import authorizer_of

    tokens, bindings = tmp_path / "tokens", tmp_path / "bindings.toml"
    tokens.write_text("")
    bindings.write_text('["admin"]\nrole = "admin"\n')
    password = "a test cluster password"
    assert authorizer_of(NodeConfig(insecure=True, raft_password=password, auth_tokens_file=str(tokens),
                                    auth_bindings_file=str(bindings))) is not None
    warned = capsys.readouterr().err
    assert "WARNING" in warned and "PLAINTEXT" in warned and "registration secret" in warned, warned
    # With TLS the same tokens are encrypted on the wire: no such warning.
    ca = LocalCA.create(tmp_path / "tls")
    node = ca.server("node")
    authorizer_of(NodeConfig(raft_password=password, auth_tokens_file=str(tokens), auth_bindings_file=str(bindings),
                             tls_cert_file=str(node.cert_file), tls_key_file=str(node.key_file)))
    assert "PLAINTEXT" not in capsys.readouterr().err
