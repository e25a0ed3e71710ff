"""The wire format agents wrap their messages in: JSON, never pickle.

It carries what the receiver needs to stay consistent: a unique message id (so
duplicates are delivered once), the sender and its send interval (the dependency
to report), the sender's epoch and the CIC protocol's piggyback.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass

VERSION = 1


@dataclass(frozen=True)
class Envelope:
    message_id: str
    sender: str
    send_interval: int
    epoch: int
    piggyback: bytes
    payload: bytes

    def encode(self) -> bytes:
        return json.dumps({"v": VERSION, "id": self.message_id, "from": self.sender, "interval": self.send_interval,
                           "epoch": self.epoch, "pb": base64.b64encode(self.piggyback).decode(),
                           "payload": base64.b64encode(self.payload).decode()}, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> "Envelope":
        try:
            doc = json.loads(data)
            if doc["v"] != VERSION:
                raise ValueError(f"unsupported envelope version {doc['v']}")
            return cls(doc["id"], doc["from"], int(doc["interval"]), int(doc["epoch"]),
                       base64.b64decode(doc["pb"]), base64.b64decode(doc["payload"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a raftpoint envelope: {exc}") from None
