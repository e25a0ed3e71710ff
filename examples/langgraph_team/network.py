"""A plain network between agent processes: one directory per receiver, one file per message.

Sending writes the file under a temporary name and renames it (a receiver never sees
half a message); receiving lists the directory oldest first. A receiver removes a
message's file once it is done with it. Nothing here deduplicates or orders beyond
that: that is the protocol's job (raftpoint mode) or nobody's (stock mode).
"""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path


class Network:
    def __init__(self, root: Path) -> None:
        self.root = root

    def inbox(self, agent: str) -> Path:
        path = self.root / agent
        path.mkdir(parents=True, exist_ok=True)
        return path

    def send(self, sender: str, to: str, data: bytes) -> Path:
        name = f"{time.time_ns():020d}-{sender}-{uuid.uuid4().hex[:8]}.msg"
        tmp = self.inbox(to) / f".{name}.tmp"
        tmp.write_bytes(data)
        final = self.inbox(to) / name
        os.replace(tmp, final)
        return final

    def pending(self, agent: str) -> list[Path]:
        return sorted(p for p in self.inbox(agent).glob("*.msg"))
