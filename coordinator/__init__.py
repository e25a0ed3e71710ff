"""raftpoint coordinator: a Raft-replicated checkpoint and recovery service."""
