"""Retention policies through the state machine against a simple oracle.

Random runs of checkpoints, messages, savepoints, garbage collections and the clock
moving on are applied to two machines, only one of which has a retention policy.
Every collection of the policy's machine must keep what the oracle below selects
and what a savepoint holds, and answer with exactly the checkpoints it deleted; at
the end one more collection must leave exactly what the twin without the policy
keeps plus what the policy selects, and a recovery must find every checkpoint its
line names and roll back to the same line as the twin.

Checkpoints here are full ones (no parent): a kept incremental checkpoint also keeps
its parent, which neither side of the equation would name.
"""
from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core import commands as c
from coordinator.core.model import Checkpoint, GroupSpec, Mode, RetentionPolicy
from tests.core.test_state_machine import Machine
from tests.oracle.traffic import Traffic

SETTINGS = settings(max_examples=100, deadline=None)
# (operation, agent, peer, index jump, minutes the clock moves first)
# Checkpoints three times as likely as the other events, so the policy has old ones to keep.
EVENTS = st.lists(st.tuples(st.sampled_from(("send", "receive", "checkpoint", "checkpoint", "checkpoint", "gc",
                                             "savepoint")),
                            st.integers(0, 3), st.integers(0, 3), st.integers(1, 2), st.integers(0, 90)),
                  min_size=12, max_size=36)
POLICIES = st.builds(RetentionPolicy, keep_last=st.integers(0, 4),
                     bucket_seconds=st.sampled_from((0.0, 600.0, 3600.0)), buckets=st.integers(1, 4)).map(
    lambda p: p if p.bucket_seconds else RetentionPolicy(keep_last=p.keep_last))

Kept = set[tuple[str, int]]


def oracle(checkpoints: list[Checkpoint], policy: RetentionPolicy, now: float) -> set[int]:
    """What the policy keeps of one agent's checkpoints, by its definition: the
    `keep_last` highest stable indexes, and for each of the `buckets` periods
    [start, start + bucket_seconds) counting back from the one holding `now`, the
    highest stable index committed in it (the current period reaching on forever)."""
    stable = [cp for cp in checkpoints if cp.stable]
    out = set(sorted(cp.index for cp in stable)[::-1][:policy.keep_last])
    if policy.bucket_seconds:
        current_start = math.floor(now / policy.bucket_seconds) * policy.bucket_seconds
        for back in range(policy.buckets):
            start = current_start - back * policy.bucket_seconds
            end = math.inf if back == 0 else start + policy.bucket_seconds
            inside = [cp.index for cp in stable if start <= cp.created_at < end]
            if inside:
                out.add(max(inside))
    return out


class Twins:
    """The same group on two machines; only `with_policy` gets the retention policy."""

    def __init__(self, agents: list[str], mode: Mode, retention: int, policy: RetentionPolicy) -> None:
        self.with_policy, self.without = Machine(), Machine()
        self.agents = agents
        self.now = 1_000_000.0
        self.both(c.CreateGroup(GroupSpec("g", mode, retention=retention)))
        self.with_policy.ok(c.SetRetention("g", policy))
        for agent in agents:
            self.both(c.Register("g", agent))

    def both(self, command: c.Command) -> tuple[c.Result, c.Result]:
        first, second = self.with_policy.run(command, self.now), self.without.run(command, self.now)
        assert type(first) is type(second), (first, second)
        return first, second

    @staticmethod
    def checkpoints(machine: Machine, agents: list[str]) -> dict[str, list[Checkpoint]]:
        return {a: machine.state.checkpoints("g", a) for a in agents}

    def remaining(self, machine: Machine) -> Kept:
        return {(a, cp.index) for a, cps in self.checkpoints(machine, self.agents).items() for cp in cps}

    def collect(self, policy: RetentionPolicy) -> None:
        """One collection on both, checked step by step on the policy's machine."""
        before = self.checkpoints(self.with_policy, self.agents)
        selected = {(a, i) for a, cps in before.items() for i in oracle(cps, policy, self.now)}
        pinned = {(s.agent_id, s.index) for sp in self.with_policy.state.savepoints("g") for s in sp.checkpoints
                  if s.index}
        result, _ = self.both(c.GarbageCollect("g"))
        assert isinstance(result, c.GcResult), result
        after = self.remaining(self.with_policy)
        gone = {(a, cp.index) for a, cps in before.items() for cp in cps} - after
        assert selected | pinned <= after, (sorted(selected | pinned), sorted(after))
        uris = {f"file:///blobs/{a}/{i}" for a, i in gone}
        assert sorted(result.deletable_blob_uris) == sorted(uris) and result.checkpoints_deleted == len(gone)


@SETTINGS
@given(st.integers(2, 4), st.sampled_from((Mode.UNCOORDINATED, Mode.CIC_BCS)), st.integers(0, 1), POLICIES, EVENTS)
def test_gc_keeps_the_line_and_what_the_policy_selects(n: int, mode: Mode, retention: int, policy: RetentionPolicy,
                                                        events: list) -> None:
    agents = [f"p{i}" for i in range(n)]
    twins = Twins(agents, mode, retention, policy)
    traffic = Traffic(agents, twins.both)
    for step, (op, who, to, jump, minutes) in enumerate(events):
        twins.now += minutes * 60.0
        traffic.step(step, op, who, to, jump)
        if op == "gc":
            twins.collect(policy)
        elif op == "savepoint":
            twins.both(c.CreateSavepoint("g", f"s{step}"))
    before = twins.checkpoints(twins.with_policy, agents)
    selected = {(a, i) for a, cps in before.items() for i in oracle(cps, policy, twins.now)}
    twins.collect(policy)
    kept, twin_kept = twins.remaining(twins.with_policy), twins.remaining(twins.without)
    assert kept == twin_kept | selected, (sorted(kept), sorted(twin_kept), sorted(selected))
    # What the policy kept is older than the line, so a recovery rolls back to the same
    # line as the twin's, and every checkpoint it names is still there.
    recovered, twin_recovered = twins.both(c.DeclareAgentFailed("g", agents[0], 1))
    assert isinstance(recovered, c.RecoveryResult) and isinstance(twin_recovered, c.RecoveryResult)
    assert recovered.targets == twin_recovered.targets
    remaining = twins.remaining(twins.with_policy)
    assert all(t.checkpoint_index == 0 or (t.agent_id, t.checkpoint_index) in remaining for t in recovered.targets)

