"""The blob-store-outage fault: the S3 server agents checkpoint to hangs or dies.

Agents on Kubernetes keep their checkpoint blobs in object storage, so the store
failing is a fault of its own, apart from coordinator and agent crashes: `pause`
SIGSTOPs the server (connections hang until the client's timeouts), `kill` SIGKILLs
it mid-request (connections are refused). Healing resumes or restarts it on the same
ports and data.

The invariant it tests is the agent workload's "agent-checkpoints-readable": no
acknowledged checkpoint references a missing or damaged blob. An upload cut off by the
outage must fail the checkpoint before CommitCheckpoint; a restore during it must fail
loudly (and be retried), not fall back to an older checkpoint or accept partial state.

The agents' location should carry short timeouts (`agent_location`), so an outage
turns their operations into prompt failures rather than replies later than the
driver waits for.
"""
from __future__ import annotations

from chaos.history import History
from coordinator.harness.s3_server import S3Server

FAULT = "blob-store-outage"
PAUSE, KILL = "pause", "kill"
KINDS = (PAUSE, KILL)
# Seconds: an agent's blob request gives up well within the driver's reply timeout.
AGENT_TIMEOUTS = "connect_timeout=1&request_timeout=3&retry_timeout=4&max_retries=3"


def agent_location(server: S3Server, prefix: str) -> str:
    """The blob store location agents under this fault are given."""
    return f"{server.url(prefix)}&{AGENT_TIMEOUTS}"


class BlobStoreOutage:
    def __init__(self, server: S3Server, history: History) -> None:
        self.server, self.history = server, history
        self.current: str | None = None
        self.injected = 0

    def inject(self, kind: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"{FAULT} kind must be one of {KINDS}, not {kind!r}")
        if self.current is not None:
            raise RuntimeError(f"{FAULT} already in progress ({self.current}): heal it first")
        self.history.fault(FAULT, mode=kind, endpoint=self.server.endpoint)
        if kind == PAUSE:
            self.server.pause()
        else:
            self.server.kill()
        self.current = kind
        self.injected += 1

    def heal(self) -> None:
        if self.current is None:
            return
        if self.current == PAUSE:
            self.server.resume()
        else:
            self.server.start()
        self.history.heal(FAULT, mode=self.current, endpoint=self.server.endpoint)
        self.current = None
