"""The applier's dedupe table: answers are remembered for the window, then forgotten in
bounded steps; a request older than the window is refused, never applied twice;
replicas that commit at different moments end with identical content; and each
identity's request ids are its own, an answer given only to the command it answered."""
from __future__ import annotations

from coordinator import wire
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import log_pb2
from coordinator.core import dedupe
from coordinator.core.commands import CheckpointResult, EmptyResult, Failure, GroupResult, decode_result, encode_result
from coordinator.core.errors import Code, ReasonCode
from coordinator.replication.applier import apply_entry_bytes
from coordinator.storage import keys
from coordinator.storage.memory import MemoryStore
from coordinator.storage.state import (
    DEDUPE_CLOCK_KEY, RESULT, KvState, RecordCache, answer_key, read_remembered_item, remembered_item, remembered_key,
)

WINDOW = 60.0


def group_entry(rid: str, name: str, at: float, issued_at: float = 0.0) -> log_pb2.LogEntry:
    return log_pb2.LogEntry(request_id=rid, issued_at=issued_at, create_group=pb.CreateGroupRequest(
        request_id=rid, spec=pb.GroupSpec(group=name, mode=pb.CIC_BCS)))


def commit_entry(rid: str, index: int, issued_at: float = 0.0) -> log_pb2.LogEntry:
    return log_pb2.LogEntry(request_id=rid, issued_at=issued_at, commit_checkpoint=pb.CommitCheckpointRequest(
        token=pb.FencingToken(secret=b"s" * 16, incarnation=1), checkpoint=pb.CheckpointMeta(
            group="g", agent_id="a", index=index, kind=pb.BASIC, blob_uri=f"file:///b/{index}", sha256="a" * 64,
            size=1)))


def raft_entry(at: float, *entries: log_pb2.LogEntry, window: float = WINDOW) -> bytes:
    """One Raft entry: a single command, or a batch when given several."""
    copies = [log_pb2.LogEntry.FromString(e.SerializeToString()) for e in entries]  # a lone one is stamped
    return wire.proposal_to_pb(at, window, copies).SerializeToString()


class Replica:
    """A store fed through the applier, committing every `commit_every` entries."""

    def __init__(self, commit_every: int = 1) -> None:
        self.store = MemoryStore()
        self.records = RecordCache(self.store)
        self.commit_every = commit_every
        self.index = 0

    def apply(self, data: bytes):
        self.index += 1
        answer = apply_entry_bytes(self.records, data)
        if self.index % self.commit_every == 0:
            self.flush()
        return [decode_result(a) for a in answer] if isinstance(answer, list) else decode_result(answer)

    def flush(self) -> None:
        self.records.commit(self.index)

    def answers(self) -> list[str]:
        """Request ids with a remembered answer (not the queue, not the clock)."""
        self.flush()
        parts = [keys.parse(k)[1] for k, _ in self.store.scan(keys.prefix(RESULT))]
        return [p[-1] for p in parts if len(p) == 2]  # type: ignore[misc]


def setup(r: Replica, at: float = 1000.0) -> None:
    r.apply(raft_entry(at, group_entry("cg", "g", at)))
    r.apply(raft_entry(at, log_pb2.LogEntry(request_id="reg", register=pb.RegisterRequest(secret=b"s" * 16, group="g", agent_id="a"))))


def test_a_retry_within_the_window_is_answered_and_one_after_it_refused() -> None:
    r = Replica()
    setup(r)
    # Register is not idempotent (each application is a new incarnation): only the
    # dedupe table keeps a retry from registering again.
    register_b = log_pb2.LogEntry(request_id="reg-b", issued_at=1000.0,
                                  register=pb.RegisterRequest(secret=b"s" * 16, group="g", agent_id="b"))
    first = r.apply(raft_entry(1000.0, register_b))
    assert first.agent.incarnation == 1
    for i in range(1, 12):  # other writes, up to a second before the window ends
        r.apply(raft_entry(1000.0 + 5 * i, commit_entry(f"cp-{i}", i)))
    assert r.apply(raft_entry(1059.0, register_b)) == first
    for i in range(12, 40):  # time passes; the watermark moves past reg-b and its answer goes
        r.apply(raft_entry(1000.0 + 5 * i, commit_entry(f"cp-{i}", i)))
    assert "reg-b" not in r.answers()
    state_before = r.store.digest(skip=keys.prefix(RESULT))
    late = r.apply(raft_entry(1200.0, register_b))
    assert isinstance(late, Failure) and late.code is Code.FAILED_PRECONDITION
    assert "too old to deduplicate" in late.reason
    r.flush()
    assert r.store.digest(skip=keys.prefix(RESULT)) == state_before  # not applied a second time
    assert KvState(r.store).agent("g", "b").incarnation == 1


