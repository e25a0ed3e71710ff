"""Token-passing agents with a ground-truth ledger, shared by `raftpoint demo` and the chaos agent workload.

Agents are real processes linked to agent_client (`agent`), driven over a network the
driver plays (`traffic`, `process`); the `ledger` records every message and judges
each recovery by generations: tokens conserved, no orphan delivered, lost messages
re-delivered exactly once. None of it is part of what an agent links.
"""
