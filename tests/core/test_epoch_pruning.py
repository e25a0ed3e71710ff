"""Garbage collection keeps a group's last RECENT_EPOCHS epoch records and deletes older ones."""
from __future__ import annotations

from coordinator.core import commands as c
from coordinator.core.model import RECENT_EPOCHS, Checkpoint, CheckpointKind, GroupSpec, Mode
from coordinator.core.state_machine import apply
from coordinator.storage import open_store
from coordinator.storage.state import KvState


def test_gc_deletes_epoch_records_older_than_the_recent_ones() -> None:
    store = open_store("memory", None)
    n = 0

    def ok(command: c.Command) -> c.Result:
        nonlocal n
        n += 1
        state = KvState(store)
        result = apply(state, c.Entry(f"r{n}", 100.0 + n, command))
        assert not isinstance(result, c.Failure), result
        store.commit(state.encoded_writes(), n)
        return result

    ok(c.CreateGroup(GroupSpec("g", Mode.COORDINATED, retention=1)))
    inc = ok(c.Register("g", "a")).agent.incarnation
    epochs = RECENT_EPOCHS + 5
    for e in range(1, epochs + 1):
        ok(c.StartEpoch("g"))
        ok(c.CommitCheckpoint(c.Token(inc, e), Checkpoint("g", "a", e, e, CheckpointKind.COORDINATED,
                                                          f"file:///b/{e}", "ab" * 32, 1)))
    assert len(KvState(store).epochs("g")) == epochs
    ok(c.GarbageCollect("g"))
    kept = [e.epoch for e in KvState(store).epochs("g")]
    assert kept == list(range(epochs - RECENT_EPOCHS + 1, epochs + 1))
    ok(c.StartEpoch("g"))  # the group goes on: the open epoch is never among the deleted
