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
from coordinator.harness.local_cluster import free_ports, wait_for
from coordinator.service import node_server, ports
from coordinator.storage.dir_lock import DataDirInUse, DataDirLock


def node_command(data_dir: Path, raft: int, grpc: int, metrics: int, host: str = "127.0.0.1",
                 program: tuple[str, ...] = ("-m", "coordinator")) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of a one-node TLS cluster listening on `host`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTPOINT_")}
    env["RAFTPOINT_RAFT_PASSWORD"] = "a test cluster password"
    ca = LocalCA.create(data_dir.parent / f"{data_dir.name}-tls")
    node = ca.server("node")
    bindings = data_dir.parent / f"{data_dir.name}-bindings.toml"
    bindings.write_text('["admin"]\nrole = "admin"\n')
    return [sys.executable, *program, "--data-dir", str(data_dir),
            "--raft-address", f"{host}:{raft}", "--grpc-address", f"{host}:{grpc}",
            "--metrics-address", f"{host}:{metrics}", "--tls-cert-file", str(node.cert_file),
            "--tls-key-file", str(node.key_file), "--tls-client-ca-file", str(ca.ca_file),
            "--tls-client-auth", "require", "--auth-bindings-file", str(bindings)], env


def run_node(data_dir: Path, raft: int, grpc: int, metrics: int) -> subprocess.CompletedProcess:
    command, env = node_command(data_dir, raft, grpc, metrics)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)


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


# ---- a node's own name while DNS settles ----------------------------------------------
SETTLING_NAME = "raftpoint-0.settling.test"
# Runs the node with SETTLING_NAME resolving (to 127.0.0.1) for the node's own checks,
# while pysyncobj's resolver, asked later, finds nothing: a name that resolved once
# and then not.
RESOLVES_ONCE_THEN_NOT = f"""
import runpy, socket, sys
import pysyncobj.dns_resolver as dns
real = socket.getaddrinfo
socket.getaddrinfo = lambda host, *a, **k: real("127.0.0.1" if host == {SETTLING_NAME!r} else host, *a, **k)
resolve = dns.DnsCachingResolver._DnsCachingResolver__doResolve
dns.DnsCachingResolver._DnsCachingResolver__doResolve = (
    lambda self, host: [] if host == {SETTLING_NAME!r} else resolve(self, host))
sys.argv[0] = "coordinator"
runpy.run_module("coordinator", run_name="__main__")
"""


def test_a_name_that_stops_resolving_after_the_checks_does_not_stop_the_node(tmp_path: Path) -> None:
    raft, grpc, metrics = free_ports(3)
    command, env = node_command(tmp_path / "data", raft, grpc, metrics, host=SETTLING_NAME,
                                program=("-c", RESOLVES_ONCE_THEN_NOT))
    with open(tmp_path / "node.log", "w+") as log:
        node = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            def raft_port_listens() -> bool:
                assert node.poll() is None, f"the node exited with {node.returncode}: {log_text()}"
                with socket.socket() as probe:
                    return probe.connect_ex(("127.0.0.1", raft)) == 0

            def log_text() -> str:
                log.seek(0)
                return log.read()

            wait_for(raft_port_listens, f"the node's Raft port 127.0.0.1:{raft} to listen", 30, 0.1)
        finally:
            node.terminate()
            node.wait(30)
        text = log_text()
    assert node.returncode == 0, text
    assert "Traceback" not in text and "TypeError" not in text, text


def test_a_name_that_resolves_within_the_wait_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [socket.gaierror(socket.EAI_NONAME, "Name or service not known")] * 2
    real = socket.getaddrinfo

    def settling(host: str, *args: object, **kwargs: object) -> list:
        if answers:
            raise answers.pop()
        return real("127.0.0.1", *args, **kwargs)
    monkeypatch.setattr(socket, "getaddrinfo", settling)
    slept: list[float] = []
    assert ports.resolve("raftpoint-0.settling.test:7000", "Raft", 5, slept.append)[1] == ("127.0.0.1", 7000)
    assert slept == [ports.RESOLVE_RETRY_S] * 2
    with pytest.raises(ports.PortUnavailable, match=r"cannot bind Raft address raftpoint-0\.settling\.test:7000: "
                                                    r"Name or service not known$"):
        answers.append(socket.gaierror(socket.EAI_NONAME, "Name or service not known"))
        ports.resolve("raftpoint-0.settling.test:7000", "Raft", 0, slept.append)
