"""raftpoint coordinator: a Raft-replicated checkpoint and recovery service."""

# The release of both distributions, raftpoint-agent and raftpoint (their builds read it here).
__version__ = "0.1.0"