def test_old_answers_are_forgotten_in_bounded_steps() -> None:
    r = Replica()
    setup(r)
    for i in range(1, 51):  # one write per second, all remembered while inside the window
        r.apply(raft_entry(1000.0 + i, commit_entry(f"cp-{i}", i)))
    assert len(r.answers()) == 52
    deleted_per_entry = []
    for i in range(51, 400):
        before = {k for k, _ in r.store.scan(keys.prefix(RESULT))}
        r.apply(raft_entry(1000.0 + i, commit_entry(f"cp-{i}", i)))
        r.flush()
        after = {k for k, _ in r.store.scan(keys.prefix(RESULT))}
        deleted_per_entry.append(len(before - after))
    assert max(deleted_per_entry) <= 2 * dedupe.prune_budget(1)  # an answer and its queue item each
    # In steady state only about a window's worth (60 s at one write a second) is left.
    assert 55 <= len(r.answers()) <= 65
    assert KvState(r.store).raw(answer_key("", "cp-399")) is not None
    assert KvState(r.store).raw(answer_key("", "cp-100")) is None


def test_batches_answer_each_command_and_dedupe_inside_the_batch() -> None:
    r = Replica()
    setup(r)
    answers = r.apply(raft_entry(1001.0, commit_entry("b-1", 1), commit_entry("b-2", 2), commit_entry("b-1", 1),
                                 group_entry("cg-2", "bad name", 1001.0)))
    assert [type(a) for a in answers] == [CheckpointResult, CheckpointResult, CheckpointResult, Failure]
    assert answers[0] == answers[2]
    assert answers[3].code is Code.INVALID_ARGUMENT and answers[3].field == "spec.group"
    assert [c.index for c in KvState(r.records).checkpoints("g", "a")] == [1, 2]


def test_replicas_committing_at_different_moments_stay_identical() -> None:
    fast, slow = Replica(commit_every=1), Replica(commit_every=7)
    entries = []
    at = 1000.0
    entries.append(raft_entry(at, group_entry("cg", "g", at)))
    entries.append(raft_entry(at, log_pb2.LogEntry(request_id="reg", register=pb.RegisterRequest(secret=b"s" * 16, group="g",
                                                                                               agent_id="a"))))
    index = 0
    for step in range(300):
        at += 1.0 if step % 10 else -3.0  # a leader with a slower clock now and then
        if step % 3 == 0:
            entries.append(raft_entry(at, *(commit_entry(f"c-{index + k}", index + k + 1) for k in range(3))))
            index += 3
        else:
            entries.append(raft_entry(at, commit_entry(f"c-{index}", index + 1, issued_at=at - 1)))
            index += 1
        entries.append(raft_entry(at, group_entry(f"again-{step}", "g", at)))  # idempotent, still remembered
    for data in entries:
        a, b = fast.apply(data), slow.apply(data)
        assert a == b
    fast.flush()
    slow.flush()
    assert fast.store.digest() == slow.store.digest()
    requests = {e.request_id for data in entries for e in wire.proposal_from_bytes(data).entries}
    assert "cg" not in fast.answers() and len(fast.answers()) < len(requests) / 2  # forgotten, identically
    assert isinstance(decode_result(apply_entry_bytes(RecordCache(MemoryStore()), raft_entry(1.0, group_entry(
        "x", "g2", 1.0)))), GroupResult)


def test_an_entry_without_a_window_forgets_nothing() -> None:
    r = Replica()
    setup(r)
    for i in range(1, 50):
        r.apply(raft_entry(1000.0 + 10 * i, commit_entry(f"cp-{i}", i), window=0.0))
    assert KvState(r.store).raw(answer_key("", "cp-1")) is not None


def test_decoding_matches_the_proposers_own_decoding() -> None:
    data = raft_entry(5.0, commit_entry("x-1", 1, issued_at=4.5), commit_entry("x-2", 2))
    proposal = wire.proposal_from_bytes(data)
    assert proposal.batch and proposal.proposed_at == 5.0 and proposal.dedupe_window_s == WINDOW
    assert [e.request_id for e in proposal.entries] == ["x-1", "x-2"]
    assert [e.issued_at for e in proposal.entries] == [4.5, 0.0] and {e.proposed_at for e in proposal.entries} == {5.0}


YEAR = 365 * 86400.0


def test_a_reset_brings_a_clock_pushed_a_year_ahead_back_and_applies_nothing_twice() -> None:
    r = Replica()
    setup(r)
    r.apply(raft_entry(1001.0, commit_entry("cp-1", 1, issued_at=1001.0)))
    r.apply(raft_entry(1002.0 + YEAR, commit_entry("cp-2", 2)))  # a leader a year ahead stamps it
    refused = r.apply(raft_entry(1003.0, commit_entry("cp-3", 3, issued_at=1003.0)))
    assert isinstance(refused, Failure) and "too old to deduplicate" in refused.reason
    reset = r.apply(raft_entry(1004.0, log_pb2.LogEntry(
        request_id="reset", reset_dedupe_clock=pb.ResetDedupeClockRequest(request_id="reset"))))
    assert (reset.clock_s, reset.previous_clock_s) == (1004.0, 1002.0 + YEAR)
    assert isinstance(r.apply(raft_entry(1005.0, commit_entry("cp-3", 3, issued_at=1005.0))), CheckpointResult)
    # A retry of a request issued before the reset, its answer forgotten: refused, not applied twice.
    late = r.apply(raft_entry(1006.0, commit_entry("cp-1", 1, issued_at=1001.0)))
    assert isinstance(late, Failure) and "too old to deduplicate" in late.reason, late
    # Every answer from before the reset goes, even the one stamped a year ahead.
    for i in range(4, 40):
        r.apply(raft_entry(1006.0 + i, commit_entry(f"cp-{i}", i, issued_at=1006.0 + i)))
    assert not {"cg", "reg", "cp-1", "cp-2"} & set(r.answers()) and "cp-39" in r.answers(), r.answers()
    assert [c.index for c in KvState(r.records).checkpoints("g", "a")] == list(range(1, 40))


