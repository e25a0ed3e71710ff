"""Every use of pysyncobj's internals, for the one version they were read from.

The node relies on pysyncobj 0.3.17 beyond its public API: the journal factory
it calls, the name-mangled `SyncObj.__*` attributes holding the log, the applied
index, the commit index and the AppendEntries sender, the transport's
back-reference to its node and the shape of an AppendEntries message, and the
text of one log message. Each use is a small function here, so an
upgrade is checked in this module alone, and `install()` refuses any other
version instead of letting a changed internal corrupt a replica quietly.

Nothing is patched on import: `install()` (called by CoordinatorNode before it
builds its SyncObj) patches pysyncobj, and calling it again changes nothing.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from importlib import metadata
from typing import Any, Callable, Iterator

from pysyncobj import SyncObj
from pysyncobj import journal as pysyncobj_journal
from pysyncobj import syncobj as pysyncobj_syncobj
from pysyncobj.transport import TCPTransport

from coordinator.replication.journal import ConflictAwareJournal

SUPPORTED_VERSION = "0.3.17"
_PYSYNCOBJ_LOGGER = "pysyncobj.syncobj"
log = logging.getLogger(__name__)
_FALSE_ALARM = "truncating already-applied log entries"


class UnsupportedPysyncobj(RuntimeError):
    pass


def check_version() -> None:
    """Raise unless the installed pysyncobj is the version these internals were read from."""
    try:
        installed = metadata.version("pysyncobj")
    except metadata.PackageNotFoundError:
        installed = "none"
    if installed != SUPPORTED_VERSION:
        raise UnsupportedPysyncobj(
            f"pysyncobj {installed} is installed, but the coordinator relies on the internals of "
            f"pysyncobj {SUPPORTED_VERSION}: install pysyncobj=={SUPPORTED_VERSION}")


# ---- the node's private state ------------------------------------------------------
def raft_log(node: SyncObj) -> Any:
    """The journal pysyncobj created for `node` (a ConflictAwareJournal once installed)."""
    return node._SyncObj__raftLog


def applying_index(node: SyncObj) -> int:
    """The log index of the entry being applied, from inside a @replicated method:
    pysyncobj raises its last-applied index only after the method returns."""
    return node.raftLastApplied + 1


def current_log_index(node: SyncObj) -> int:
    """The index of the last entry in the node's log."""
    return node._SyncObj__getCurrentLogIndex()


@contextmanager
def one_append_entries(node: SyncObj) -> Iterator[None]:
    """Hold back the AppendEntries pysyncobj sends for each command queued in the
    block, then send one for all of them (if this node still leads and added any).

    Shadows the name-mangled sender with a no-op on the instance. Only the Raft
    thread calls the sender, so no other thread sees the no-op."""
    before = current_log_index(node)
    node._SyncObj__sendAppendEntries = _no_op
    try:
        yield
    finally:
        del node._SyncObj__sendAppendEntries
    if node._isLeader() and current_log_index(node) > before:
        node._SyncObj__sendAppendEntries()


def _no_op() -> None:
    pass


# ---- the journal flush hook --------------------------------------------------------
class FlushingTransport(TCPTransport):
    """pysyncobj's TCP transport, with the journal flushed before any message leaves
    (and Raft's commit rule kept on every AppendEntries received: see
    commit_only_what_the_leader_sent).

    Every Raft message a node sends goes through send(): vote requests and grants
    (term and vote are already durable: setCurrentTerm stores them synchronously),
    AppendEntries (the leader counts its own log toward the majority, so its entries
    must be durable before a follower can complete that majority) and the responses
    acknowledging entries. Flushing here, once for everything appended since the
    last flush, is Raft's persistence rule as a group commit: one fdatasync per
    burst of messages instead of one per entry.
    """

    def send(self, node, message) -> bool:
        raft_log(transport_owner(self)).flush()
        return super().send(node, message)

    def setOnMessageReceivedCallback(self, callback) -> None:  # type: ignore[no-untyped-def]
        """pysyncobj registers its message handler here; every AppendEntries it handles
        then passes through commit_only_what_the_leader_sent."""
        if callback is None:
            super().setOnMessageReceivedCallback(None)
            return
        owner = transport_owner(self)
        super().setOnMessageReceivedCallback(
            lambda peer, message: commit_only_what_the_leader_sent(owner, callback, peer, message))


def transport_owner(transport: TCPTransport) -> SyncObj:
    """The SyncObj a transport sends for."""
    return transport._syncObj


