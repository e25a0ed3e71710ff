"""Every planted bug changes what its seams answer, and taking it out restores them.

chaos/planted.py plants each bug by replacing named seams of the code. A seam the code
no longer calls would plant nothing, and the chaos run meant to prove the checker
fails would pass for the wrong reason. So for each patch of each bug, alone, a probe
calls the seam -- through its nearest real caller where that is cheap -- with an input
on which the code's rule and the bug's differ, and the answer must change while the
bug is planted and come back once it is taken out. No cluster: a few seconds in all.
"""
from __future__ import annotations

import ast
import asyncio
import inspect
import os
import types
from pathlib import Path
from typing import Any, Callable
from unittest import mock

import pytest

from chaos import planted
from coordinator import fsutil, main
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.config import NodeConfig
from coordinator.core import authz, commands as c
from coordinator.core.authz import Grant, Role
from coordinator.core.history import Dependency
from coordinator.core.model import AgentState, Checkpoint, CheckpointKind, GroupSpec, GroupState, Mode
from coordinator.core.state_machine import apply
from coordinator.replication import applier, journal_file
from coordinator.replication.batcher import NOT_LEADER, Batcher
from coordinator.replication.journal_format import MAC_SIZE, MAGIC, RECORD
from coordinator.replication.voter_clocks import VoterClocks
from coordinator.service.leases import LeaseTable
from coordinator.storage import open_store
from coordinator.storage.lmdb_store import LmdbStore
from coordinator.storage.protocol import JOURNAL_FILE
from coordinator.storage.state import KvState, RecordCache
from coordinator.transport.auth import AuthConfigError, WatchedFile
from coordinator.transport.proposer import Proposer, Refused
from coordinator.transport.servicers import AdminServicer
from tests.core.test_state_machine import SHA, Machine
from tests.replication.test_journal import filled, open_journal
from tests.test_layers import module_files

Probe = Callable[[Path], Any]


# ---- the core: the state machine's handlers, fence, GC plan and authorization ------

def _cic(m: Machine, *agents: str, **spec: Any) -> None:
    m.ok(c.CreateGroup(GroupSpec("g", Mode.CIC_BCS, **spec)))
    for agent in agents:
        m.register("g", agent)


def old_incarnation_commits(tmp: Path) -> str:
    m = Machine()
    _cic(m, "a")
    m.register("g", "a")  # incarnation 2: a write of incarnation 1 is a zombie's
    order = m.state.orders("g")[0]
    m.ok(c.AckOrder("g", "a", c.Token(2, 0), order.order_id))  # the recovery the restart began is over
    return type(m.commit("g", "a", 1, inc=1)).__name__


def checkpoint_of_a_closed_epoch(tmp: Path) -> object:
    m = Machine()
    m.ok(c.CreateGroup(GroupSpec("g", Mode.COORDINATED, epoch_timeout_s=600)))
    m.register("g", "a")

    def commit(index: int, epoch: int) -> c.Result:
        return m.run(c.CommitCheckpoint(c.Token(1, epoch), Checkpoint(
            "g", "a", index, epoch, CheckpointKind.COORDINATED, f"file:///blobs/a/{index}", SHA, 100)))

    m.ok(c.StartEpoch("g"))
    commit(1, 1)  # epoch 1 complete
    m.ok(c.StartEpoch("g"))
    late = commit(2, 1)  # a checkpoint of epoch 1 while 2 is open
    return type(late).__name__, [(cp.index, cp.epoch) for cp in m.state.checkpoints("g", "a")]


def checkpoints_left_by_gc(tmp: Path) -> list[int]:
    m = Machine()
    _cic(m, "a", retention=1)
    for index in range(1, 5):
        m.commit("g", "a", index)
    m.ok(c.GarbageCollect("g"))
    return [cp.index for cp in m.state.checkpoints("g", "a")]


def dependencies_stored(tmp: Path) -> int:
    m = Machine()
    _cic(m, "a", "b")
    m.ok(c.ReportDependencies("g", "b", c.Token(1, 0), (Dependency("a", 1, "b", 1, "m1"),)))
    return len(m.state.dependencies("g"))


