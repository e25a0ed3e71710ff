"""`raftpoint demo`: a local 3-node cluster, token-passing agent processes, a real crash.

Each agent is a process (chaos.tokens.agent) linked to AgentClient. The demo
plays the network: it asks agents to send (a message moves tokens), delivers
envelopes out of order and sometimes twice, and starts coordinated epochs. Mid-run it
SIGKILLs one agent and restarts it: the coordinator computes the recovery line, the
agents it names roll back (through their order streams) and re-deliver, from their
own logs, the messages the line took out of their state but not out of their
senders'. The network does nothing special: it keeps delivering what is in flight,
including messages whose sends the line undid, which the receivers must refuse. The
demo checks all of it against its own record of every message (the driver and the
record are chaos.tokens.traffic and chaos.tokens.ledger, shared with the chaos agent
workload): the line matches the what-if answer, exactly the right messages are
re-delivered and refused, and the total number of tokens (in agents' states + in
transit) is conserved. Between phases the Raft leader is killed -9. The last phase's
group then travels back in time: a savepoint mid-run, a few more rounds, and a restore
of the whole group to it; each agent must then hold what the ledger says it held at
its savepoint checkpoint (plus what it re-delivers: messages sent before the savepoint
and received after it), the savepoint must be a consistent cut holding every token,
and what was sent after it must be refused. At the end the demo writes each group's
space-time diagram (raftpoint.cli.group_picture) to one page.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agent_client.blobs.location import local_root, open_blob_store
from agent_client.connection import Connection, CoordinatorUnavailable, Rejected
from chaos.tokens.process import AgentDied, AgentProcess
from chaos.tokens.traffic import MODES, TokenGroup, savepoint_cut
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator import channels
from coordinator.harness.local_cluster import LocalCluster, wait_for
from raftpoint.cli import group_picture, spacetime

PHASES = {"all": ("coordinated", "bcs"), **{m: (m,) for m in ("coordinated", "bcs", "hmnr")}}
LEASE_TTL_S = 5.0
RECOVERY_TIMEOUT_S = 30.0
TRAVEL_ROUNDS = 8  # rounds run between the savepoint and the restore


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
    parser.add_argument("--blob-store", metavar="LOCATION",
                        help="where agents put checkpoint blobs: a directory, or s3://bucket/prefix?endpoint=..."
                             "&region=... with credentials in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the shared "
                             "credentials file (default: a directory under the data dir)")
    parser.add_argument("--picture", type=Path, metavar="FILE",
                        help="where to write the groups' space-time diagrams as a web page (default: "
                             "groups.html in --data-dir, else a new raftpoint-demo-*.html in the temporary directory)")
    parser.add_argument("--langgraph", action="store_true",
                        help="instead: three LangGraph agents, one killed mid-run, against LangGraph's SQLite saver")
    parser.set_defaults(func=run)


def say(text: str) -> None:
    print(text, flush=True)


class DemoFailed(RuntimeError):
    pass


class Phase:
    def __init__(self, conn: Connection, endpoints: list[str], name: str, args: argparse.Namespace,
                 root: Path, seconds: float) -> None:
        self.conn, self.name, self.args, self.seconds = conn, name, args, seconds
        self.mode = MODES[name]
        self.group = f"demo-{name}"
        self.rng = random.Random(f"{args.seed}-{name}")
        ids = [f"agent-{i}" for i in range(args.agents)]
        blobs = args.blob_store or root / "blobs"
        state = None if local_root(blobs) is not None else root / "state"
        procs = {a: AgentProcess(a, group=self.group, endpoints=endpoints, blob_dir=blobs, log_dir=root / "logs",
                                 members=ids, tokens=args.tokens,
                                 state_dir=None if state is None else state / self.group / a) for a in ids}
        self.world = TokenGroup(self.group, self.mode, procs, args.tokens, self.rng)
        self.ids, self.procs, self.total = ids, procs, self.world.ledger.total
        self.epochs = 0
        self.rounds = 0
        self.picture: spacetime.Picture | None = None  # drawn at the end, before garbage collection

    # ---- coordinator --------------------------------------------------------------
    def group_info(self) -> pb.GetGroupResponse:
        return self.conn.call("AdminService", "GetGroup", pb.GetGroupRequest(group=self.group))

    def start_epoch(self, r: int) -> None:
        try:
            self.conn.call("AdminService", "StartEpoch", pb.StartEpochRequest(request_id=f"{self.group}-e{r}",
                                                                             group=self.group))
            self.epochs += 1
        except Rejected as exc:
            if exc.reason_code != pb.REASON_EPOCH_STILL_OPEN:
                raise

    def epoch_settled(self) -> bool:
        info = self.group_info()
        open_ = [e for e in info.recent_epochs if e.epoch == info.group.current_epoch and e.state == pb.EPOCH_STARTED]
        return not open_

    # ---- traffic ------------------------------------------------------------------
    def step(self, r: int, *, epochs: bool = True) -> None:
        self.world.step(r, time.monotonic(), start_epoch=self.start_epoch if epochs else None)

    def check(self, when: str, *, final: bool = False) -> None:
        """The ledger's verdict on everything so far (the journals read first)."""
        self.world.ingest()
        verdict = self.world.ledger.verdict(final=final, network=self.world.network.carrying())
        if not verdict.ok:
            raise DemoFailed(f"{when}: " + "; ".join(f"{f.invariant}: {f.why}" for f in verdict.findings[:5]))

    def audit(self, when: str) -> None:
        tally = self.world.audit(when)
        say(f"  tokens {when}: {tally.in_agents} in agents + {tally.in_transit} in transit = "
            f"{tally.in_agents + tally.in_transit} of {self.total} "
            f"({'conserved' if tally.conserved else 'NOT CONSERVED'})")
        if not tally.conserved:
            raise DemoFailed(f"tokens not conserved {when}")

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
        before = self.world.statuses()
        say(f"  round {r:3}: what if {victim} fails? -> roll back {dict(sorted(predicted.items())) or 'nobody'}")
        say(f"  round {r:3}: CRASH: SIGKILL {victim} (pid {self.procs[victim].proc.pid}); restarting it")
        self.procs[victim].kill()
        t0 = time.monotonic()
        ready = self.procs[victim].spawn().reply()
        say(f"  {victim} is back as incarnation {ready['incarnation']}: {ready['restore']}")
        rid, after = self.recovered("one crash")
        line = {f.agent_id: f.index for f in self.world.ledger.lines[rid]}
        lost = {a: before[a]["work"] - after[a]["work"] for a in line}
        if line != predicted:
            raise DemoFailed(f"recovery line {line} differs from the what-if answer {predicted}")
        self.check("after the recovery")
        redelivered = len(self.world.ledger.redelivered_for(rid))
        undone = sum(1 for e in self.world.network.entries
                     if not e.copy and self.world.ledger.send_undone(e.message) is not None)
        say(f"  recovered in {time.monotonic() - t0:.2f}s; recovery line {dict(sorted(line.items()))}")
        say(f"  rolled back: {', '.join(sorted(line))}; kept running: "
            f"{', '.join(a for a in self.ids if a not in line) or 'nobody'}")
        say(f"  work lost (operations): {dict(sorted(lost.items()))}; matches what-if: {line == predicted}")
        say(f"  re-delivered by the receivers from their logs: {redelivered} messages "
            f"(exactly those the line took from them and kept at their senders); in flight from undone sends: "
            f"{undone} (their receivers must refuse them)")
        self.audit("after recovery")

    def recovered(self, what: str) -> tuple[int, dict[str, dict[str, Any]]]:
        """Once every rollback order is obeyed: the one recovery the agents carried out, and
        their statuses (read after the re-deliveries the order threads make)."""
        try:
            wait_for(lambda: self.group_info().group.state == pb.RUNNING, "every rollback order to be obeyed",
                     RECOVERY_TIMEOUT_S, 0.1)
        except TimeoutError:
            for proc in self.procs.values():
                proc.dump_stacks()
            time.sleep(0.5)  # let them write the stacks before the demo stops them
            raise
        after = self.world.statuses()  # waits for re-deliveries still running in the order threads
        recoveries = self.world.ingest()
        if len(recoveries) != 1:
            raise DemoFailed(f"{what}, but the agents carried out recoveries {recoveries}")
        return recoveries[0], after

    # ---- group time travel ----------------------------------------------------------
    def time_travel(self, r: int) -> None:
        """Savepoint, run on, restore the whole group to it: each agent must hold what the
        ledger says it held at its savepoint checkpoint (plus what it re-delivers from its
        log), the cut must conserve the tokens, and what was sent after it is refused."""
        name = f"{self.group}-before"
        saved = self.conn.call("AdminService", "CreateSavepoint", pb.CreateSavepointRequest(
            request_id=f"create-{name}", group=self.group, name=name)).savepoint
        cut = savepoint_cut(saved)
        say(f"  round {r:3}: savepoint {name} taken: checkpoints {dict(sorted(cut.items()))}")
        sent = self.world.stats["sent"]
        for extra in range(1, TRAVEL_ROUNDS + 1):
            self.step(r + extra)
        say(f"  ran on {TRAVEL_ROUNDS} rounds ({self.world.stats['sent'] - sent} messages); tokens now "
            f"{self.tokens(self.world.statuses())}")
        t0 = time.monotonic()
        answer = self.conn.call("AdminService", "RestoreGroup", pb.RestoreGroupRequest(
            request_id=f"restore-{name}", group=self.group, savepoint=name))
        self.world.ledger.restore(answer.recovery_id, name, cut)
        rid, after = self.recovered("one restore")
        if rid != answer.recovery_id:
            raise DemoFailed(f"restore {answer.recovery_id}, but the agents carried out recovery {rid}")
        # The ledger's verdict: the line is the savepoint, a consistent cut holding every
        # token, and each agent restored what it held there (as its journal says).
        self.check("after the restore")
        say(f"  restored the group to {name} in {time.monotonic() - t0:.2f}s (recovery {rid}): every agent "
            "rolled back to its savepoint checkpoint")
        self.restored_tokens(rid, after)
        undone = [e.message for e in self.world.network.entries if not e.copy
                  and (u := self.world.ledger.send_undone(e.message)) is not None and u.recovery_id == rid]
        say(f"  in flight from sends the restore undid: {len(undone)} (their receivers must refuse them)")
        self.audit("after the restore")
        self.world.drain(time.monotonic())
        delivered = [m.id for m in undone if m.deliveries or not any(f.orphan for f in m.refusals)]
        if delivered:
            raise DemoFailed(f"messages from sends the restore undid were not refused: {delivered}")
        say(f"  refused as orphans: {len(undone)} of {len(undone)}")

    def restored_tokens(self, rid: int, after: dict[str, dict[str, Any]]) -> None:
        """What the agents hold once restore `rid` is carried out, as they report it: what
        the ledger says each held at the savepoint, plus what each re-delivered."""
        ledger = self.world.ledger
        line = {f.agent_id: f for f in ledger.lines[rid]}
        tally, _ = ledger.cut(line)
        held = {a: ledger.held(line[a]) for a in self.ids}
        say(f"  at the savepoint, by the demo's ledger: tokens {dict(sorted(held.items()))} + {tally.in_transit} in "
            f"transit across it = {tally.in_agents + tally.in_transit} of {self.total}: a consistent cut")
        back: Counter[str] = Counter()
        for m, _ in ledger.redelivered_for(rid):
            back[m.receiver] += m.amount
        wrong = {a: (s["tokens"] - back[a], held[a]) for a, s in after.items() if s["tokens"] - back[a] != held[a]}
        if wrong:
            raise DemoFailed(f"agents' tokens less their re-deliveries differ from the savepoint's: {wrong}")
        say("  per-agent tokens match the savepoint: every agent restored exactly what the ledger says it held there")
        say(f"  re-delivered from the receivers' logs: {sum(back.values())} tokens (sent before the savepoint, "
            f"received after); tokens now {self.tokens(after)}")

    @staticmethod
    def tokens(statuses: dict[str, dict[str, Any]]) -> dict[str, int]:
        return {a: s["tokens"] for a, s in sorted(statuses.items())}

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
                s = self.world.stats
                epochs = (f"; epoch {info.current_epoch}, stable {info.stable_epoch}" if self.mode == pb.COORDINATED
                          else f"; {s['basic']} basic + {s['forced']} forced checkpoints")
                say(f"  round {r:3}: {s['sent']} sent, {s['delivered']} delivered, "
                    f"{len(self.world.network)} in flight{epochs}")
        if not crashed:
            self.crash(r, victim)
        self.rounds = r

    def finish(self) -> None:
        """Deliver everything in flight, audit, judge it all, and summarize."""
        self.world.drain(time.monotonic())
        self.audit("at the end (all messages delivered)")
        self.check("at the end", final=True)
        self.summary(self.rounds)

    def summary(self, rounds: int) -> None:
        self.picture = group_picture.picture(group_picture.read_history(self.conn, self.group))
        info = self.group_info().group
        gc = self.conn.call("AdminService", "GarbageCollect", pb.GarbageCollectRequest(request_id=f"gc-{self.group}",
                                                                                    group=self.group))
        s = self.world.stats
        say(f"  {rounds} rounds: {s['sent']} messages, {s['delivered']} deliveries, {s['duplicates_dropped']} "
            f"duplicates dropped by the client; {s['orphans_refused']} messages from undone sends refused")
        if self.mode == pb.COORDINATED:
            say(f"  epochs started {self.epochs}, stable epoch {info.stable_epoch}; cuts forced by a later-epoch "
                f"message: {s['forced']}")
        else:
            say(f"  checkpoints: {s['basic']} basic, {s['forced']} forced by {self.name.upper()}")
        say(f"  group {pb.GroupState.Name(info.state)}; garbage collection: {len(gc.deletable_blob_uris)} "
            f"checkpoints ({gc.bytes} bytes) deletable")

    def close(self) -> None:
        for proc in self.procs.values():
            proc.stop(5)