# ---- the follower's commit index -----------------------------------------------------
def commit_only_what_the_leader_sent(node: SyncObj, handle: Callable[[Any, Any], None], peer: Any,
                                     message: Any) -> None:
    """Let pysyncobj handle `message`, then hold the commit index to Raft's rule for an
    AppendEntries: it rises to min(leaderCommit, index of the last entry the message
    carried), never further.

    pysyncobj 0.3.17 raises it to min(leaderCommit, last index of the follower's log).
    That is Raft's rule only for a log whose tail the message has just replaced, and
    ConflictAwareJournal keeps a tail that no incoming entry contradicted. A deposed
    leader's log ends with entries of its old term that no majority ever held; the
    first AppendEntries of the new leader that matches without reaching them (one
    carrying only entries it already has, or any chunk of a snapshot transfer, which
    pysyncobj counts as carrying everything) would commit them, and this node would
    apply writes the cluster never made. A snapshot then replaces the journal, and
    the store keeps those writes at an index the others hold different ones at.
    """
    if not isinstance(message, dict) or message.get("type") != "append_entries":
        handle(peer, message)
        return
    commit_before, applied_before = node.raftCommitIndex, node.raftLastApplied
    handle(peer, message)
    commit = node.raftCommitIndex
    if commit <= commit_before:
        return
    allowed = max(commit_before, _last_entry_sent(node, message, applied_before))
    if commit > allowed:
        node._SyncObj__raftCommitIndex = allowed
        raft_log(node).setRaftCommitIndex(allowed)
        held = _entry_term(node, allowed + 1)
        # An older term than the leader's is a deposed leader's tail, a few times per heal and
        # worth seeing; the same term is a late, shorter message, frequent under load.
        log.log(logging.INFO if held is not None and held < message.get("term", 0) else logging.DEBUG,
                "commit index held at %d, not %d: the entries after it (term %s) are not yet known to "
                "match the log of the leader of term %s", allowed, commit, held, message.get("term"))


def _entry_term(node: SyncObj, index: int) -> int | None:
    """The term of the log entry at `index`, None when the log does not hold it."""
    journal = raft_log(node)
    if len(journal) == 0:
        return None
    position = index - journal[0][1]
    return journal[position][2] if 0 <= position < len(journal) else None


def _last_entry_sent(node: SyncObj, message: dict, applied_before: int) -> int:
    """The index of the last entry `message` made this node's log agree on with the
    leader's: the last entry it carried, the snapshot it completed, or nothing (0)."""
    if "prevLogIdx" in message:
        if message["prevLogIdx"] is None:
            return 0
        # One entry too large for a message comes in pieces; only the last one carries it.
        carried = 1 if message.get("transmission") == "finish" else len(message.get("entries", ()))
        return message["prevLogIdx"] + carried
    if node.raftLastApplied != applied_before:
        return current_log_index(node)  # a snapshot was installed: the log is the snapshot's two entries
    return 0


# ---- patches -----------------------------------------------------------------------
class _DropFalseAlarm(logging.Filter):
    """pysyncobj logs its truncation warning before calling the journal, which no
    longer truncates matching entries; real conflicts are logged by the journal."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_FALSE_ALARM)


_DROP_FALSE_ALARM = _DropFalseAlarm()


# The MAC key of each journal file, set before pysyncobj's constructor opens it (the
# factory's signature is pysyncobj's, which has no room for a key).
_JOURNAL_KEYS: dict[str, bytes] = {}


def use_journal_key(journal_file: str, key: bytes) -> None:
    """The key the journal at `journal_file` is written and checked with (journal_format)."""
    _JOURNAL_KEYS[journal_file] = key


def create_journal(journal_file: str | None = None) -> pysyncobj_journal.Journal:
    """pysyncobj's journal factory, replaced: the conflict-aware durable journal on disk."""
    if journal_file is None:
        return pysyncobj_journal.MemoryJournal()
    if journal_file not in _JOURNAL_KEYS:
        raise RuntimeError(f"no journal key for {journal_file}: call use_journal_key first")
    return ConflictAwareJournal(journal_file, key=_JOURNAL_KEYS[journal_file])


def install() -> None:
    """Check the version, then make pysyncobj create ConflictAwareJournal and drop its
    false truncation alarm. Must run before a SyncObj is constructed; idempotent."""
    check_version()
    pysyncobj_syncobj.createJournal = create_journal
    logging.getLogger(_PYSYNCOBJ_LOGGER).addFilter(_DROP_FALSE_ALARM)  # a no-op when already added
