"""How long a node takes to start after an unclean stop with N journal entries its store
never committed: the journal's open (every record's MAC checked), then the replay of
each entry into the store, until the store holds them all.

One node (a one-node cluster, in this process) takes N proposals, each a batch of
CommitCheckpoint commands as the batcher sends them, going round the 100 agents of a
group; its store commits are dropped
meanwhile, as a crash would lose them, so its store stays at the applied index it had
before and every entry must be replayed. Then the node is closed without committing
and started again on the same data dir, timed until its store holds index N. The
machine's other work shows in the figure: compare rows of one run.
Run: python benchmarks/restart_replay.py [--entries 100000] [--batch 4]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coordinator import config, wire  # noqa: E402
from coordinator.api.v1 import coordinator_pb2 as pb  # noqa: E402
from coordinator.api.v1 import log_pb2  # noqa: E402
from coordinator.harness.local_cluster import free_ports  # noqa: E402
from coordinator.replication.node import CoordinatorNode  # noqa: E402
from coordinator.storage import open_store  # noqa: E402

IN_FLIGHT = 256  # proposals outstanding while the journal is filled
AGENTS = 100  # the commits go round them, as a group's agents checkpoint in turn
DEADLINE_S = 600.0


def node_config(root: Path, port: int) -> config.NodeConfig:
    return config.load(env={}, flags={
        "raft_address": f"127.0.0.1:{port}", "peers": (), "data_dir": str(root), "raft_password": "bench-replay-password",
        "insecure": True, "compaction_min_entries": 10_000_000, "compaction_min_time": 86400.0})


def start(root: Path, port: int) -> CoordinatorNode:
    cfg = node_config(root, port)
    return CoordinatorNode(cfg, open_store("lmdb", Path(cfg.data_dir) / "state"))


def entry(n: int, batch: int) -> bytes:
    """Raft entry n: `batch` commits, each the next checkpoint of the next agent in turn."""
    def one(c: int) -> log_pb2.LogEntry:
        agent, index = f"a{c % AGENTS}", c // AGENTS + 1
        return log_pb2.LogEntry(request_id=f"c-{c}", commit_checkpoint=pb.CommitCheckpointRequest(
            request_id=f"c-{c}", token=pb.FencingToken(secret=b"s" * 16, incarnation=1),
            checkpoint=pb.CheckpointMeta(group="g", agent_id=agent, index=index, kind=pb.BASIC,
                                         blob_uri=f"file:///b/{agent}/{index}", sha256="ab" * 32, size=4096)))
    commits = [one(n * batch + k) for k in range(batch)]
    return wire.proposal_to_pb(1.0, 600.0, commits).SerializeToString()


def propose_all(node: CoordinatorNode, entries: int, batch: int) -> None:
    """Propose `entries` entries, IN_FLIGHT at a time; raise on any failure."""
    slots, done, failures = threading.Semaphore(IN_FLIGHT), threading.Semaphore(0), []

    def answered(result: object, error: str | None) -> None:
        if error is not None:
            failures.append(error)
        slots.release()
        done.release()

    for n in range(entries):
        if not slots.acquire(timeout=DEADLINE_S):
            raise TimeoutError("no proposal answered in time")
        node.propose(entry(n, batch), answered)
    for _ in range(entries):
        if not done.acquire(timeout=DEADLINE_S):
            raise TimeoutError("proposals left unanswered")
    if failures:
        raise RuntimeError(f"{len(failures)} proposals failed, the first: {failures[0]}")


def wait_for(predicate, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > DEADLINE_S:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.01)
    return time.monotonic() - started


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--entries", type=int, default=100_000, help="journal entries the store never committed")
    p.add_argument("--batch", type=int, default=4, help="commits per entry")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        root, port = Path(tmp), free_ports(1)[0]
        node = start(root, port)
        wait_for(node.is_leader, "the node to lead")
        setup = [log_pb2.LogEntry(request_id="g", create_group=pb.CreateGroupRequest(
            request_id="g", spec=pb.GroupSpec(group="g", mode=pb.CIC_BCS, lease_ttl_s=3600)))]
        setup += [log_pb2.LogEntry(request_id=f"r{a}", register=pb.RegisterRequest(
            secret=b"s" * 16, request_id=f"r{a}", group="g", agent_id=f"a{a}")) for a in range(AGENTS)]
        for message in setup:
            propose_entry = wire.proposal_to_pb(1.0, 600.0, [message]).SerializeToString()
            box = threading.Event()
            node.propose(propose_entry, lambda result, error: box.set())
            box.wait(30)
        wait_for(lambda: node.store.applied_index >= node.status().commit_index, "the setup to be stored")
        stored = node.store.applied_index
        node.store.commit = lambda writes, applied_index: None  # every later store commit is lost, as in a crash
        filled = time.monotonic()
        propose_all(node, args.entries, args.batch)
        fill_s = time.monotonic() - filled
        target = node.status().commit_index
        journal_bytes = (root / "raft.journal").stat().st_size
        node.close()
        if node.store.applied_index != stored:
            raise RuntimeError(f"the store committed up to {node.store.applied_index}: nothing left to replay")

        started = time.monotonic()
        node = start(root, port)
        opened = time.monotonic() - started
        replay = wait_for(lambda: node.store.applied_index >= target, "the replay") + opened
        state = node.read_state()
        checkpoints = sum(len(state.checkpoints("g", f"a{a}")) for a in range(AGENTS))
        node.close()
    print(f"one node, {args.entries:,} journal entries of {args.batch} commits each ({journal_bytes / 2**20:.1f} MiB "
          f"of journal) after the store's applied index {stored}; filled in {fill_s:.1f} s")
    print("| entries replayed | journal open s | open to store at the last index s | entries/s | checkpoints after |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| {args.entries:,} | {opened:.2f} | {replay:.2f} | {args.entries / replay:,.0f} | {checkpoints:,} |")
    if checkpoints != args.entries * args.batch:
        print(f"MISSING: {args.entries * args.batch - checkpoints} checkpoints were not replayed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