def register_entry(rid: str, agent: str, identity: str = "", secret: bytes = b"s" * 16,
                   issued_at: float = 0.0) -> log_pb2.LogEntry:
    """A registration, proposed for `identity` (an agent identity of group g), or by no one."""
    entry = log_pb2.LogEntry(request_id=rid, issued_at=issued_at, register=pb.RegisterRequest(
        secret=secret, group="g", agent_id=agent))
    if identity:
        entry.principal.CopyFrom(log_pb2.Principal(identity=identity, role="agent", group="g", pattern="*"))
    return entry


def test_request_ids_are_each_identitys_own() -> None:
    r = Replica()
    setup(r)
    mine = r.apply(raft_entry(1001.0, register_entry("r-1", "x", "wa")))
    theirs = r.apply(raft_entry(1002.0, register_entry("r-1", "y", "wb")))
    assert theirs.agent.agent_id == "y" and theirs != mine  # applied for B, not A's answer
    unauthenticated = r.apply(raft_entry(1003.0, register_entry("r-1", "z")))
    assert unauthenticated.agent.agent_id == "z"
    assert r.apply(raft_entry(1004.0, register_entry("r-1", "x", "wa"))) == mine  # A's retry
    r.flush()
    before = r.store.digest(skip=keys.prefix(RESULT))
    reused = r.apply(raft_entry(1005.0, register_entry("r-1", "x", "wa", secret=b"t" * 16)))
    assert isinstance(reused, Failure) and reused.reason_code is ReasonCode.REQUEST_ID_REUSED, reused
    again = r.apply(raft_entry(1006.0, register_entry("r-1", "x", "wa", secret=b"t" * 16)))
    assert again == reused  # not recorded: refused again, the first answer kept
    r.flush()
    assert r.store.digest(skip=keys.prefix(RESULT)) == before
    assert r.apply(raft_entry(1007.0, register_entry("r-1", "x", "wa"))) == mine
    assert {a.agent_id: a.incarnation for a in KvState(r.store).agents("g")} == {"a": 1, "x": 1, "y": 1, "z": 1}


def test_an_answer_kept_by_an_earlier_version_is_neither_given_nor_applied_again() -> None:
    """What that version left in the store: an answer under the request id alone, its
    queue item naming the id, and a clock without `unattributed_until`."""
    r = Replica()
    setup(r, at=999.0)
    r.flush()
    tail = KvState(r.store).dedupe_clock().tail
    old_clock = b'{"d":{"clock_ms":1000000,"head":0,"tail":%d,"watermark_ms":940000},"v":1}' % (tail + 1)
    r.store.commit({keys.key(RESULT, "old-reg"): bytes(encode_result(EmptyResult())),
                    remembered_key(tail): b"1000000 old-reg", DEDUPE_CLOCK_KEY: old_clock}, r.index)
    r.records.reset()
    refused = r.apply(raft_entry(1001.0, register_entry("old-reg", "x", "wa", issued_at=1000.0)))
    assert isinstance(refused, Failure) and refused.reason_code is ReasonCode.REQUEST_ID_REUSED, refused
    assert KvState(r.records).agent("g", "x") is None
    assert KvState(r.records).dedupe_clock().unattributed_until == tail + 1
    for i in range(1, 30):  # the window passes: the old answer is forgotten like any other
        r.apply(raft_entry(1000.0 + 5 * i, commit_entry(f"cp-{i}", i)))
    r.flush()
    assert KvState(r.store).raw(keys.key(RESULT, "old-reg")) is None
    assert not dedupe.may_hold_unattributed(KvState(r.store).dedupe_clock())
    assert r.apply(raft_entry(1150.0, register_entry("old-reg", "x", "wa", issued_at=1150.0))).agent.incarnation == 1


def test_a_queue_item_reads_back_and_the_earlier_version_can_still_read_it() -> None:
    for namespace in ("", "w1"):
        item = remembered_item(5, namespace, "r-1")
        assert read_remembered_item(item) == (5, answer_key(namespace, "r-1"))
        # What that version's forgetting builds from a new item (one in a snapshot an
        # upgraded leader sent it): a key of nothing, not an error that stops its apply.
        assert keys.key(RESULT, item.partition(b" ")[2].decode()) != answer_key(namespace, "r-1")
    assert read_remembered_item(b"5 r-1") == (5, keys.key(RESULT, "r-1"))
