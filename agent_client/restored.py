"""What restoring a checkpoint came to: the state handed back to the agent and why.

Both clients return these from restore() and obey(), and the protocol keeps the last
one to tell a rollback order it need not restore again (protocol.py).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from agent_client.restore_check import RejectReason


class RestoreKind(enum.Enum):
    COLD_START = "cold start"
    RESUME = "resume"
    ROLLBACK = "rollback order"
    REJECTED = "rejected"


@dataclass(frozen=True)
class Restored:
    state: Any  # the agent's state (bytes or JSON value) or None
    index: int
    reason: str  # "cold start: ...", "resume from checkpoint N", "rollback order ...", "rejected: <why>: ..."
    kind: RestoreKind = RestoreKind.RESUME
    rejected: RejectReason | None = None
