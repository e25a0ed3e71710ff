"""What one Raft message costs in Python on pysyncobj's TCP transport, step by step.

pysyncobj frames every message as zlib(pickle(message)), encrypted with Fernet (AES-128
CBC and HMAC-SHA256, base64) under the Raft password, and the receiver reverses each
step, also checking the timestamp. Nodes of this version speak raft_link's frame to each
other instead (the same pickle, no zlib below raft_link.COMPRESS_ABOVE, one AES-256-GCM
call per message), timed in a second table. This times each step for the messages a write sends:
an AppendEntries carrying one ~300-byte entry (one CommitCheckpoint), its answer
(next_node_idx) and an empty heartbeat, and sets the sum against one write's Raft
messages (2 AppendEntries out, 2 answers back in a 3-node cluster, each sent once and
received once). The figures are per message on this machine, best of several rounds.
Run: python benchmarks/raft_message_cost.py [--rounds 5] [--count 20000]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import zlib
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pysyncobj import pickle as pysyncobj_pickle  # noqa: E402
from pysyncobj.encryptor import getEncryptor  # noqa: E402

from coordinator.replication import pysyncobj_adapter, raft_link  # noqa: E402

ENTRY = (b"\x00" + os.urandom(300), 12345, 7)
MESSAGES = {
    "AppendEntries, 1 entry": {"type": "append_entries", "term": 7, "commit_index": 12344, "entries": [ENTRY],
                               "prevLogIdx": 12344, "prevLogTerm": 7},
    "its answer": {"type": "next_node_idx", "next_node_idx": 12346, "reset": False, "success": True},
    "heartbeat": {"type": "append_entries", "term": 7, "commit_index": 12345, "entries": [], "prevLogIdx": 12345,
                  "prevLogTerm": 7},
}


def best_us(step: Callable[[], object], count: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(count):
            step()
        best = min(best, time.perf_counter() - started)
    return best / count * 1e6


def per_write(totals: dict[str, float]) -> float:
    """A write's Raft messages in a 3-node cluster: 2 AppendEntries and 2 answers."""
    return 2 * (totals["AppendEntries, 1 entry"] + totals["its answer"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--count", type=int, default=20_000)
    args = p.parse_args()
    fernet = getEncryptor("a-raft-password-of-enough-length")
    rand_key = os.urandom(32)
    print(f"per message, µs (best of {args.rounds} rounds of {args.count:,})")
    print("| message | bytes | pickle | zlib | Fernet encrypt | Fernet decrypt | unzlib | unpickle | total |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    totals = {}
    for name, message in MESSAGES.items():
        framed = (rand_key, message)
        pickled = pysyncobj_pickle.dumps(framed)
        zipped = zlib.compress(pickled, 3)
        sealed = fernet.encrypt_at_time(zipped, int(time.monotonic()))
        steps = {
            "pickle": lambda: pysyncobj_pickle.dumps(framed),
            "zlib": lambda: zlib.compress(pickled, 3),
            "encrypt": lambda: fernet.encrypt_at_time(zipped, int(time.monotonic())),
            "decrypt": lambda: (fernet.extract_timestamp(sealed), fernet.decrypt(sealed)),
            "unzlib": lambda: zlib.decompress(zipped),
            "unpickle": lambda: pysyncobj_pickle.loads(pickled),
        }
        cost = {k: best_us(v, args.count, args.rounds) for k, v in steps.items()}
        totals[name] = sum(cost.values())
        print(f"| {name} | {len(sealed)} | " + " | ".join(f"{cost[k]:.1f}" for k in steps) + f" | {totals[name]:.1f} |")
    fernet_write = per_write(totals)
    print(f"one write's Raft messages in a 3-node cluster (2 AppendEntries, 2 answers, each sent and received "
          f"once): {fernet_write:.0f} µs of CPU")
    print()
    print("raft_link's frame between two nodes of this version, µs")
    print("| message | bytes | pickle + AES-GCM seal | AES-GCM open + unpickle | total |")
    print("|---|---:|---:|---:|---:|")
    link_totals = {}
    secret = pysyncobj_adapter.make_cipher("a-raft-password-of-enough-length").link_secret
    for name, message in MESSAGES.items():
        own, peer = os.urandom(32) + raft_link.LINK_OFFER, os.urandom(32) + raft_link.LINK_OFFER
        sender, receiver = raft_link.Link(secret, own, peer), raft_link.Link(secret, peer, own)
        frame = sender.seal(message)
        # A link opens each frame once, in order: time opening on fresh receivers' copies.
        frames = [sender.seal(message) for _ in range(args.count * args.rounds)]
        receiver = raft_link.Link(secret, peer, own)
        receiver.open(frame)  # the first frame, sealed above
        seal = best_us(lambda: sender.seal(message), args.count, args.rounds)
        opening = iter(frames)
        open_ = best_us(lambda: receiver.open(next(opening)), args.count, args.rounds)
        link_totals[name] = seal + open_
        print(f"| {name} | {len(frame)} | {seal:.1f} | {open_:.1f} | {link_totals[name]:.1f} |")
    link_write = per_write(link_totals)
    print(f"one write's Raft messages with raft_link: {link_write:.0f} µs of CPU "
          f"({fernet_write - link_write:.0f} µs less, {link_write / fernet_write:.2f}×)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
