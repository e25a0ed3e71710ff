"""The README's quickstart: two agents, a message, checkpoints, a crash and a restore.

Runs against an in-process coordinator (agent_client.testing) unless a cluster is
named: the data dir of `raftpoint cluster up` (`python examples/quickstart.py
raftpoint-data`: its endpoints.json, CA and admin certificate), or comma-separated
gRPC endpoints (`python examples/quickstart.py 127.0.0.1:7001,127.0.0.1:7004`, TLS
settings from RAFTPOINT_CA_FILE, RAFTPOINT_CERT_FILE and RAFTPOINT_KEY_FILE).

Against a cluster, each run uses a group of its own, `quickstart-<8 hex digits>`: a
cluster keeps a group and its agents' checkpoints after the run, and this run's
blobs (in a temporary directory) are gone, so a second run in the same group would
restore checkpoints whose blobs no longer exist. The run prints the command that
deletes its group once its agents' leases have run out.
"""
from __future__ import annotations

import json
import sys
import tempfile
import uuid
from pathlib import Path

from agent_client import connect, testing
from agent_client.tls import ClientTLS


def run(endpoints: list[str], data_dir: str, tls: ClientTLS | None = None, group_name: str = "team") -> dict:
    """`tls`: None reads RAFTPOINT_CA_FILE, RAFTPOINT_CERT_FILE and RAFTPOINT_KEY_FILE."""
    with connect(endpoints, identity="quickstart", data_dir=data_dir, tls=tls) as rp:
        group = rp.group(group_name, mode="bcs", create=True)
        with group.agent("planner", state={"sent": 0}) as planner, \
                group.agent("writer", state={"notes": []}) as writer:
            envelope = planner.send(b"outline the report", to="writer")
            planner.checkpoint({"sent": 1})
            with writer.atomic():                      # the message and its effect, together
                note = writer.receive(envelope)
                writer.state = {"notes": [note.decode()]}
            writer.checkpoint()
            assert writer.receive(envelope) is None    # a duplicate is never applied twice
        # The writer's process is gone; a new one picks up where its checkpoint left off.
        with group.agent("writer", state={"notes": []}) as writer:
            return writer.state


def cluster(where: str) -> tuple[list[str], ClientTLS | None]:
    """The endpoints and TLS settings of `where`: a `cluster up` data dir, or endpoints."""
    data = Path(where)
    if not data.is_dir():
        return where.split(","), None
    endpoints = [node["grpc"] for node in json.loads((data / "endpoints.json").read_text())]
    tls = data / "tls"
    return endpoints, ClientTLS(ca_file=str(tls / "ca.crt"), cert_file=str(tls / "client-admin.crt"),
                                key_file=str(tls / "client-admin.key"))


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as data_dir:
        if len(sys.argv) > 1:
            endpoints, tls = cluster(sys.argv[1])
            name = f"quickstart-{uuid.uuid4().hex[:8]}"
            print(run(endpoints, data_dir, tls, name))
            flags = f" --data-dir {sys.argv[1]}" if tls is not None else ""
            print(f"(group {name} stays on the cluster: `raftpoint group delete {name}{flags}` removes it once "
                  "its agents' leases have run out, 10 s after this run)", file=sys.stderr)
        else:
            with testing.coordinator() as coordinator:
                print(run([coordinator.address], data_dir, coordinator.client_tls()))