def group_after_one_of_two_rollbacks(tmp: Path) -> GroupState:
    m = Machine()
    _cic(m, "a", "b")
    m.commit("g", "a", 1)
    m.ok(c.ReportDependencies("g", "b", c.Token(1, 0), (Dependency("a", 2, "b", 1, "m1"),)))
    m.commit("g", "b", 1)
    m.ok(c.DeclareAgentFailed("g", "a", 1))  # a back to 1, b (its receive undone) back to 0
    order = next(o for o in m.state.orders("g") if o.agent_id == "b")
    m.ok(c.AckOrder("g", "b", c.Token(1, 0), order.order_id))  # a's order still outstanding
    return m.state.group("g").state


def line_of_a_restore_to_a_savepoint(tmp: Path) -> list[tuple[str, int]]:
    m = Machine()
    _cic(m, "a")
    m.commit("g", "a", 1)
    m.ok(c.CreateSavepoint("g", "before"))
    m.commit("g", "a", 2)
    result = m.ok(c.RestoreGroup("g", savepoint="before"))
    return [(step.agent_id, step.checkpoint_index) for step in result.steps]


def observer_registers(tmp: Path) -> str:
    m = Machine()
    _cic(m)
    entry = c.Entry("r", 100.0, c.Register("g", "a"), principal=Grant("watcher", Role.OBSERVER))
    return type(apply(KvState(m.store), entry)).__name__


def caller_without_credentials(tmp: Path) -> str:
    return type(authz.decide(None, {}, "Register", "g", "a")).__name__


# ---- replication: the dedupe table, the read barrier, the journal's mark, clocks ---

def retried_register_incarnations(tmp: Path) -> list[int]:
    cache = RecordCache(open_store("memory", None))

    def run(request_id: str, command: c.Command) -> c.Result:
        proposal = c.Proposal(100.0, 3600.0, (c.Entry(request_id, 100.0, command),))
        return c.decode_result(applier.apply_proposal(cache, proposal))

    run("create", c.CreateGroup(GroupSpec("g")))
    return [run("register", c.Register("g", "a")).agent.incarnation for _ in range(2)]


class Replica:
    """A node that leads, or not, and whose read round reports it no longer leads."""

    def __init__(self, leads: bool) -> None:
        self.leads = leads
        self.config = types.SimpleNamespace(grpc_of=lambda raft: None)

    def is_leader(self) -> bool:
        return self.leads

    def leader_raft_address(self) -> str | None:
        return None

    def read_index(self, done: Callable[[str | None], None]) -> None:
        done(NOT_LEADER)


def read_point_outcome(leads: bool) -> str:
    try:
        asyncio.run(Proposer(Batcher(Replica(leads))).read_point())  # type: ignore[arg-type]
    except Refused as refused:
        return f"refused: {refused.code.name}"
    return "answered"


def deposed_leader_reads(tmp: Path) -> str:
    """Batcher.barrier, through its caller Proposer.read_point: the read round says no."""
    return read_point_outcome(leads=True)


def follower_reads(tmp: Path) -> str:
    return read_point_outcome(leads=False)


def repaired_log_lost_in(tmp: Path) -> int | None:
    path = str(tmp / "raft.journal")
    j = filled(path, 2)
    j.setCurrentTerm(6, None)
    j._destroy()
    journal_file.mark_log_lost(path)
    return open_journal(path).log_lost_in_term()


def leader_time_with_one_voter(tmp: Path) -> float | None:
    return VoterClocks().agreed("a", 1_700_000_000.0, 100.0, ("a",))


# ---- storage and files ---------------------------------------------------------------

def fsyncs_of_an_atomic_write(tmp: Path) -> int:
    with mock.patch.object(os, "fsync", wraps=os.fsync) as fsync, \
            mock.patch.object(os, "fdatasync", wraps=os.fdatasync) as fdatasync:
        fsutil.atomic_write(tmp / "file", b"data")
    return fsync.call_count + fdatasync.call_count


def lmdb_store_syncs(tmp: Path) -> bool:
    store = LmdbStore(tmp / "store")
    try:
        return bool(store._env.flags()["sync"])  # what the store's environment was opened with
    finally:
        store.close()


def node_store_applied_index(tmp: Path) -> int:
    """main.open_node's store, next to a journal whose last record is index 5."""
    (tmp / JOURNAL_FILE).write_bytes(MAGIC + RECORD.pack(1, 5, 1, bytes(MAC_SIZE)) + b"x")
    with mock.patch.object(main, "CoordinatorNode", lambda cfg, store, **kwargs: store):
        store = main.open_node(NodeConfig(store="memory", data_dir=str(tmp)))
    return store.applied_index


