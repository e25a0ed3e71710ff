"""`raftpoint demo`: a local 3-node cluster, token-passing agent processes, a real crash.

Each agent is a process (agent_client.demo_agent) linked to AgentClient. The demo
plays the network: it asks agents to send (a message moves tokens), delivers
envelopes out of order and sometimes twice, and starts coordinated epochs. Mid-run it
SIGKILLs one agent and restarts it: the coordinator computes the recovery line, the
agents it names roll back (through their order streams) and re-deliver, from their
own logs, the messages the line took out of their state but not out of their
senders'. The network does nothing special: it keeps delivering what is in flight,
including messages whose sends the line undid, which the receivers must refuse. The
demo checks all of it against its own record of every message: the line matches the
what-if answer, exactly the right messages are re-delivered and refused, and the
total number of tokens (in agents' states + in transit) is conserved. Between phases
the Raft leader is killed -9.
"""
from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_client.connection import Connection, CoordinatorUnavailable, Rejected
from agent_client.demo_process import AgentDied, AgentProcess
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.cli.local_cluster import LocalCluster, wait_for

MODES = {"coordinated": pb.COORDINATED, "bcs": pb.CIC_BCS, "hmnr": pb.CIC_HMNR}
PHASES = {"all": ("coordinated", "bcs"), **{m: (m,) for m in MODES}}
LEASE_TTL_S = 5.0
EPOCH_EVERY = 4  # rounds between coordinated epochs
RECOVERY_TIMEOUT_S = 30.0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("demo", help="run a local cluster with agent processes that checkpoint, crash and recover")
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--mode", choices=sorted(PHASES), default="all",
                        help="all = coordinated, then CIC (BCS)")
    parser.add_argument("--seconds", type=float, default=20.0, help="message traffic budget, split between phases")
    parser.add_argument("--rounds", type=int, default=200, help="at most this many rounds per phase")
    parser.add_argument("--tokens", type=int, default=100, help="tokens each agent starts with")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, help="keep cluster data, blobs and agent logs here")
    parser.set_defaults(func=run)


def say(text: str) -> None:
    print(text, flush=True)


class DemoFailed(RuntimeError):
    pass


@dataclass
class Msg:
    message_id: str
    sender: str
    send_interval: int
    receiver: str
    amount: int
    envelope: str
    receive_interval: int = 0
    undone: bool = False  # a recovery undid its send: the receiver must refuse it


class Network:
    """Messages in flight and delivered, as the demo (the network) knows them."""

    def __init__(self) -> None:
        self.in_flight: list[Msg] = []
        self.delivered: list[Msg] = []

    def in_transit(self) -> int:
        """Tokens on their way: undone sends carry none (their sender has them back)."""
        return sum(m.amount for m in self.in_flight if not m.undone)

    def apply_line(self, line: dict[str, int]) -> dict[str, list[Msg]]:
        """What the recovery line must do to the messages: sends after the sender's
        checkpoint are undone (in flight: the receiver must refuse them), receives after
        the receiver's checkpoint are undone, and each message whose receive is undone
        but whose send is not must be re-delivered by its receiver. Returns the expected
        re-deliveries by receiver; an orphan fails the demo."""
        def undone_send(m: Msg) -> bool:
            return m.sender in line and m.send_interval > line[m.sender]

        def undone_receive(m: Msg) -> bool:
            return m.receiver in line and m.receive_interval > line[m.receiver]

        orphans = [m.message_id for m in self.delivered if undone_send(m) and not undone_receive(m)]
        if orphans:
            raise DemoFailed(f"inconsistent recovery line {line}: orphan messages {orphans}")
        redeliver: dict[str, list[Msg]] = {}
        for m in self.delivered:
            if undone_receive(m) and not undone_send(m):
                redeliver.setdefault(m.receiver, []).append(m)
        for m in self.in_flight:
            m.undone = m.undone or undone_send(m)
        self.delivered = [m for m in self.delivered if not undone_receive(m) or not undone_send(m)]
        return redeliver


