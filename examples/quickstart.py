"""The README's quickstart: two agents, a message, checkpoints, a crash and a restore.

Runs against an in-process coordinator (agent_client.testing) unless endpoints are
given: `python examples/quickstart.py 127.0.0.1:50051,127.0.0.1:50052,127.0.0.1:50053`.
"""
from __future__ import annotations

import sys
import tempfile

from agent_client import connect, testing
from agent_client.tls import ClientTLS


def run(endpoints: list[str], data_dir: str, tls: ClientTLS | None = None) -> dict:
    """`tls`: None reads RAFTPOINT_CA_FILE, RAFTPOINT_CERT_FILE and RAFTPOINT_KEY_FILE."""
    with connect(endpoints, identity="quickstart", data_dir=data_dir, tls=tls) as rp:
        group = rp.group("team", mode="bcs", create=True)
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


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as data_dir:
        if len(sys.argv) > 1:
            print(run(sys.argv[1].split(","), data_dir))
        else:
            with testing.coordinator() as coordinator:
                print(run([coordinator.address], data_dir, coordinator.client_tls()))