def grants_while_the_file_is_broken(tmp: Path) -> str:
    path = tmp / "bindings"
    path.write_text("admin")

    def parse(text: str, where: str) -> str:
        if "!" in text:
            raise AuthConfigError(f"{where}: a typo")
        return text

    watched = WatchedFile(str(path), parse)
    path.write_text("admin!")
    return watched.current()


# ---- the service and transport: leases and the listing RPC ---------------------------

def _group(ttl: float) -> Any:
    m = Machine()
    return m.ok(c.CreateGroup(GroupSpec("g", lease_ttl_s=ttl))).group


def granted_lease_ttl(tmp: Path) -> float:
    table = LeaseTable(monotonic=lambda: 0.0)
    table.grant_all(1, [_group(10.0)], lambda group: [types.SimpleNamespace(
        agent_id="a", incarnation=1, state=AgentState.ALIVE)])
    return table.leases[("g", "a")].ttl_s


def held_lease_expires(tmp: Path) -> list[str]:
    now = [0.0]
    table = LeaseTable(monotonic=lambda: now[0])
    table.renew(_group(10.0), "a", 1)
    table.hold("g", "a", 1)  # an open session holds it: it does not run out while proved
    now[0] = 11.0
    return [d.agent_id for d in table.expired()]


def listed_before_and_after_a_commit(tmp: Path) -> tuple[int, int]:
    m = Machine()
    _cic(m, "a")
    m.commit("g", "a", 1)

    async def barrier(context: Any) -> None:
        return None

    async def run(context: Any, read: Callable[[], Any]) -> Any:
        return read()

    proposer = types.SimpleNamespace(barrier=barrier, node=types.SimpleNamespace(read_state=lambda: m.state))
    servicer = AdminServicer(proposer, types.SimpleNamespace(run=run))  # type: ignore[arg-type]

    async def listed() -> int:
        return len((await servicer.ListCheckpoints(pb.ListCheckpointsRequest(group="g"), None)).checkpoints)

    async def both() -> tuple[int, int]:
        first = await listed()
        m.commit("g", "a", 2)
        return first, await listed()
    return asyncio.run(both())


# Each seam's probe, by the seam a patch names (planted.Patch.seam).
PROBES: dict[str, Probe] = {
    "coordinator.replication.applier.dedupe_record": retried_register_incarnations,
    "coordinator.core.state_machine.fenced_agent": old_incarnation_commits,
    "coordinator.core.state_machine.HANDLERS[CommitCheckpoint]": checkpoint_of_a_closed_epoch,
    "coordinator.fsutil.fsync_file": fsyncs_of_an_atomic_write,
    "coordinator.storage.lmdb_env.open_env": lmdb_store_syncs,
    "coordinator.replication.batcher.Batcher.barrier": deposed_leader_reads,
    "coordinator.transport.proposer.Proposer.read_point": follower_reads,
    "coordinator.core.state_machine.plan_gc": checkpoints_left_by_gc,
    "coordinator.transport.servicers.AdminServicer.ListCheckpoints": listed_before_and_after_a_commit,
    "coordinator.core.state_machine.HANDLERS[ReportDependencies]": dependencies_stored,
    "coordinator.core.state_machine.HANDLERS[AckOrder]": group_after_one_of_two_rollbacks,
    "coordinator.core.authz.decide": caller_without_credentials,
    "coordinator.core.authz.permits": observer_registers,
    "coordinator.service.leases.LeaseTable.renew": granted_lease_ttl,
    "coordinator.service.leases.LeaseTable.hold": held_lease_expires,
    "coordinator.replication.journal_file.DurableJournal.log_lost_in_term": repaired_log_lost_in,
    "coordinator.transport.auth.WatchedFile.unusable": grants_while_the_file_is_broken,
    "coordinator.main.open_store": node_store_applied_index,
    "coordinator.replication.voter_clocks.VoterClocks.agreed": leader_time_with_one_voter,
    "coordinator.core.restore.plan": line_of_a_restore_to_a_savepoint,
}

PATCHES = [(bug, patch) for bug, make in planted.BUGS.items() for patch in make()]


