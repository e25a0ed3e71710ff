"""Three coordinator processes configured exactly as the StatefulSet configures its pods.

Each "pod" gets the rendered ConfigMap as its environment plus the downward-API pod
name; the stable names `raftpoint-<i>.raftpoint-peers` resolve to 127.0.0.1<i> through
an /etc/hosts bind-mounted in a private mount namespace (the real /etc/hosts is never
touched). Only the data and secret paths are redirected into the test's directory,
as the PVC and Secret mounts would provide them.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_client.connection import Connection
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.certs import LocalCA
from coordinator.harness.local_cluster import node_status, wait_for
from tests.deploy.test_manifests import one, render

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
HEADLESS = "raftpoint-peers"


def _can_isolate() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_isolate(), reason="needs root and unshare --mount for a private /etc/hosts")
def test_statefulset_configured_nodes_form_a_cluster_and_heal(tmp_path: Path) -> None:
    docs = render("dev")
    env_from_configmap = one(docs, "ConfigMap", "raftpoint-config")["data"]
    replicas = one(docs, "StatefulSet")["spec"]["replicas"]
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n" + "".join(
        f"127.0.0.{11 + i} raftpoint-{i}.{HEADLESS}\n" for i in range(replicas)))
    secret = tmp_path / "raft-password"
    secret.write_text("pod-like-cluster-secret\n")
    grpc = {i: f"127.0.0.{11 + i}:{env_from_configmap['RAFTPOINT_GRPC_PORT']}" for i in range(replicas)}
    procs: dict[int, subprocess.Popen] = {}
    # What the raftpoint-tls Secret would hold: one node certificate naming every pod
    # (and, for this test's direct dialling, their loopback IPs).
    ca = LocalCA.create(tmp_path / "tls")
    node_cert = ca.server("node", [*(f"raftpoint-{i}.{HEADLESS}" for i in range(replicas)),
                                   *(a.rsplit(":", 1)[0] for a in grpc.values())])
    # What the raftpoint-auth ConfigMap would mount: its bindings, as rendered.
    bindings = tmp_path / "bindings.toml"
    bindings.write_text(one(docs, "ConfigMap", "raftpoint-auth")["data"]["bindings.toml"])
    tls_env = {"RAFTPOINT_TLS_CERT_FILE": str(node_cert.cert_file), "RAFTPOINT_TLS_KEY_FILE": str(node_cert.key_file),
               "RAFTPOINT_TLS_CLIENT_CA_FILE": str(ca.ca_file), "RAFTPOINT_AUTH_BINDINGS_FILE": str(bindings)}
    admin = ca.client_tls("admin")

    def start(i: int) -> None:
        env = {**os.environ, **env_from_configmap, "RAFTPOINT_POD_NAME": f"raftpoint-{i}",
               "RAFTPOINT_DATA_DIR": str(tmp_path / f"pvc-{i}"), "RAFTPOINT_RAFT_PASSWORD_FILE": str(secret),
               "RAFTPOINT_RAFT_MIN_TIMEOUT": env_from_configmap["RAFTPOINT_RAFT_MIN_TIMEOUT"], **tls_env}
        command = f'mount --bind "{hosts}" /etc/hosts && exec "{sys.executable}" -m raftpoint.cli.main coordinator'
        log = open(tmp_path / f"pod-{i}.log", "ab")
        procs[i] = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", command],
                                    env=env, stdout=log, stderr=log, start_new_session=True)

    def leader() -> list[int]:
        """[index of the leader], empty while there is none (0 is a valid index)."""
        for i in procs:
            status = node_status(grpc[i], tls=admin)
            if status is not None and status.role == "leader":
                return [i]
        return []

    try:
        for i in range(replicas):
            start(i)
        [first] = wait_for(leader, "a leader among the pods", 60, 0.2)
        # Redirects name the leader by its stable name, which only the pods resolve:
        # talk to the leader's IP directly.
        conn = Connection([grpc[first]], deadline=30, tls=admin)
        conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="pod-g", spec=pb.GroupSpec(group="g", mode=pb.CIC_BCS, lease_ttl_s=3600)))
        conn.call("AgentService", "Register", pb.RegisterRequest(secret=b"s" * 16, request_id="pod-r", group="g", agent_id="a"))
        victim = next(i for i in range(replicas) if i != first)
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait(10)
        shutil.rmtree(tmp_path / f"pvc-{victim}")  # the rescheduled pod gets an empty volume
        conn.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
            request_id="pod-c", token=pb.FencingToken(secret=b"s" * 16, incarnation=1),
            checkpoint=pb.CheckpointMeta(group="g", agent_id="a", index=1, kind=pb.BASIC,
                                         blob_uri="file:///b/1", sha256="e" * 64, size=1)))
        start(victim)

        def healed() -> bool:
            statuses = [node_status(grpc[i], tls=admin) for i in range(replicas)]
            return all(statuses) and len({s.content_digest for s in statuses}) == 1 and \
                len({s.applied_index for s in statuses}) == 1
        wait_for(healed, "the replaced pod to catch up", 60, 0.2)
        assert node_status(grpc[victim], tls=admin).applied_index > 0
        conn.close()
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 10
        for p in procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
