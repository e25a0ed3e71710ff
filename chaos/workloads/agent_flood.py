"""A flood of heartbeating agents, multiplexed on one asyncio process, plus a commit load.

One process stands in for hundreds of agent processes: each of `agents` agents (in
groups of GROUP_SIZE) registers, then sends its unary Heartbeat at the client's
default rate (a third of the lease) from its own task, and the first `committers`
of them propose CommitCheckpoint back to back. It follows the client's policy for the two
answers that matter under overload: an overloaded node's refusal (REASON_OVERLOADED)
is retried after the node's hint, and a deadline or redirect is just a missed beat.

It records, per agent, when it registered, when each answered heartbeat was sent, when
each heartbeat refused for authorization was sent, and when a node first refused it as
no longer live (its incarnation failed or replaced), so a checker can tell an agent
that was heartbeating (and must not be declared failed) from one that was not. Times
are time.monotonic() (CLOCK_MONOTONIC, shared by every process on the machine), so
they compare with the times of the process that reads the agents' final states. With
--ramp, agent i starts registering ramp * i / agents seconds in, so the load grows
through the ramp instead of arriving at once.

Run: python -m chaos.workloads.agent_flood --endpoints A,B,C --agents 1000 --seconds 20 --out result.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc

from agent_client.agent_stream import keepalive_every
from agent_client.connection import AsyncConnection, overload_hint, read_token_file, token_from_env
from coordinator.api.metadata import LEADER_METADATA_KEY, REASON_METADATA_KEY, bearer, parse_reason
from coordinator.channels import ClientTLS
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc

GROUP_SIZE = 100
LEASE_TTL_S = 10.0  # the default; --lease-ttl
RPC_TIMEOUT_S = 5.0  # the client's default per-attempt timeout
CHANNELS = 8  # connections to the leader, shared by all agents
REGISTER_CONCURRENCY = 64
# The refusals that say an incarnation is no longer live: it was declared failed (or
# left), or a later registration replaced it. Heartbeating it again is pointless.
NOT_LIVE = {pb.REASON_AGENT_NOT_ALIVE: "AGENT_NOT_ALIVE", pb.REASON_STALE_INCARNATION: "STALE_INCARNATION"}
# The refusals of the caller's identity: who it is, or what it may do.
DENIED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


def group_of(i: int) -> str:
    return f"flood-{i // GROUP_SIZE}"


def agent_of(i: int) -> str:
    return f"agent-{i}"


@dataclass
class Tally:
    """What the flood saw: answers by call and outcome, and each agent's answered beats
    (times on the monotonic clock)."""

    outcomes: Counter = field(default_factory=Counter)  # (method, outcome) -> count
    beats: dict[str, list[float]] = field(default_factory=dict)  # agent -> send times of answered heartbeats
    # agent -> send times of heartbeats refused for authorization (DENIED)
    denied: dict[str, list[float]] = field(default_factory=dict)
    registered: dict[str, float] = field(default_factory=dict)  # agent -> send time of its answered Register
    # agent -> (time, reason) of its first refusal as no longer live
    refused: dict[str, tuple[float, str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # the first few refusals' texts, for the reader

    def count(self, method: str, outcome: str) -> None:
        self.outcomes[(method, outcome)] += 1

    def as_json(self) -> dict:
        return {"outcomes": {f"{m} {o}": n for (m, o), n in sorted(self.outcomes.items())}, "beats": self.beats,
                "denied": self.denied, "registered": self.registered, "refused": self.refused,
                "errors": self.errors}


class Leader:
    """Channels to the node believed to lead; moved when a node names another leader."""

    def __init__(self, endpoints: list[str], token: str | None) -> None:
        self.endpoints = endpoints
        self.metadata = bearer(token)  # the caller's identity, on every call
        self.tls = ClientTLS.from_env()  # RAFTPOINT_CA_FILE etc., as an agent process reads them
        self.target = endpoints[0]
        self._channels: dict[str, list[grpc.aio.Channel]] = {}
        self._next = 0

    def stub(self) -> pb_grpc.AgentServiceStub:
        channels = self._channels.get(self.target)
        if channels is None:
            channels = self._channels[self.target] = [
                self.tls.aio_channel(self.target, [("raftpoint.flood.channel", n)]) for n in range(CHANNELS)]
        self._next = (self._next + 1) % CHANNELS
        return pb_grpc.AgentServiceStub(channels[self._next])

    def follow(self, err: grpc.RpcError) -> None:
        leader = dict(err.trailing_metadata() or ()).get(LEADER_METADATA_KEY)
        if leader:
            self.target = leader
        elif err.code() == grpc.StatusCode.UNAVAILABLE:
            self.target = self.endpoints[(self.endpoints.index(self.target) + 1) % len(self.endpoints)
                                         if self.target in self.endpoints else 0]

    async def close(self) -> None:
        for channels in self._channels.values():
            for channel in channels:
                await channel.close()


class Sent:
    """Filled in by call(): when the attempt that ended it was sent; the refusal, if one did."""

    at: float | None = None
    error: grpc.RpcError | None = None


def reason_of(err: grpc.RpcError) -> int:
    return parse_reason(dict(err.trailing_metadata() or ()).get(REASON_METADATA_KEY))


async def call(leader: Leader, tally: Tally, method: str, request, until: float,
               sent: Sent | None = None) -> object | None:
    """One call as an agent makes it: retried after an overloaded node's hint (not past
    `until`); None when it got no answer (counted by outcome)."""
    while True:
        attempt = time.monotonic()
        try:
            reply = await getattr(leader.stub(), method)(request, timeout=RPC_TIMEOUT_S, metadata=leader.metadata)
            tally.count(method, "OK")
            if sent is not None:
                sent.at = attempt
            return reply
        except grpc.RpcError as err:
            if sent is not None:
                sent.at, sent.error = attempt, err
            hint = overload_hint(err)
            tally.count(method, "SHED" if hint is not None else err.code().name)
            if hint is None and len(tally.errors) < 20:
                tally.errors.append(f"{method} {err.code().name}: {err.details()}")
            if hint is None:
                leader.follow(err)
                return None
            wait = hint * random.uniform(1.0, 1.5)
            if time.monotonic() + wait >= until:
                return None
            await asyncio.sleep(wait)


def not_live(tally: Tally, agent: str, sent: Sent) -> bool:
    """Whether the call was refused because the agent's incarnation is no longer live
    (the first such refusal is recorded, at the time its answer came)."""
    reason = reason_of(sent.error) if sent.error is not None else None
    if reason not in NOT_LIVE:
        return False
    tally.refused.setdefault(agent, (time.monotonic(), NOT_LIVE[reason]))
    return True


async def heartbeats(leader: Leader, tally: Tally, i: int, token: pb.FencingToken, interval: float,
                     end: float) -> None:
    agent, group = agent_of(i), group_of(i)
    request = pb.HeartbeatRequest(group=group, agent_id=agent, token=token)
    answered = tally.beats.setdefault(agent, [])
    await asyncio.sleep(random.uniform(0, interval))  # agents beat at different times (registering renewed the lease)
    while time.monotonic() < end:
        beat_at = time.monotonic()
        sent = Sent()
        if await call(leader, tally, "Heartbeat", request, until=beat_at + interval, sent=sent) is not None:
            answered.append(sent.at)
        elif sent.error is not None and sent.error.code() in DENIED:
            tally.denied.setdefault(agent, []).append(sent.at)
        elif not_live(tally, agent, sent):
            return  # a dead incarnation: a real agent would register anew; this one stops
        await asyncio.sleep(max(0.0, beat_at + interval - time.monotonic()))


async def commits(leader: Leader, tally: Tally, i: int, token: pb.FencingToken, end: float) -> None:
    """Back-to-back checkpoints of agent i (so its checkpoint index only grows)."""
    index = 0
    while time.monotonic() < end:
        index += 1
        request = pb.CommitCheckpointRequest(
            request_id=f"flood-cp-{i}-{index}", token=token,
            checkpoint=pb.CheckpointMeta(group=group_of(i), agent_id=agent_of(i), index=index, kind=pb.BASIC,
                                         blob_uri=f"file:///flood/{i}/{index}", sha256="f" * 64, size=200))
        sent = Sent()
        if await call(leader, tally, "CommitCheckpoint", request, until=end, sent=sent) is None:
            if not_live(tally, agent_of(i), sent):
                return
            index -= 1  # not committed, or not known to be: the next try repeats the index with a new id
            await asyncio.sleep(0.05)


async def create_groups(endpoints: list[str], agents: int, token: str | None, lease_ttl_s: float) -> None:
    async with AsyncConnection(endpoints, deadline=60.0, token=token, tls=ClientTLS.from_env()) as conn:
        for g in range((agents + GROUP_SIZE - 1) // GROUP_SIZE):
            await conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
                request_id=f"flood-cg-{g}", spec=pb.GroupSpec(group=f"flood-{g}", mode=pb.UNCOORDINATED,
                                                               lease_ttl_s=lease_ttl_s)))


async def agent(leader: Leader, tally: Tally, gate: asyncio.Semaphore, i: int, commit: bool,
                interval: float, start: float, end: float) -> None:
    """One agent's life: from `start`, register (retried with the same request id, so
    the same incarnation, until it gets in), then heartbeat, and commit back to back if
    it is a committer."""
    secret = secrets.token_bytes(16)  # the agent's own, as agent_client makes one per registration
    request = pb.RegisterRequest(request_id=f"flood-reg-{i}", group=group_of(i), agent_id=agent_of(i), secret=secret)
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    async with gate:
        reply, sent = None, Sent()
        while reply is None and time.monotonic() < end:
            reply = await call(leader, tally, "Register", request, until=end, sent=sent)
    if reply is None:
        return
    tally.registered[agent_of(i)] = sent.at
    token = pb.FencingToken(incarnation=reply.incarnation, secret=secret)
    work = [heartbeats(leader, tally, i, token, interval, end)]
    if commit:
        work.append(commits(leader, tally, i, token, end))
    await asyncio.gather(*work)


async def flood(endpoints: list[str], agents: int, seconds: float, committers: int,
                token: str | None = None, ramp: float = 0.0, lease_ttl_s: float = LEASE_TTL_S) -> dict:
    """`seconds` of load from when the groups exist; agent i registers `ramp * i / agents`
    seconds in."""
    await create_groups(endpoints, agents, token, lease_ttl_s)
    leader, tally = Leader(endpoints, token), Tally()
    interval = keepalive_every("unary", lease_ttl_s)  # the client's default heartbeat period (unary calls)
    started = time.monotonic()
    end = started + seconds
    ramp = min(max(0.0, ramp), seconds)
    starts = [started + ramp * i / agents for i in range(agents)]
    gate = asyncio.Semaphore(REGISTER_CONCURRENCY)
    try:
        await asyncio.gather(*(agent(leader, tally, gate, i, i < committers, interval, starts[i], end)
                               for i in range(agents)))
    finally:
        await leader.close()
    return {"agents": agents, "heartbeat_interval_s": interval, "lease_ttl_s": lease_ttl_s, "ramp_s": ramp,
            "clock": "monotonic", "start": started, "end": time.monotonic(), **tally.as_json()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", required=True, help="comma-separated gRPC addresses")
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--committers", type=int, default=128)
    parser.add_argument("--ramp", type=float, default=0.0, help="seconds over which the agents start (0: at once)")
    parser.add_argument("--lease-ttl", type=float, default=LEASE_TTL_S, help="the groups' lease TTL in seconds")
    parser.add_argument("--out", required=True, help="where to write the JSON result")
    parser.add_argument("--token-file", help="the bearer token to present (default: $RAFTPOINT_TOKEN_FILE)")
    args = parser.parse_args(argv)
    token = read_token_file(args.token_file) if args.token_file else token_from_env()
    result = asyncio.run(flood(args.endpoints.split(","), args.agents, args.seconds, args.committers, token,
                                 args.ramp, args.lease_ttl))
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