def test_every_seam_a_bug_patches_has_a_probe_and_every_probe_a_seam() -> None:
    assert sorted({patch.seam for _, patch in PATCHES}) == sorted(PROBES)


@pytest.mark.parametrize("bug, patch", PATCHES, ids=[f"{bug}:{patch.seam}" for bug, patch in PATCHES])
def test_a_planted_bug_changes_what_its_seam_answers(tmp_path: Path, bug: str, patch: planted.Patch) -> None:
    probe = PROBES[patch.seam]
    for name in ("before", "planted", "after"):
        (tmp_path / name).mkdir()
    correct = probe(tmp_path / "before")
    unplant = planted.plant(bug, [patch])
    try:
        buggy = probe(tmp_path / "planted")
    finally:
        unplant()
    assert buggy != correct, (f"{bug} planted at {patch.seam} changed nothing: {probe.__name__} answered "
                              f"{correct!r} with and without it (does the code still call that name?)")
    restored = probe(tmp_path / "after")
    assert restored == correct, f"taking {bug} out left {patch.seam} answering {restored!r}, not {correct!r}"


def _marker(patch: planted.Patch) -> str:
    """A function's or method's docstring; for any other name (a table, an imported
    function), the comment lines just above the statement that binds it."""
    found = patch.original()  # raises SeamMissing for a seam that is not there
    home = patch.owner.__module__ if isinstance(patch.owner, type) else patch.owner.__name__
    if inspect.isfunction(found) and found.__module__ == home and patch.key is planted.NO_KEY:
        return inspect.getdoc(found) or ""
    lines = inspect.getsource(patch.owner).splitlines()
    for node in ast.parse("\n".join(lines)).body:
        if isinstance(node, ast.ImportFrom):
            bound = [alias.asname or alias.name for alias in node.names]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound = [t.id for t in targets if isinstance(t, ast.Name)]
        else:
            continue
        if patch.attribute in bound:
            above = lines[:node.lineno - 1]
            comments = len(above) - next((i for i, line in enumerate(reversed(above)) if not line.startswith("#")),
                                         len(above))
            return "\n".join(above[comments:])
    return ""


@pytest.mark.parametrize("bug, patch", PATCHES, ids=[f"{bug}:{patch.seam}" for bug, patch in PATCHES])
def test_each_seam_says_it_is_one_and_names_the_bug(bug: str, patch: planted.Patch) -> None:
    marker = " ".join(_marker(patch).split())
    assert "Chaos seam" in marker and f"`{bug}`" in marker, (
        f"{patch.seam} does not say it is the seam {bug} replaces; its docstring or comment: {marker!r}")


def test_a_seam_that_is_missing_or_private_plants_nothing() -> None:
    module = types.ModuleType("somewhere")
    module.rule = lambda: "code"  # type: ignore[attr-defined]
    module._rule = lambda: "code"  # type: ignore[attr-defined]
    module.TABLE = {int: "code"}  # type: ignore[attr-defined]

    def replace(original: object) -> object:
        return lambda: "bug"

    for patch, why in [(planted.Patch(module, "renamed_rule", replace), "does not exist"),
                       (planted.Patch(module, "_rule", replace), "is private"),
                       (planted.Patch(module, "TABLE", replace, str), "no such entry")]:
        with pytest.raises(planted.SeamMissing, match=why):
            planted.plant("no-dedupe", [planted.Patch(module, "rule", replace), patch])
        assert module.rule() == "code", "a bug with a missing seam planted some of its patches"
    unplant = planted.plant("no-dedupe", [planted.Patch(module, "rule", replace)])
    assert module.rule() == "bug"
    unplant()
    assert module.rule() == "code"


def test_no_module_copies_a_seam_with_a_from_import() -> None:
    """`from fsutil import fsync_file` binds the code's version at import: a bug planted
    later never reaches that caller. Seams of modules are called as module.name."""
    seams = {(patch.owner.__name__, patch.attribute) for _, patch in PATCHES
             if isinstance(patch.owner, types.ModuleType)}
    copies = []
    for module, path in module_files().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                copies += [f"{module} imports {node.module}.{alias.name}" for alias in node.names
                           if (node.module, alias.name) in seams]
    assert copies == [], f"callers a planted bug cannot reach: {copies}"
