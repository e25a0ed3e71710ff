"""One token-passing agent process for `raftpoint demo` (and the crash tests).

It is a real process linked to AgentClient, so a SIGKILL really loses its volatile
state. The demo driver talks to it over stdin/stdout, one JSON object per line, one
reply per command (logs go to stderr); the driver plays the network, so it knows
which messages are in flight when it audits the token total.

Crash hooks: with RAFTPOINT_DEMO_CRASH_AFTER_BLOB=N the process SIGKILLs itself right
after writing the blob of its N-th checkpoint, before committing the metadata; with
RAFTPOINT_DEMO_CRASH_AFTER_COMMIT=N, right after the coordinator applied the commit of
its N-th checkpoint, before the agent has seen the answer. The `arm` command sets the
same crashes on a running process (at its next checkpoint), a crash in the middle of
its next rollback (restored, not yet acknowledged), or the loss of its next
re-delivery (a planted fault; RAFTPOINT_DEMO_DROP_REDELIVERIES=N loses the first N
from the start, including those the restart itself makes). `apply` is another
planted fault: a payload applied without unwrap() and its checks.

After a rollback the client re-delivers the messages the rollback took out of the
state whose sends the recovery line kept (on_redeliver): the driver never re-sends.

With --events the process appends what the driver cannot see in its replies to a
JSON Lines journal, each record written before its consequences can happen, so a
SIGKILL never hides one: acknowledged checkpoints, the recovery lines of the rollback
orders it carries out (with the tokens each restored), and the messages it re-delivers.
"""
from __future__ import annotations

import argparse
import base64
import faulthandler
import json
import logging
import os
import random
import signal
import sys
import threading
from typing import Any, TextIO

from agent_client.agent import AgentClient, RestoreKind
from agent_client.blobstore import PutResult
from agent_client.connection import token_from_env
from agent_client.envelope import Envelope
from coordinator.api.v1 import coordinator_pb2 as pb

CRASH_ENV = "RAFTPOINT_DEMO_CRASH_AFTER_BLOB"
CRASH_AFTER_COMMIT_ENV = "RAFTPOINT_DEMO_CRASH_AFTER_COMMIT"
DROP_REDELIVERIES_ENV = "RAFTPOINT_DEMO_DROP_REDELIVERIES"  # planted: lose this many re-deliveries
# What `arm` can set up, for the chaos workload's agent faults.
AFTER_BLOB, AFTER_COMMIT = "after-blob", "after-commit"
MID_ROLLBACK, DROP_REDELIVERY = "mid-rollback", "drop-redelivery"
ARMABLE = (AFTER_BLOB, AFTER_COMMIT, MID_ROLLBACK, DROP_REDELIVERY)


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


class Journal:
    """The --events file: one JSON object per line, flushed at once (a SIGKILL keeps what
    the kernel has); without a path, nothing is written."""

    def __init__(self, path: str | None) -> None:
        self._file: TextIO | None = open(path, "a", encoding="utf-8") if path else None
        self._lock = threading.Lock()
        if self._file is not None and self._file.tell() and not _ends_with_newline(path):
            self._file.write("\n")  # end a record torn by the previous incarnation's SIGKILL

    def write(self, event: str, **fields: Any) -> None:
        if self._file is None:
            return
        with self._lock:
            self._file.write(json.dumps({"ev": event, "pid": os.getpid(), **fields}) + "\n")
            self._file.flush()


