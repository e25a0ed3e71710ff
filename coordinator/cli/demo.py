"""`raftpoint demo`: a local 3-node cluster, token-passing agents, crashes, recoveries.

Phase 1 runs a coordinated group (epochs cut the whole group at once), phase 2 a
CIC group under BCS (independent checkpoints, forced ones before risky
deliveries). In each, one agent crashes mid-run; the coordinator computes the
recovery line, the agents it names roll back, and the demo checks that the total
number of tokens is conserved. Between the phases the Raft leader is killed -9.
"""
from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from agent_client.connection import Connection, CoordinatorUnavailable, Rejected
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.cli.local_cluster import LocalCluster
from coordinator.demo_agents import DemoAgent, World

LEASE_TTL_S = 600.0  # demo agents are driven in one process and send no heartbeats


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("demo", help="run a local cluster with agents that checkpoint, crash and recover")
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=30, help="message rounds per phase")
    parser.add_argument("--tokens", type=int, default=100, help="tokens each agent starts with")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, help="keep cluster data here (default: a temporary directory)")
    parser.set_defaults(func=run)


def say(text: str) -> None:
    print(text, flush=True)


def orders_for(conn: Connection, group: str):
    def fetch(agent: DemoAgent) -> list[pb.Order]:
        return conn.collect("AgentService", "WatchOrders", pb.WatchOrdersRequest(
            group=group, agent_id=agent.agent_id, token=pb.FencingToken(incarnation=agent.incarnation)), window=0.8)
    return fetch


def phase(conn: Connection, name: str, mode: int, args: argparse.Namespace, blob_dir: Path) -> dict:
    rng = random.Random(args.seed)
    agents = [f"agent-{i}" for i in range(args.agents)]
    conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(request_id=f"create-{name}", spec=pb.GroupSpec(
        group=name, mode=mode, lease_ttl_s=LEASE_TTL_S, retention=1)))
    world = World(conn, name, mode, agents, args.tokens, blob_dir / name, rng)
    for a in agents:
        world.register(world.agents[a])
    say(f"  {len(agents)} agents registered, {world.total} tokens in total")
    crash_round = args.rounds * 2 // 3
    victim = rng.choice(agents)
    for r in range(1, args.rounds + 1):
        world.step()
        if mode == pb.COORDINATED and r % 8 == 0:
            world.drain()
            epoch = conn.call("AdminService", "StartEpoch", pb.StartEpochRequest(
                request_id=f"{name}-epoch-{r}", group=name)).epoch.epoch
            for a in agents:
                world.agents[a].epoch = epoch
                world.checkpoint(world.agents[a], kind=pb.COORDINATED_CUT)
            stable = conn.call("AdminService", "GetGroup", pb.GetGroupRequest(group=name)).group.stable_epoch
            say(f"  round {r:3}: epoch {epoch} committed by all agents; stable epoch = {stable}")
        if r == crash_round:
            for a in agents:
                world.flush_dependencies(world.agents[a])
            whatif = conn.call("AdminService", "WhatIf", pb.WhatIfRequest(group=name, failed=[victim]))
            predicted = {t.agent_id: t.checkpoint_index for t in whatif.targets}
            say(f"  round {r:3}: what if {victim} fails? -> roll back {predicted or 'nobody'}")
            say(f"  round {r:3}: CRASH {victim} (its volatile state is lost; it restarts as a new incarnation)")
            before = {a: world.agents[a].last_index for a in agents}
            line = world.crash_and_recover(victim, orders_for(conn, name))
            lost = {a: before[a] + 1 - idx for a, idx in line.items()}
            say(f"  recovery line: {dict(sorted(line.items()))}")
            say(f"  rolled back: {', '.join(sorted(line))}; kept running: "
                f"{', '.join(a for a in agents if a not in line) or 'nobody'}")
            say(f"  work lost (intervals): {dict(sorted(lost.items()))}; matches what-if: {line == predicted}")
            if line != predicted:
                raise RuntimeError(f"recovery line {line} differs from the what-if answer {predicted}")
            _check_tokens(world, "after recovery")
    world.drain()
    _check_tokens(world, "at the end")
    group = conn.call("AdminService", "GetGroup", pb.GetGroupRequest(group=name)).group
    gc = conn.call("AdminService", "GarbageCollect", pb.GarbageCollectRequest(request_id=f"gc-{name}", group=name))
    say(f"  group state {pb.GroupState.Name(group.state)}; garbage collection freed "
        f"{len(gc.deletable_blob_uris)} checkpoints ({gc.bytes} bytes)")
    if mode != pb.COORDINATED:
        say(f"  checkpoints: {world.basic} basic, {world.forced} forced by BCS")
    return {"tokens": world.tokens_accounted(), "total": world.total}


def _check_tokens(world: World, when: str) -> None:
    have = world.tokens_accounted()
    say(f"  tokens {when}: {have} of {world.total} ({'conserved' if have == world.total else 'NOT CONSERVED'})")
    if have != world.total:
        raise RuntimeError(f"tokens not conserved {when}: {have} != {world.total}")


def run(args: argparse.Namespace) -> int:
    if not 2 <= args.agents <= 64 or not 6 <= args.rounds <= 10_000:
        print("raftpoint demo: --agents must be 2..64 and --rounds 6..10000", file=sys.stderr)
        return 2
    root = args.data_dir or Path(tempfile.mkdtemp(prefix="raftpoint-demo-"))
    started = time.monotonic()
    try:
        say(f"starting a 3-node coordinator cluster on 127.0.0.1 (data in {root})")
        with LocalCluster(root / "cluster", 3).start_all() as cluster:
            leader = cluster.leader()
            say(f"leader elected: node{leader.index} ({leader.grpc})")
            with Connection(cluster.endpoints()) as conn:
                say("\n== phase 1: coordinated checkpoints ==")
                phase(conn, "coordinated", pb.COORDINATED, args, root / "blobs")
                say("\n== killing the Raft leader (SIGKILL) ==")
                leader = cluster.leader()
                cluster.kill(leader.index)
                t0 = time.monotonic()
                conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
                    request_id="create-cic-bcs", spec=pb.GroupSpec(group="cic-bcs", mode=pb.CIC_BCS,
                                                                    lease_ttl_s=LEASE_TTL_S, retention=1)))
                new = cluster.leader()
                say(f"  node{leader.index} killed; node{new.index} leads; next write accepted after "
                    f"{time.monotonic() - t0:.2f}s")
                cluster.start(leader.index)
                say("\n== phase 2: communication-induced checkpoints (BCS) ==")
                phase(conn, "cic-bcs", pb.CIC_BCS, args, root / "blobs")
                digest = cluster.converged()
                say(f"\nall 3 nodes hold identical state (digest {digest[:16]})")
        say(f"demo finished in {time.monotonic() - started:.1f}s: every recovery conserved the tokens")
        return 0
    except (RuntimeError, TimeoutError, CoordinatorUnavailable, Rejected) as exc:
        print(f"raftpoint demo: FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)