class Phase:
    def __init__(self, conn: Connection, endpoints: list[str], name: str, args: argparse.Namespace,
                 root: Path, seconds: float) -> None:
        self.conn, self.name, self.args, self.seconds = conn, name, args, seconds
        self.mode = MODES[name]
        self.group = f"demo-{name}"
        self.rng = random.Random(f"{args.seed}-{name}")
        self.ids = [f"agent-{i}" for i in range(args.agents)]
        self.total = args.tokens * args.agents
        self.net = Network()
        self.procs = {a: AgentProcess(a, group=self.group, endpoints=endpoints, blob_dir=root / "blobs",
                                      log_dir=root / "logs", members=self.ids, tokens=args.tokens) for a in self.ids}
        self.stats = {"sent": 0, "delivered": 0, "duplicates_dropped": 0, "orphans_refused": 0, "forced": 0,
                      "basic": 0, "epochs": 0}

    # ---- coordinator --------------------------------------------------------------
    def group_info(self) -> pb.GetGroupResponse:
        return self.conn.call("AdminService", "GetGroup", pb.GetGroupRequest(group=self.group))

    def start_epoch(self, r: int) -> None:
        try:
            self.conn.call("AdminService", "StartEpoch", pb.StartEpochRequest(request_id=f"{self.group}-e{r}",
                                                                             group=self.group))
            self.stats["epochs"] += 1
        except Rejected as exc:
            if "still open" not in exc.reason:
                raise

    def epoch_settled(self) -> bool:
        info = self.group_info()
        open_ = [e for e in info.recent_epochs if e.epoch == info.group.current_epoch and e.state == pb.EPOCH_STARTED]
        return not open_

    # ---- traffic ------------------------------------------------------------------
    def send(self, a: str, b: str) -> None:
        reply = self.procs[a].request("send", to=b)
        if reply["envelope"]:
            self.net.in_flight.append(Msg(reply["id"], a, reply["interval"], b, reply["amount"], reply["envelope"]))
            self.stats["sent"] += 1

    def deliver(self, m: Msg) -> None:
        reply = self.procs[m.receiver].request("deliver", envelope=m.envelope)
        if m.undone:
            if reply["delivered"] or not reply["orphan"]:
                raise DemoFailed(f"{m.receiver} did not refuse {m.message_id}, whose send a rollback undid: {reply}")
            self.stats["orphans_refused"] += 1
            return
        if not reply["delivered"]:
            raise DemoFailed(f"{m.receiver} refused first delivery of {m.message_id}: {reply}")
        m.receive_interval = reply["interval"]
        self.stats["forced"] += reply["forced"]
        self.stats["delivered"] += 1
        self.net.delivered.append(m)

    def duplicate(self) -> None:
        m = self.rng.choice(self.net.delivered)
        if self.procs[m.receiver].request("deliver", envelope=m.envelope)["delivered"]:
            raise DemoFailed(f"duplicate of {m.message_id} was delivered twice to {m.receiver}")
        self.stats["duplicates_dropped"] += 1

    def step(self, r: int, *, epochs: bool = True) -> None:
        for a in self.ids:
            if self.rng.random() < 0.6:
                self.send(a, self.rng.choice([b for b in self.ids if b != a]))
        self.rng.shuffle(self.net.in_flight)
        for _ in range(len(self.net.in_flight) // 2 + 1):
            if self.net.in_flight:
                self.deliver(self.net.in_flight.pop())
        if self.net.delivered and self.rng.random() < 0.3:
            self.duplicate()
        if self.mode == pb.COORDINATED:
            if epochs and r % EPOCH_EVERY == 0:
                self.start_epoch(r)
        else:
            for a in self.ids:
                if self.rng.random() < 0.1:
                    self.procs[a].request("checkpoint")
                    self.stats["basic"] += 1

    def drain(self) -> None:
        for _ in range(10 * len(self.net.in_flight) + 1):
            if not self.net.in_flight:
                return
            self.deliver(self.net.in_flight.pop())

    def statuses(self) -> dict[str, dict[str, Any]]:
        return {a: self.procs[a].request("status") for a in self.ids}

    def audit(self, when: str) -> None:
        st = self.statuses()
        in_states, in_transit = sum(s["tokens"] for s in st.values()), self.net.in_transit()
        have = in_states + in_transit
        say(f"  tokens {when}: {in_states} in agents + {in_transit} in transit = {have} of {self.total} "
            f"({'conserved' if have == self.total else 'NOT CONSERVED'})")
        if have != self.total:
            raise DemoFailed(f"tokens not conserved {when}: {have} != {self.total}")

    # ---- the crash ----------------------------------------------------------------
    def crash(self, r: int, victim: str) -> None:
        if self.mode == pb.COORDINATED:
            # Let the open epoch become stable, then work on past it: the crash then loses
            # work after the last stable cut, and no cut is half-taken when what-if answers.
            wait_for(self.epoch_settled, "the open epoch to settle", RECOVERY_TIMEOUT_S, 0.1)
            for extra in range(1, 3):
                self.step(r + extra, epochs=False)
        whatif = self.conn.call("AdminService", "WhatIf", pb.WhatIfRequest(group=self.group, failed=[victim]))
        predicted = {t.agent_id: t.checkpoint_index for t in whatif.targets}
        before = self.statuses()
        say(f"  round {r:3}: what if {victim} fails? -> roll back {dict(sorted(predicted.items())) or 'nobody'}")
        say(f"  round {r:3}: CRASH: SIGKILL {victim} (pid {self.procs[victim].proc.pid}); restarting it")
        self.procs[victim].kill()
        t0 = time.monotonic()
        ready = self.procs[victim].spawn().reply()
        say(f"  {victim} is back as incarnation {ready['incarnation']}: {ready['restore']}")
        try:
            wait_for(lambda: self.group_info().group.state == pb.RUNNING, "every rollback order to be obeyed",
                     RECOVERY_TIMEOUT_S, 0.1)
        except TimeoutError:
            for proc in self.procs.values():
                proc.dump_stacks()
            time.sleep(0.5)  # let them write the stacks before the demo stops them
            raise
        after = self.statuses()
        line = {a: after[a]["rollbacks"][-1]["index"] for a in self.ids
                if a != victim and len(after[a]["rollbacks"]) > len(before[a]["rollbacks"])}
        line[victim] = ready["index"]
        lost = {a: before[a]["work"] - after[a]["work"] for a in line}
        if line != predicted:
            raise DemoFailed(f"recovery line {line} differs from the what-if answer {predicted}")
        expected = self.net.apply_line(line)
        redelivered = {a: after[a]["redelivered"] for a in line if a != victim}
        redelivered[victim] = ready["redelivered"]
        self.check_redeliveries(expected, redelivered)
        undone = [m for m in self.net.in_flight if m.undone]
        say(f"  recovered in {time.monotonic() - t0:.2f}s; recovery line {dict(sorted(line.items()))}")
        say(f"  rolled back: {', '.join(sorted(line))}; kept running: "
            f"{', '.join(a for a in self.ids if a not in line) or 'nobody'}")
        say(f"  work lost (operations): {dict(sorted(lost.items()))}; matches what-if: {line == predicted}")
        say(f"  re-delivered by the receivers from their logs: {sum(map(len, expected.values()))} messages "
            f"(exactly those the line took from them and kept at their senders); in flight from undone sends: "
            f"{len(undone)} (their receivers must refuse them)")
        self.audit("after recovery")

    def check_redeliveries(self, expected: dict[str, list[Msg]], redelivered: dict[str, list[list[Any]]]) -> None:
        """Each receiver must have re-delivered exactly the messages the line took out of
        its state and kept at their senders; the new receive intervals are recorded."""
        for agent in sorted(set(expected) | set(redelivered)):
            want = {m.message_id: m for m in expected.get(agent, [])}
            got = {message_id: interval for message_id, interval in redelivered.get(agent, [])}
            if set(want) != set(got):
                raise DemoFailed(f"{agent} re-delivered {sorted(got)}, the line requires {sorted(want)}")
            for message_id, m in want.items():
                m.receive_interval = got[message_id]

    # ---- the phase ----------------------------------------------------------------
    def run(self) -> None:
        self.conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id=f"create-{self.group}", spec=pb.GroupSpec(group=self.group, mode=self.mode, retention=1,
                                                                lease_ttl_s=LEASE_TTL_S,
                                                                checkpoint_interval_s=3600.0)))
        with ThreadPoolExecutor(len(self.ids)) as pool:
            readies = list(pool.map(lambda a: self.procs[a].spawn().reply(), self.ids))
        say(f"  {len(readies)} agent processes registered (pids "
            f"{', '.join(str(p.proc.pid) for p in self.procs.values())}), {self.total} tokens in total")
        victim = self.rng.choice(self.ids)
        start = time.monotonic()
        crashed = False
        r = 0
        while r < self.args.rounds and time.monotonic() - start < self.seconds:
            r += 1
            self.step(r)
            if not crashed and (time.monotonic() - start >= self.seconds * 0.6 or r >= self.args.rounds * 2 // 3):
                crashed = True
                self.crash(r, victim)
            if r % 25 == 0:
                info = self.group_info().group
                epochs = (f"; epoch {info.current_epoch}, stable {info.stable_epoch}" if self.mode == pb.COORDINATED
                          else f"; {self.stats['basic']} basic + {self.stats['forced']} forced checkpoints")
                say(f"  round {r:3}: {self.stats['sent']} sent, {self.stats['delivered']} delivered, "
                    f"{len(self.net.in_flight)} in flight{epochs}")
        if not crashed:
            self.crash(r, victim)
        self.drain()
        self.audit("at the end (all messages delivered)")
        self.summary(r)

    def summary(self, rounds: int) -> None:
        info = self.group_info().group
        gc = self.conn.call("AdminService", "GarbageCollect", pb.GarbageCollectRequest(request_id=f"gc-{self.group}",
                                                                                    group=self.group))
        s = self.stats
        say(f"  {rounds} rounds: {s['sent']} messages, {s['delivered']} deliveries, {s['duplicates_dropped']} "
            f"duplicates dropped by the client; {s['orphans_refused']} messages from undone sends refused")
        if self.mode == pb.COORDINATED:
            say(f"  epochs started {s['epochs']}, stable epoch {info.stable_epoch}; cuts forced by a later-epoch "
                f"message: {s['forced']}")
        else:
            say(f"  checkpoints: {s['basic']} basic, {s['forced']} forced by {self.name.upper()}")
        say(f"  group {pb.GroupState.Name(info.state)}; garbage collection: {len(gc.deletable_blob_uris)} "
            f"checkpoints ({gc.bytes} bytes) deletable")

    def close(self) -> None:
        for proc in self.procs.values():
            proc.stop(5)


def run(args: argparse.Namespace) -> int:
    if not 2 <= args.agents <= 16 or not 6 <= args.rounds <= 10_000 or not 1 <= args.seconds <= 600:
        print("raftpoint demo: --agents must be 2..16, --rounds 6..10000, --seconds 1..600", file=sys.stderr)
        return 2
    root = args.data_dir or Path(tempfile.mkdtemp(prefix="raftpoint-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    phases = PHASES[args.mode]
    started = time.monotonic()
    try:
        say(f"starting a 3-node coordinator cluster on 127.0.0.1 (data in {root})")
        with LocalCluster(root / "cluster", 3).start_all() as cluster:
            leader = cluster.leader()
            say(f"leader elected: node{leader.index} ({leader.grpc})")
            with Connection(cluster.endpoints()) as conn:
                for n, name in enumerate(phases):
                    if n:
                        _kill_leader(cluster, conn)
                    say(f"\n== phase {n + 1}: {name} ({args.agents} agents) ==")
                    phase = Phase(conn, cluster.endpoints(), name, args, root, args.seconds / len(phases))
                    try:
                        phase.run()
                    finally:
                        phase.close()
                digest = cluster.converged()
                say(f"\nall 3 nodes hold identical state (digest {digest[:16]})")
        say(f"demo finished in {time.monotonic() - started:.1f}s: every recovery conserved the tokens")
        return 0
    except (DemoFailed, AgentDied, RuntimeError, TimeoutError, CoordinatorUnavailable, Rejected) as exc:
        print(f"raftpoint demo: FAILED: {exc}", file=sys.stderr)
        if args.data_dir is None:
            print("raftpoint demo: re-run with --data-dir DIR to keep the agent and node logs", file=sys.stderr)
        return 1
    finally:
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)


def _kill_leader(cluster: LocalCluster, conn: Connection) -> None:
    leader = cluster.leader()
    say(f"\n== killing the Raft leader node{leader.index} (SIGKILL) ==")
    cluster.kill(leader.index)
    t0 = time.monotonic()
    conn.call("AdminService", "ClusterStatus", pb.ClusterStatusRequest())
    conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
        request_id="probe-after-leader-kill", spec=pb.GroupSpec(group="probe", mode=pb.UNCOORDINATED)))
    new = cluster.leader()
    say(f"  node{new.index} leads; next write accepted after {time.monotonic() - t0:.2f}s; restarting node{leader.index}")
    cluster.start(leader.index)
