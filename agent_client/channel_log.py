"""The receiver's log of in-transit messages: the channel state of a checkpoint.

In coordinated (Chandy-Lamport / Lai-Yang style) checkpointing, a message sent before
the sender's cut and received after the receiver's cut belongs to neither checkpoint.
After a rollback to that cut nobody would re-send it, so the receiver records it and
re-delivers it itself. Records are JSON lines, fsynced before the message is handed to
the agent (otherwise a crash could lose a message the sender already considers sent).
A crash can only tear the last line; reopening drops and trims it. Messages already
covered by a stable checkpoint are dropped by truncate(), by atomic rewrite.
"""
from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass
from pathlib import Path

from agent_client.blobs.durable import append_durably, atomic_write


class ChannelLogCorrupted(Exception):
    """A record other than the last is unreadable: not a torn write, the file is damaged."""


@dataclass(frozen=True)
class LoggedMessage:
    message_id: str
    sender: str
    payload: bytes
    epoch: int
    after_checkpoint: int  # the receiver's last checkpoint index when it received the message

    def to_line(self) -> bytes:
        return json.dumps({"id": self.message_id, "from": self.sender, "epoch": self.epoch,
                           "after": self.after_checkpoint, "payload": base64.b64encode(self.payload).decode()},
                          sort_keys=True, separators=(",", ":")).encode() + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> "LoggedMessage":
        doc = json.loads(line)
        return cls(str(doc["id"]), str(doc["from"]), base64.b64decode(doc["payload"], validate=True),
                   int(doc["epoch"]), int(doc["after"]))


class ChannelLog:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._messages: list[LoggedMessage] = self._load()
        self._ids = {m.message_id for m in self._messages}

    def _load(self) -> list[LoggedMessage]:
        if not self.path.exists():
            return []
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        complete, tail = lines[:-1], lines[-1]  # `tail` is b"" unless the last append was torn
        messages = []
        for number, line in enumerate(complete, 1):
            try:
                messages.append(LoggedMessage.from_line(line))
            except (ValueError, KeyError, TypeError) as exc:
                if number == len(complete) and not tail:
                    # the last complete-looking line can still be torn mid-record by a crash
                    tail = line
                    break
                raise ChannelLogCorrupted(f"{self.path}: record {number} is unreadable ({exc!r})") from None
        if tail:
            atomic_write(self.path, b"".join(m.to_line() for m in messages))
        return messages

    def record(self, message_id: str, sender: str, payload: bytes, epoch: int, *, after_checkpoint: int) -> bool:
        """Log before delivering; False (and nothing written) for a message already logged."""
        message = LoggedMessage(message_id, sender, bytes(payload), int(epoch), int(after_checkpoint))
        with self._lock:
            if message_id in self._ids:
                return False
            append_durably(self.path, message.to_line())
            self._messages.append(message)
            self._ids.add(message_id)
            return True

    def replay(self, after_checkpoint: int, *, sent_before_epoch: int | None = None) -> list[LoggedMessage]:
        """Messages received after checkpoint `after_checkpoint`, in receive order: what to
        re-deliver after rolling back to it. `sent_before_epoch` keeps only messages the
        sender sent before its cut for that epoch (the in-transit ones): messages sent
        later are re-sent by the rolled-back sender itself."""
        with self._lock:
            return [m for m in self._messages if m.after_checkpoint >= after_checkpoint
                    and (sent_before_epoch is None or m.epoch < sent_before_epoch)]

    def truncate(self, stable_checkpoint: int) -> int:
        """Drop messages a stable checkpoint already covers (received before it); no
        rollback can go behind a stable checkpoint, so they are never replayed. Returns
        how many were dropped."""
        with self._lock:
            keep = [m for m in self._messages if m.after_checkpoint >= stable_checkpoint]
            dropped = len(self._messages) - len(keep)
            if dropped:
                atomic_write(self.path, b"".join(m.to_line() for m in keep))
                self._messages = keep
                self._ids = {m.message_id for m in keep}
            return dropped

    def __len__(self) -> int:
        return len(self._messages)
