"""The wire format agents wrap their messages in: JSON, never pickle.

It carries what the receiver needs to stay consistent: the sender, its generation
and its send interval (the dependency to report, and what the coordinator checks
against the sender's rollbacks), the receiver and a per-channel sequence number (so
duplicates are recognised exactly: a channel's numbers are dense, see delivered.py),
the sender's epoch and the CIC protocol's piggyback.
"""
from __future__ import annotations

import binascii
import json
from dataclasses import dataclass
from typing import Any

VERSION = 2
_encode = json.JSONEncoder(separators=(",", ":")).encode
_decode = json.JSONDecoder().decode


def _b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode()


@dataclass(slots=True)  # treated as immutable; frozen dataclasses cost 5x per construction, on every message
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

    def to_doc(self) -> list[Any]:
        """A JSON array in a fixed order, led by the version: this runs for every message,
        and an array encodes and decodes about twice as fast as an object with keys."""
        return [VERSION, self.message_id, self.sender, self.receiver, self.generation, self.seq,
                self.send_interval, self.epoch, _b64(self.piggyback), _b64(self.payload)]

    def encode(self) -> bytes:
        return _encode(self.to_doc()).encode()

    @classmethod
    def from_doc(cls, doc: Any) -> "Envelope":
        try:
            if not isinstance(doc, list) or not doc or doc[0] != VERSION:
                raise ValueError(f"unsupported envelope version {doc[0] if isinstance(doc, list) and doc else doc!r}")
            _, message_id, sender, receiver, generation, seq, interval, epoch, piggyback, payload = doc
            return cls(str(message_id), str(sender), str(receiver), int(generation), int(seq), int(interval),
                       int(epoch), binascii.a2b_base64(piggyback), binascii.a2b_base64(payload))
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise ValueError(f"not a raftpoint envelope: {exc}") from None

    @classmethod
    def decode(cls, data: bytes) -> "Envelope":
        try:
            doc = _decode(data.decode())
        except ValueError as exc:  # UnicodeDecodeError included
            raise ValueError(f"not a raftpoint envelope: {exc}") from None
        return cls.from_doc(doc)

    @property
    def key(self) -> tuple[str, int, int]:
        """What identifies the message to its receiver's duplicate detection."""
        return self.sender, self.generation, self.seq