class TokenAgent:
    def __init__(self, args: argparse.Namespace) -> None:
        self.initial = args.tokens
        self.state: dict[str, int] = {"tokens": args.tokens, "work": 0}
        self.rng = random.Random(f"{args.agent}-{os.getpid()}")
        self._blobs_written = self._commits = 0
        self._crash_after = int(os.environ.get(CRASH_ENV, "0") or 0)
        self._crash_after_commit = int(os.environ.get(CRASH_AFTER_COMMIT_ENV, "0") or 0)
        self._crash_mid_rollback = False
        self._drop_redeliveries = int(os.environ.get(DROP_REDELIVERIES_ENV, "0") or 0)
        self._restored_tokens: int | None = None  # by the rollback order being carried out
        self.journal = Journal(args.events)
        # --blob-dir is a blob store location: a directory or s3://bucket/prefix?endpoint=...
        self.client = AgentClient(args.group, args.agent, args.endpoints.split(","), args.blob_dir,
                                  state_dir=args.state_dir or None,
                                  snapshot=lambda: dict(self.state), on_rollback=self._rolled_back,
                                  on_redeliver=self._redelivered,
                                  members=args.members.split(",") if args.members else (),
                                  after_blob_write=self._maybe_crash, after_commit=self._committed,
                                  before_ack=self._before_ack, deadline=args.deadline, token=token_from_env(),
                                  inline_max_bytes=args.inline_max_bytes)

    def _maybe_crash(self, blob: PutResult) -> None:
        self._blobs_written += 1
        if self._crash_after and self._blobs_written >= self._crash_after:
            self._die({"crashing": "after blob write", "blob": blob.uri})

    def _committed(self, meta: pb.CheckpointMeta) -> None:
        """The coordinator answered the commit: journal it, then maybe die before using the answer."""
        c = self.client
        self.journal.write("commit", index=meta.index, epoch=meta.epoch, kind=pb.CheckpointKind.Name(meta.kind),
                           uri=meta.blob_uri, sha256=meta.sha256, incarnation=c.incarnation, generation=c.generation)
        self._commits += 1
        if self._crash_after_commit and self._commits >= self._crash_after_commit:
            self._die({"crashing": "after commit, before the answer", "index": meta.index, "blob": meta.blob_uri})

    def _before_ack(self, order: pb.Order) -> None:
        if order.WhichOneof("kind") != "roll_back":
            return
        rb = order.roll_back
        # The tokens it restored, if this order restored a checkpoint (a restarted agent that
        # resumed there already restores nothing): re-deliveries come after the acknowledgement.
        restored, self._restored_tokens = self._restored_tokens, None
        self.journal.write("line", recovery_id=rb.recovery_id, order=order.order_id, index=rb.checkpoint_index,
                           line=[[t.agent_id, t.checkpoint_index, t.generation] for t in rb.line],
                           **({} if restored is None else {"tokens": restored}))
        if self._crash_mid_rollback:
            self._die({"crashing": "mid-rollback, restored but not acknowledged", "order": order.order_id})

    def arm(self, fault: str) -> dict[str, Any]:
        """Set up a fault in this process: a crash at its next checkpoint (after the blob
        write or after the commit), a crash in its next rollback, or losing its next
        re-delivery."""
        with self.client.atomic():
            if fault == AFTER_BLOB:
                self._crash_after = self._blobs_written + 1
            elif fault == AFTER_COMMIT:
                self._crash_after_commit = self._commits + 1
            elif fault == MID_ROLLBACK:
                self._crash_mid_rollback = True
            elif fault == DROP_REDELIVERY:
                self._drop_redeliveries += 1
            else:
                raise ValueError(f"cannot arm {fault!r}; known: {', '.join(ARMABLE)}")
            return {"armed": fault}

    @staticmethod
    def _die(why: dict[str, Any]) -> None:
        print(json.dumps(why), file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    def _load(self, state: Any) -> None:
        self.state = dict(state) if state is not None else {"tokens": self.initial, "work": 0}

    def _rolled_back(self, state: Any, reason: str) -> None:
        self._load(state)
        self._restored_tokens = self.state["tokens"]

    def _redelivered(self, payload: bytes, sender: str) -> None:
        if self._drop_redeliveries:  # planted: the message is lost for good (the client counts it delivered)
            self._drop_redeliveries -= 1
            return
        message_id, interval = self.client.redelivered[-1]
        self.journal.write("redelivered", id=message_id, sender=sender, interval=interval,
                           generation=self.client.generation)
        self._apply(payload)

    def _apply(self, payload: bytes) -> None:
        self.state["tokens"] += int(json.loads(payload)["tokens"])
        self.state["work"] += 1

    def start(self) -> dict[str, Any]:
        with self.client.atomic():  # the order thread must not re-deliver into the state before it is loaded
            self.client.register()
            restored = self.client.restore()
            if restored.kind is RestoreKind.REJECTED:
                raise RuntimeError(f"cannot resume: {restored.reason}")
            self._load(restored.state)
            self.client.sync_orders()
            self.journal.write("ready", incarnation=self.client.incarnation, generation=self.client.generation,
                               index=restored.index)
            return {"ready": True, "incarnation": self.client.incarnation, "index": restored.index,
                    "restore": restored.reason, "restore_kind": restored.kind.value,
                    "generation": self.client.generation,
                    "redelivered": [list(r) for r in self.client.redelivered], **self.state}

    # ---- commands -------------------------------------------------------------------
    def send(self, to: str) -> dict[str, Any]:
        with self.client.atomic():
            if self.state["tokens"] <= 0:
                return {"envelope": None}
            amount = self.rng.randint(1, max(1, self.state["tokens"] // 3))
            envelope = self.client.wrap(json.dumps({"tokens": amount}).encode(), to)
            self.state["tokens"] -= amount
            self.state["work"] += 1
            env = Envelope.decode(envelope)
        return {"envelope": base64.b64encode(envelope).decode(), "amount": amount, "id": env.message_id,
                "interval": env.send_interval, "generation": env.generation}

    def deliver(self, envelope: str) -> dict[str, Any]:
        """`generation` and `interval` place the delivery (or the refusal) in this agent's
        history, so the driver can tell which rollbacks undid it."""
        with self.client.atomic():
            forced, orphans = self.client.forced, self.client.orphans
            payload = self.client.unwrap(base64.b64decode(envelope))
            c = self.client
            if payload is None:
                return {"delivered": False, "orphan": c.orphans > orphans, "generation": c.generation}
            self._apply(payload)
            return {"delivered": True, "interval": c.last_index + 1, "generation": c.generation,
                    "forced": c.forced - forced}

    def apply(self, envelope: str) -> dict[str, Any]:
        """A planted fault: the payload applied without unwrap(), so with no duplicate or
        orphan check and no dependency reported."""
        with self.client.atomic():
            self._apply(Envelope.decode(base64.b64decode(envelope)).payload)
            c = self.client
            return {"delivered": True, "interval": c.last_index + 1, "generation": c.generation, "forced": 0}

    def checkpoint(self) -> dict[str, Any]:
        with self.client.atomic():
            return {"index": self.client.checkpoint()}

    def status(self) -> dict[str, Any]:
        with self.client.atomic():
            c = self.client
            return {**self.state, "last_index": c.last_index, "incarnation": c.incarnation,
                    "generation": c.generation, "forced": c.forced, "cut_epoch": c.cut_epoch, "fenced": c.fenced,
                    "duplicates": c.duplicates, "orphans": c.orphans, "orphans_delivered": c.orphans_delivered,
                    "rollbacks": [{"index": r.index, "reason": r.reason} for r in c.rollbacks],
                    "redelivered": [list(r) for r in c.redelivered],
                    "in_transit": [e.envelope.message_id for e in c.in_transit(c.last_index)]}

    def handle(self, cmd: dict[str, Any]) -> dict[str, Any]:
        op = cmd.get("op")
        if op == "send":
            return self.send(cmd["to"])
        if op == "deliver":
            return self.deliver(cmd["envelope"])
        if op == "checkpoint":
            return self.checkpoint()
        if op == "status":
            return self.status()
        if op == "arm":
            return self.arm(cmd["fault"])
        if op == "apply":
            return self.apply(cmd["envelope"])
        raise ValueError(f"unknown op {op!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.tokens.agent")
    for name in ("group", "agent", "endpoints", "blob-dir"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--state-dir", default="", help="delivery and effect logs (needed with an s3:// store)")
    parser.add_argument("--members", default="")
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--events", default="", help="append a JSON Lines journal of events here")
    parser.add_argument("--deadline", type=float, default=20.0, help="seconds per coordinator call, retries included")
    # The workload's faults (a crash after the blob write, the store's outage) need its
    # checkpoints in the blob store: its small states would otherwise travel inline.
    parser.add_argument("--inline-max-bytes", type=int, default=0, help="checkpoints up to this size travel inline")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format=f"{args.agent} %(levelname)s %(message)s")
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the driver asks for stacks when we seem stuck
    agent = TokenAgent(args)

    def reply(doc: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(doc) + "\n")
        sys.stdout.flush()

    try:
        try:
            reply(agent.start())
        except Exception as exc:
            reply({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
            return 1
        for line in sys.stdin:  # ends when the driver closes our stdin
            cmd = json.loads(line)
            if cmd.get("op") == "quit":
                break
            try:
                reply(agent.handle(cmd))
            except Exception as exc:  # reported to the driver, which decides
                reply({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        agent.client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
