"""The receiver's log of the messages it delivered, to re-deliver what a rollback forgets.

When an agent rolls back to checkpoint c, the messages it delivered after c leave
its state. Their senders do not send them again unless their own sends were undone
too: a sender that kept running, or rolled back to a point after the send, still
counts the message as sent. So the receiver logs every message before handing it
to the agent, and after a rollback re-delivers the logged ones whose send the
recovery line kept. In coordinated mode these include the channel state of the cut
(messages sent before the sender's cut and received after the receiver's): the
Chandy-Lamport/Lai-Yang in-transit messages are the special case of a line whose
agents all roll back to one epoch.

Records are JSON lines holding the envelope as received. An append is one write()
on an open file: it survives a crash of the agent process (the kernel has it), and
with fsync=True also a power loss, at the cost of an fsync per delivered message;
otherwise the log is fsynced at every checkpoint. A crash can only tear the last
line; reopening drops it. Records no rollback can reach any more (received before a
checkpoint that can no longer be rolled back past) are dropped by truncate().
Without a path the log lives in memory: rollbacks of a running agent are covered,
crashes are not.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable

from agent_client.blobs.durable import atomic_write, ensure_dir
from agent_client.envelope import Envelope
from coordinator import fsutil


class DeliveryLogCorrupted(Exception):
    """A record other than the last is unreadable: not a torn write, the file is damaged."""


@dataclass(slots=True, eq=False)  # identity: the same message may be logged again after a rollback
class LoggedDelivery:
    after_checkpoint: int  # the receiver's last checkpoint index when it delivered the message
    envelope: Envelope
    raw: bytes  # the envelope as JSON, logged verbatim

    def to_line(self) -> bytes:
        return b'{"after":%d,"env":%s}\n' % (self.after_checkpoint, self.raw)

    @classmethod
    def from_line(cls, line: bytes) -> "LoggedDelivery":
        doc = json.loads(line)
        envelope = Envelope.from_doc(doc["env"])
        return cls(int(doc["after"]), envelope, envelope.encode())

    @classmethod
    def of(cls, after_checkpoint: int, envelope: Envelope, raw: bytes | None = None) -> "LoggedDelivery":
        if raw is None or b"\n" in raw:  # a line per record: re-encode anything that is not one line
            raw = envelope.encode()
        return cls(after_checkpoint, envelope, raw)


class DeliveryLog:
    def __init__(self, path: str | Path | None = None, *, fsync: bool = False) -> None:
        self.path = None if path is None else Path(path)
        self.fsync = fsync
        self._lock = threading.Lock()
        self._entries: list[LoggedDelivery] = self._load()
        self._file: BinaryIO | None = None

    def _load(self) -> list[LoggedDelivery]:
        if self.path is None or not self.path.exists():
            return []
        lines = self.path.read_bytes().split(b"\n")
        complete, tail = lines[:-1], lines[-1]  # `tail` is b"" unless the last append was torn
        entries = []
        for number, line in enumerate(complete, 1):
            try:
                entries.append(LoggedDelivery.from_line(line))
            except (ValueError, KeyError, TypeError) as exc:
                if number == len(complete) and not tail:
                    tail = line  # the last complete-looking line can still be torn mid-record
                    break
                raise DeliveryLogCorrupted(f"{self.path}: record {number} is unreadable ({exc!r})") from None
        if tail:
            atomic_write(self.path, b"".join(e.to_line() for e in entries))
        return entries

    def _open(self) -> BinaryIO | None:
        if self._file is None and self.path is not None:
            ensure_dir(self.path.parent)
            new = not self.path.exists()
            self._file = open(self.path, "ab", buffering=0)
            if new:
                fsutil.fsync_dir(self.path.parent)
        return self._file

    def append(self, entry: LoggedDelivery) -> None:
        """Log before delivering (the caller hands the payload over only afterwards)."""
        with self._lock:
            f = self._open()
            if f is not None:
                f.write(entry.to_line())
                if self.fsync:
                    fsutil.fsync_file(f.fileno())
            self._entries.append(entry)

    def since(self, checkpoint: int) -> list[LoggedDelivery]:
        """Messages delivered after checkpoint `checkpoint`, in delivery order: those a
        rollback to it takes out of the agent's state."""
        with self._lock:
            return [e for e in self._entries if e.after_checkpoint >= checkpoint]

    def drop(self, entries: Iterable[LoggedDelivery]) -> None:
        """Forget these records (after re-delivering them, which logged them anew)."""
        gone = {id(e) for e in entries}
        if gone:
            with self._lock:
                self._rewrite([e for e in self._entries if id(e) not in gone])

    def truncate(self, stable_checkpoint: int) -> int:
        """Drop records of messages delivered before a checkpoint no rollback can go
        behind; returns how many were dropped."""
        with self._lock:
            keep = [e for e in self._entries if e.after_checkpoint >= stable_checkpoint]
            dropped = len(self._entries) - len(keep)
            if dropped:
                self._rewrite(keep)
            return dropped

    def _rewrite(self, keep: list[LoggedDelivery]) -> None:
        if self.path is not None:
            if self._file is not None:
                self._file.close()
                self._file = None
            atomic_write(self.path, b"".join(e.to_line() for e in keep))
        self._entries = keep

    def sync(self) -> None:
        with self._lock:
            if self._file is not None:
                fsutil.fsync_file(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __len__(self) -> int:
        return len(self._entries)