def run(args: argparse.Namespace) -> int:
    if args.langgraph:
        from raftpoint.cli.langgraph_demo import run_langgraph
        return run_langgraph()
    if not 2 <= args.agents <= 16 or not 6 <= args.rounds <= 10_000 or not 1 <= args.seconds <= 600:
        print("raftpoint demo: --agents must be 2..16, --rounds 6..10000, --seconds 1..600", file=sys.stderr)
        return 2
    if wrong := group_picture.unwritable(args.picture):
        print(f"raftpoint demo: --picture: {wrong}", file=sys.stderr)
        return 2
    blob_location = None
    if args.blob_store:
        try:  # a bad URL or a missing obstore fails here, before the cluster starts
            blob_location = open_blob_store(args.blob_store).backend.location
        except (ValueError, ImportError) as exc:
            print(f"raftpoint demo: --blob-store: {exc}", file=sys.stderr)
            return 2
    root = args.data_dir or Path(tempfile.mkdtemp(prefix="raftpoint-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    phases = PHASES[args.mode]
    pictures: list[spacetime.Picture] = []
    started = time.monotonic()
    try:
        say(f"starting a 3-node coordinator cluster on 127.0.0.1 (data in {root})")
        if blob_location is not None:
            say(f"agents put checkpoint blobs in {blob_location}")
        cluster = LocalCluster(root / "cluster", 3)
        cluster.stop_nodes_with_this_process = True  # a killed demo leaves no nodes behind
        with cluster.start_all(), \
                channels.environment(cluster.client_tls()):  # the agent processes read it, as deployed agents do
            leader = cluster.leader()
            say(f"leader elected: node{leader.index} ({leader.grpc}), TLS with a throw-away CA")
            with Connection(cluster.endpoints(), token=cluster.token, tls=cluster.client_tls()) as conn:
                for n, name in enumerate(phases):
                    if n:
                        _kill_leader(cluster, conn)
                    say(f"\n== phase {n + 1}: {name} ({args.agents} agents) ==")
                    phase = Phase(conn, cluster.endpoints(), name, args, root, args.seconds / len(phases))
                    try:
                        phase.run()
                        if n == len(phases) - 1:
                            say(f"\n== phase {n + 2}: group time travel ({phase.group}, the same agents) ==")
                            phase.time_travel(phase.rounds)
                            phase.rounds += TRAVEL_ROUNDS
                        phase.finish()
                    finally:
                        phase.close()
                    pictures += [phase.picture] if phase.picture else []
                digest = cluster.converged()
                say(f"\nall 3 nodes hold identical state (digest {digest[:16]})")
        say(f"the groups' space-time diagrams: {_write_pictures(args, pictures)} (open it in a browser)")
        say(f"demo finished in {time.monotonic() - started:.1f}s: every recovery conserved the tokens")
        return 0
    except (DemoFailed, AgentDied, RuntimeError, TimeoutError, CoordinatorUnavailable, Rejected, OSError) as exc:
        print(f"raftpoint demo: FAILED: {exc}", file=sys.stderr)
        if args.data_dir is None:
            print("raftpoint demo: re-run with --data-dir DIR to keep the agent and node logs", file=sys.stderr)
        return 1
    finally:
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)


def _write_pictures(args: argparse.Namespace, pictures: list[spacetime.Picture]) -> Path:
    """Where the page went: --picture, else beside the kept data, else a new temporary
    file (the demo's own temporary directory is removed when it ends)."""
    path = args.picture or (args.data_dir / "groups.html" if args.data_dir else None)
    if path is None:
        fd, name = tempfile.mkstemp(prefix="raftpoint-demo-", suffix=".html")
        os.close(fd)
        path = Path(name)
    group_picture.save(path, spacetime.html_page(pictures))
    return path


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
