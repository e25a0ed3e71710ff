"""The wire format agents wrap their messages in: JSON, never pickle.

It carries what the receiver needs to stay consistent: the sender, its generation
and its send interval (the dependency to report, and what the coordinator checks
against the sender's rollbacks), the receiver and a per-channel sequence number (so
duplicates are recognised exactly: a channel's numbers are dense, see delivered.py),
the sender's epoch and the CIC protocol's piggyback.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

VERSION = 2
_encode = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


@dataclass(frozen=True)
class Envelope:
    message_id: str  # unique per sender
    sender: str
    receiver: str
    generation: int  # the sender's generation at the send
    seq: int  # position in the sender -> receiver channel within that generation, from 1
    send_interval: int
    epoch: int
    piggyback: bytes
    payload: bytes

    def to_doc(self) -> dict[str, Any]:
        return {"v": VERSION, "id": self.message_id, "from": self.sender, "to": self.receiver,
                "gen": self.generation, "seq": self.seq, "interval": self.send_interval, "epoch": self.epoch,
                "pb": base64.b64encode(self.piggyback).decode(), "payload": base64.b64encode(self.payload).decode()}

    def encode(self) -> bytes:
        return _encode(self.to_doc()).encode()

    @classmethod
    def from_doc(cls, doc: Any) -> "Envelope":
        try:
            if doc["v"] != VERSION:
                raise ValueError(f"unsupported envelope version {doc['v']}")
            return cls(str(doc["id"]), str(doc["from"]), str(doc["to"]), int(doc["gen"]), int(doc["seq"]),
                       int(doc["interval"]), int(doc["epoch"]), base64.b64decode(doc["pb"]),
                       base64.b64decode(doc["payload"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a raftpoint envelope: {exc}") from None

    @classmethod
    def decode(cls, data: bytes) -> "Envelope":
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise ValueError(f"not a raftpoint envelope: {exc}") from None
        return cls.from_doc(doc)

    @property
    def key(self) -> tuple[str, int, int]:
        """What identifies the message to its receiver's duplicate detection."""
        return self.sender, self.generation, self.seq
