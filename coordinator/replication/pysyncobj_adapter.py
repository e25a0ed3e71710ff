"""Every use of pysyncobj's internals, for the one version they were read from.

The node relies on pysyncobj 0.3.17 beyond its public API: the journal factory
it calls, the name-mangled `SyncObj.__*` attributes holding the log, the applied
index, the commit index, the Raft role, the entry applier (whose entry encoding
raft_entries reads) and the AppendEntries sender and the shape
of an AppendEntries message, the transport's back-reference to its node and its
not-yet-identified connections, the TCP connection's read and write buffers, its
parser and key-exchange attributes (for raft_link's frames) and the connection
classes its server and transport build, its encryptor factory, the wire framing and
key exchange of its TCP transport (for the probe of a new member), and the text of one log message. Each
use is a small function here, so an
upgrade is checked in this module alone, and `install()` refuses any other
version instead of letting a changed internal corrupt a replica quietly.

Nothing is patched on import: `install()` (called by CoordinatorNode before it
builds its SyncObj) patches pysyncobj, and calling it again changes nothing.
"""
from __future__ import annotations

import logging
import math
import os
import socket
import struct
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable, Iterator

from pysyncobj import SyncObj
from pysyncobj import encryptor as pysyncobj_encryptor
from pysyncobj import journal as pysyncobj_journal
from pysyncobj import pickle as pysyncobj_pickle
from pysyncobj import syncobj as pysyncobj_syncobj
from pysyncobj import tcp_server as pysyncobj_tcp_server
from pysyncobj import transport as pysyncobj_transport
from pysyncobj.monotonic import monotonic as pysyncobj_monotonic
from pysyncobj.tcp_connection import TcpConnection
from pysyncobj.transport import TCPTransport

from coordinator.core.connection_caps import beyond_share, source_of
from coordinator.observability import raft_log as raft_events_log
from coordinator.observability.log_tally import LogTally
from coordinator.replication import raft_entries, raft_link
from coordinator.replication.journal import ConflictAwareJournal
from coordinator.replication.replica import RaftProbeFailed

SUPPORTED_VERSION = "0.3.17"
_PYSYNCOBJ_LOGGER = "pysyncobj.syncobj"
_FALSE_ALARM = "truncating already-applied log entries"
log = logging.getLogger(__name__)


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


_ROLES = {0: "follower", 1: "candidate", 2: "leader"}


def raft_role(node: SyncObj) -> str:
    """"leader", "follower" or "candidate" (getStatus() builds a whole dict for it)."""
    return _ROLES.get(node._SyncObj__raftState, "follower")


def voters(node: SyncObj) -> tuple[frozenset[str], frozenset[str]]:
    """(every voter's Raft address, the voters this node has a live connection to),
    this node included in both. Call it on the Raft thread: it reads the node's sets."""
    others = node.otherNodes
    me = node.selfNode.address
    return (frozenset({me, *(n.address for n in others)}),
            frozenset({me, *(n.address for n in others if node.isNodeConnected(n))}))


def current_log_index(node: SyncObj) -> int:
    """The index of the last entry in the node's log."""
    return node._SyncObj__getCurrentLogIndex()


class LeaderWritePath:
    """Mixin for a SyncObj subclass: the leader's side of the write path.

    After applying committed entries, call `self._after_apply()` (the node stores
    them and answers their proposals) and send no AppendEntries for them. pysyncobj
    (unbatched) sends every follower an AppendEntries right after the leader
    applies, only to tell them the new commit index, and reaches the end of its tick
    (where our store commits and clients are answered) after that. Raft needs
    neither: the next AppendEntries (new entries, or the heartbeat every
    appendEntriesPeriod) carries the commit index, and a new leader commits what its
    predecessor did through its own first entry. At one write in flight the extra
    round (pickling and encrypting for each follower, and each follower handling it)
    was about a quarter of the write's latency, and it came before the answer.
    Followers learn the commit index up to one heartbeat later; none serves reads.

    A new leader's no-op entry is flushed at once: in a one-node cluster pysyncobj
    counts it toward a commit in the same tick, before the end-of-tick flush
    (FlushingTransport says where the other flushes are)."""

    def _after_apply(self) -> None:
        raise NotImplementedError

    def _SyncObj__applyLogEntries(self) -> bool:
        SyncObj._SyncObj__applyLogEntries(self)  # type: ignore[attr-defined]
        try:
            self._after_apply()
        except Exception:  # the heartbeats later in this tick must still go out
            log.exception("storing or answering applied entries failed")
        return False

    def _SyncObj__onBecomeLeader(self) -> None:
        SyncObj._SyncObj__onBecomeLeader(self)  # type: ignore[attr-defined]
        raft_log(self).flush()


class GuardedApply:
    """Mixin for a SyncObj subclass: how pysyncobj applies one committed entry, with
    three rules added. The subclass says up to which index its state holds the log
    (`_applied_through`) and how the node stops when an entry fails (`_apply_failed`).

    - An entry the state already holds is skipped before anything in it is read.
      After a restart pysyncobj applies the log again from its last applied index
      (the snapshot's, or 1), unpickling every entry on the way.
    - Membership entries are read even then (pysyncobj rebuilds the member list from
      them at every start), and always by raft_entries, whose unpickler admits
      nothing but a member's address.
    - An exception out of applying an entry stops the node. pysyncobj would log
      "failed _onTick" and apply the same entry again at the next tick, thousands of
      times, while the node went on voting and leading with its state stuck. A
      refused command is a result, not an exception (applier.py), so only a bug gets
      here; the entry is committed, so every node meets it, and each one stops
      saying which entry failed and why rather than carry on past it."""

    def _applied_through(self) -> int:
        raise NotImplementedError

    def _apply_failed(self, index: int, exc: Exception) -> None:
        raise NotImplementedError

    def _SyncObj__doApplyCommand(self, command: bytes) -> Any:
        index = applying_index(self)  # type: ignore[arg-type]
        try:
            if index <= self._applied_through() and raft_entries.kind(command) != raft_entries.MEMBERSHIP:
                return None
            return SyncObj._SyncObj__doApplyCommand(self, command)  # type: ignore[attr-defined]
        except Exception as exc:
            self._apply_failed(index, exc)
            return None

    def _SyncObj__parseChangeClusterRequest(self, command: bytes) -> list | None:
        return raft_entries.membership_change(command)


class OneMembershipChangeAtATime:
    """Mixin for a SyncObj subclass: a leader appends a membership change only once the
    previous one is applied (Raft's single-server changes; two in flight can form
    majorities that do not overlap).

    pysyncobj 0.3.17 has the check (`__changeCluster` refuses while
    `__changeClusterIDx` is above the last applied index) but never sets that index,
    so it never refused. It is set here to the index the accepted change is about to
    be appended at; a second change meanwhile gets REQUEST_DENIED (MembershipOutcome
    REFUSED). A new leader takes no change before its no-op is applied, which
    commits any change its predecessor left in the log."""

    def _SyncObj__changeCluster(self, request) -> bool:  # type: ignore[no-untyped-def]
        accepted = SyncObj._SyncObj__changeCluster(self, request)  # type: ignore[attr-defined]
        if accepted:  # pysyncobj appends it next, at the index after the current last one
            self._SyncObj__changeClusterIDx = current_log_index(self) + 1  # type: ignore[assignment]
        return accepted


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


# ---- the election timer -----------------------------------------------------------
def defer_election(node: SyncObj, until: float, *, even_a_transfer: bool = False) -> None:
    """Hold a follower's (or candidate's) election timer until at least `until`
    (pysyncobj's monotonic clock, time.monotonic), unless a leadership transfer asked
    for an election now (`even_a_transfer`: that one too, and the transfer is dropped).
    A leader's messages reset the timer as they are read."""
    transfer = node._SyncObj__transferInProgress or node._SyncObj__raftElectionDeadline == 0
    if transfer and not even_a_transfer:
        return
    node._SyncObj__transferInProgress = False
    node._SyncObj__raftElectionDeadline = max(node._SyncObj__raftElectionDeadline, until)


# ---- the Raft port's guard ---------------------------------------------------------
@dataclass(frozen=True)
class RaftPortLimits:
    """What a connection to the Raft port may do before it has proven the password.

    pysyncobj reads a 4-byte length prefix (up to 2 GiB) and buffers the whole
    message before it tries to decrypt it, copying the buffer on every read: a
    stranger streaming 24 MB at a leader's Raft port held its Raft thread long
    enough to force an election, and idle connections were never closed. Until a
    peer's first message decrypts with the password, its messages may announce at
    most `unauthenticated_max_bytes`, and it must get there (and name itself) within
    `auth_timeout_s`; then pysyncobj's own bound applies (snapshots and large
    AppendEntries need it). One address may hold at most `unauthenticated_per_source`
    connections that have not authenticated (a peer authenticates at once, so its own
    connection is never among them for long): a stranger reopening idle connections
    faster than the timeout closes them holds that many, not every descriptor the
    process may open. `on_refused(reason, detail)` counts and logs each connection
    closed (observability.raft_log rate-limits the lines)."""

    auth_timeout_s: float = 5.0
    unauthenticated_max_bytes: int = 64 * 1024
    unauthenticated_per_source: int = 16
    on_refused: Callable[[str, str], None] | None = None


_PREFIX = struct.Struct("i")  # pysyncobj's length prefix: native-endian signed int


class LinkConnection(TcpConnection):
    """pysyncobj's TCP connection, speaking raft_link's frames to a peer that offered
    them and pysyncobj's own to any other (raft_link says why and how).

    pysyncobj keeps the key exchange in two attributes: `recvRandKey`, the random
    key this end sent (a property here, which appends raft_link.LINK_OFFER when the
    node's encryptor can seal links), and `sendRandKey`, the peer's. Every message
    sent is counted by type and framing."""

    _own_key: Any = None
    _link: raft_link.Link | None = None
    _TcpConnection__readBuffer: bytes  # pysyncobj's, set in its constructor

    @property
    def recvRandKey(self) -> Any:
        return self._own_key

    @recvRandKey.setter
    def recvRandKey(self, key: Any) -> None:
        if isinstance(key, bytes) and isinstance(self.encryptor, raft_link.RaftCipher):
            key += raft_link.LINK_OFFER
        self._own_key = key

    def _current_link(self) -> raft_link.Link | None:
        """The link of this connection once both ends offered it, None before."""
        own, peer = self._own_key, self.sendRandKey
        cipher = self.encryptor
        if not (isinstance(cipher, raft_link.RaftCipher) and raft_link.offers_link(own)
                and raft_link.offers_link(peer)):
            return None
        if self._link is None or self._link.keys != (own, peer):  # a new key exchange: a new link
            self._link = raft_link.Link(cipher.link_secret, own, peer)
        return self._link

    def send(self, message: Any) -> None:
        kind = message.get("type", "other") if isinstance(message, dict) else "other"
        # The key exchange itself stays in pysyncobj's framing: the peer needs this key
        # to derive the link.
        link = None if message is self._own_key else self._current_link()
        if link is None:
            raft_events_log.message_sent("key_exchange" if message is self._own_key else kind, "fernet")
            super().send(message)
            return
        raft_events_log.message_sent(kind, "link_v1")
        data = link.seal(message)
        self._TcpConnection__writeBuffer += _PREFIX.pack(len(data)) + data
        self._TcpConnection__trySendBuffer()

    def _TcpConnection__processParseMessage(self) -> Any:
        """pysyncobj's parser for its frames; link frames opened here. A frame that does
        not open, or a Fernet frame after a link frame, closes the connection (as
        pysyncobj closes it on a frame that does not decrypt)."""
        buffer = self._TcpConnection__readBuffer
        if len(buffer) < _PREFIX.size:
            return None
        (length,) = _PREFIX.unpack_from(buffer)
        if length < 0:
            self.disconnect()
            return None
        if len(buffer) - _PREFIX.size < length:
            return None
        end = _PREFIX.size + length
        link = self._current_link()
        if not raft_link.is_link_frame(buffer[_PREFIX.size:_PREFIX.size + 1]):
            if link is not None and link.opened:
                self._refuse_frame("fernet_after_link", "a pysyncobj frame after link frames")
                return None
            return super()._TcpConnection__processParseMessage()
        if link is None:
            self._refuse_frame("not_offered", "a link frame on a connection whose key exchange did not offer links")
            return None
        try:
            message = link.open(buffer[_PREFIX.size:end])
        except Exception as error:  # forged, tampered, replayed, or not a pickle: like pysyncobj, close
            self._refuse_frame("link_frame", str(error) or type(error).__name__)
            return None
        self._TcpConnection__readBuffer = buffer[end:]
        return message

    def _refuse_frame(self, reason: str, detail: str) -> None:
        """Close the connection, and say so: pysyncobj closes silently, and a silent
        close looks to an operator like a flaky network."""
        raft_events_log.frame_refused(reason, f"closed a Raft connection that sent {detail}")
        self.disconnect()


class GuardedConnection(LinkConnection):
    """An accepted connection of pysyncobj's TCP server, closed at once when, before
    authenticating, it announces a message longer than the limit; the transport
    closes it when it has not authenticated in time (FlushingTransport._onTick).

    Authenticated means the peer's first message decrypted with the password:
    pysyncobj's server then stores the random key that message carried
    (`sendRandKey`), which only happens after a successful decryption."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.accepted_at = time.monotonic()
        self.limits = RaftPortLimits()  # the transport sets its node's own on accept
        self._source: str | None = None

    @property
    def authenticated(self) -> bool:
        return bool(self.sendRandKey)

    @property
    def source(self) -> str:
        """The address the connection came from (core.connection_caps.source_of)."""
        if self._source is None:
            try:
                self._source = source_of(self._TcpConnection__socket.getpeername()[0])
            except (OSError, AttributeError, IndexError):
                self._source = ""
        return self._source

    def refuse(self, kind: str, detail: str) -> None:
        """Close the connection; `kind` ("oversized", "idle", "unnamed", "per_source") labels the count."""
        if self.limits.on_refused is not None:
            self.limits.on_refused(kind, detail)
        self.disconnect()

    def _oversized(self) -> str | None:
        """Why the buffered input breaks the pre-authentication bound, if it does."""
        if self.authenticated:
            return None
        buffered = self._TcpConnection__readBuffer
        bound = self.limits.unauthenticated_max_bytes
        if len(buffered) >= _PREFIX.size:
            (announced,) = _PREFIX.unpack_from(buffered)
            if announced < 0 or announced > bound:
                return f"announced a {announced}-byte message before authenticating (bound {bound})"
        if len(buffered) > _PREFIX.size + bound:
            return f"sent {len(buffered)} bytes before authenticating (bound {bound})"
        return None

    # pysyncobj's name-mangled reader, replaced: the same reads, with the bound checked
    # after each one (its loop reads for as long as data keeps arriving).
    def _TcpConnection__tryReadBuffer(self) -> None:
        while self._TcpConnection__processRead():
            reason = self._oversized()
            if reason is not None:
                self.refuse("oversized", reason)
                return
        self._TcpConnection__lastReadTime = pysyncobj_monotonic()


# ---- the transport: journal flush and the guard ------------------------------------
class FlushingTransport(TCPTransport):
    """pysyncobj's TCP transport, with the journal flushed before any message that
    acknowledges it leaves, Raft's commit rule kept on every AppendEntries received
    (see commit_only_what_the_leader_sent), and the Raft port guarded (RaftPortLimits).

    Every Raft message a node sends goes through send(). Vote requests and grants
    (term and vote are already durable: setCurrentTerm stores them synchronously) and
    the responses acknowledging entries flush first: a follower's acknowledgement
    counts toward a majority. Flushing here, once for everything appended since the
    last flush, is Raft's persistence rule as a group commit: one fdatasync per burst
    of messages instead of one per entry.

    AppendEntries leave before the leader's own flush (Raft allows a leader to write
    its log in parallel with replicating it): the leader counts its own log toward
    the majority only when it advances its commit index at the start of a tick, and
    the node (replication.node) flushes at the end of every tick and again before
    that step (and LeaderWritePath right after an election), so its fdatasync
    overlaps the followers' round trip instead of preceding it.
    """

    def send(self, node, message) -> bool:
        owner = transport_owner(self)
        if not (isinstance(message, dict) and message.get("type") == "append_entries"):
            raft_log(owner).flush()
            if message.get("type") == "next_node_idx":
                ReadRoundAcks.stamp_answer(owner, node, message)
                AnswerClocks.stamp(owner, message)
        else:
            ReadRoundAcks.stamp_append_entries(owner, message)
        return super().send(node, message)

    @property
    def _limits(self) -> RaftPortLimits:
        return getattr(transport_owner(self), "raft_port_limits", None) or RaftPortLimits()

    def _onNewIncomingConnection(self, conn) -> None:
        if isinstance(conn, GuardedConnection):
            conn.limits = self._limits
        super()._onNewIncomingConnection(conn)

    def _onTick(self) -> None:
        """pysyncobj's tick (bind, connect), then close the accepted connections that
        have not named themselves within the bound (an idle stranger produces no
        event, so pysyncobj's own read timeout never looks at it), and the newest
        unauthenticated ones of an address beyond its share."""
        super()._onTick()
        limits = self._limits
        now = time.monotonic()
        waiting = []
        for conn in list(self._unknownConnections):
            if not isinstance(conn, GuardedConnection):
                continue
            if now - conn.accepted_at > limits.auth_timeout_s:
                self._unknownConnections.discard(conn)
                conn.refuse("unnamed" if conn.authenticated else "idle",
                            f"{'named no node' if conn.authenticated else 'did not authenticate'} "
                            f"within {limits.auth_timeout_s:g} s")
            elif not conn.authenticated:
                waiting.append(conn)
        share = limits.unauthenticated_per_source
        for conn in beyond_share(sorted(waiting, key=lambda c: c.accepted_at), share, lambda c: c.source):
            self._unknownConnections.discard(conn)
            conn.refuse("per_source", f"came from {conn.source}, which holds {share} others that have not "
                        "authenticated")

    def setOnMessageReceivedCallback(self, callback) -> None:  # type: ignore[no-untyped-def]
        """pysyncobj registers its message handler here; every message it handles then
        passes through follow_raft_rules."""
        if callback is None:
            super().setOnMessageReceivedCallback(None)
            return
        owner = transport_owner(self)
        super().setOnMessageReceivedCallback(lambda peer, message: follow_raft_rules(owner, callback, peer, message))


def transport_owner(transport: TCPTransport) -> SyncObj:
    """The SyncObj a transport sends for."""
    return transport._syncObj


# ---- probing a would-be member ------------------------------------------------------


def _frame(node: SyncObj, message: object) -> bytes:
    """One message as pysyncobj's TcpConnection.send frames it (no random key yet)."""
    data = node.encryptor.encrypt_at_time(zlib.compress(pysyncobj_pickle.dumps(message), 3),
                                          int(pysyncobj_monotonic()))
    return _PREFIX.pack(len(data)) + data


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise RaftProbeFailed("closed the connection during the key exchange (another password?)")
        chunks += chunk
    return bytes(chunks)


def probe_password(node: SyncObj, address: str, timeout: float) -> None:
    """Prove that a node answers on `address` with this cluster's Raft password.

    Speaks the first step of pysyncobj's TCP key exchange: send a random key
    encrypted with the password; a node with the same password answers with its own
    key, wrapped with ours and encrypted with the password. Only a node that could
    decrypt ours can send ours back. The connection is then closed before this node
    names itself, so the probed node drops it like any unknown connection.
    Blocking: run it off the event loop. Raises RaftProbeFailed with the reason."""
    host, _, port = address.rpartition(":")
    ours = os.urandom(32)
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(_frame(node, ours))
            (length,) = _PREFIX.unpack(_read_exactly(sock, _PREFIX.size))
            if not 0 < length <= 4096:
                raise RaftProbeFailed(f"answered with a {length}-byte message, not a key")
            token = _read_exactly(sock, length)
    except OSError as exc:
        raise RaftProbeFailed(f"no Raft node answers ({exc.strerror or exc})") from None
    try:
        echoed, _theirs = pysyncobj_pickle.loads(zlib.decompress(node.encryptor.decrypt(token)))
    except Exception:  # a wrong password fails to decrypt; anything else is not pysyncobj
        raise RaftProbeFailed("its answer does not decrypt with this cluster's password") from None
    if echoed != ours:
        raise RaftProbeFailed("its answer does not carry the key this node sent")

# ---- Raft's rules on received messages ---------------------------------------------
def follow_raft_rules(node: SyncObj, handle: Callable[[Any, Any], None], peer: Any, message: Any) -> None:
    """Let pysyncobj handle `message`, within the rules of Raft it bends:
    a node whose log was lost grants no vote (RebuildingVoter), a snapshot is installed
    only when it carries news (SnapshotReceiver), and a follower's commit index rises
    only over entries the leader sent (commit_only_what_the_leader_sent). Also the
    ReadIndex exchange pysyncobj lacks (ReadRoundAcks), and the voters' clocks a
    leader's own is held to (AnswerClocks)."""
    kind = message.get("type") if isinstance(message, dict) else None
    if kind == "request_vote" and raft_log(node).log_lost_in_term() is not None:
        RebuildingVoter.refuse(node, peer, message)
        return
    if kind == "next_node_idx":
        ReadRoundAcks.count(node, peer, message)
        AnswerClocks.hear(node, peer, message)
    if kind != "append_entries":
        handle(peer, message)
        return
    with ReadRoundAcks.answering(node, peer, message):
        if message.get("serialized") is not None and isinstance(node, SnapshotReceiver):
            node.receive_snapshot_chunk(handle, peer, message)
        else:
            commit_only_what_the_leader_sent(node, handle, peer, message)
            if raft_log(node).log_lost_in_term() is not None:
                RebuildingVoter.note_caught_up(node, peer, message)


# ---- ReadIndex (read_index.ReadRounds keeps the books) -------------------------------
class ReadRoundAcks:
    """The ReadIndex exchange on pysyncobj's own messages: while reads wait, the leader
    stamps the round on every AppendEntries it sends; a follower stamps the answer
    (next_node_idx, which carries no term of its own) with that round and the term it
    accepted the AppendEntries in; the leader counts an answer of its own term."""

    @staticmethod
    def stamp_append_entries(node: SyncObj, message: dict) -> None:
        rounds = _read_rounds(node)
        read_round = rounds.stamp() if rounds is not None else None
        if read_round is not None:
            message["read_round"] = read_round

    @staticmethod
    @contextmanager
    def answering(node: SyncObj, peer: Any, message: dict) -> Iterator[None]:
        """While pysyncobj handles a stamped AppendEntries, its answer to `peer` is stamped."""
        if "read_round" not in message:
            yield
            return
        node.read_round_answering = (peer, message)
        try:
            yield
        finally:
            node.read_round_answering = None

    @staticmethod
    def stamp_answer(node: SyncObj, peer: Any, message: dict) -> None:
        answering = getattr(node, "read_round_answering", None)
        if answering is not None and answering[0] == peer and _from_my_leader(node, peer, answering[1]):
            message["read_round"], message["read_term"] = answering[1]["read_round"], node.raftCurrentTerm

    @staticmethod
    def count(node: SyncObj, peer: Any, message: dict) -> None:
        rounds = _read_rounds(node)
        if "read_round" in message and rounds is not None and node._isLeader():
            rounds.acknowledged(peer.address, message.get("read_term"), message["read_round"])


class AnswerClocks:
    """Each follower's wall clock, on its answers to AppendEntries (next_node_idx), for
    the leader's voter_clocks.VoterClocks: a node started with its clock far ahead
    must not stamp the replicated clock with it when it leads."""

    @staticmethod
    def stamp(node: SyncObj, message: dict) -> None:
        clock = getattr(node, "answer_clock", None)
        if clock is not None:
            message["clock"] = clock.now()

    @staticmethod
    def hear(node: SyncObj, peer: Any, message: dict) -> None:
        clocks, wall = getattr(node, "voter_clocks", None), message.get("clock")
        if (clocks is not None and isinstance(wall, float) and math.isfinite(wall) and node._isLeader()
                and getattr(peer, "address", None) is not None):
            clocks.heard(peer.address, wall, time.monotonic())


def _read_rounds(node: SyncObj) -> Any:
    """The node's read_index.ReadRounds, if it serves reads by ReadIndex."""
    return getattr(node, "read_rounds", None)


def _from_my_leader(node: SyncObj, peer: Any, message: dict) -> bool:
    """Whether pysyncobj accepted `message` as coming from the leader this node follows
    in its current term (it ignores an older term's)."""
    return message.get("term") == node.raftCurrentTerm and node._SyncObj__raftLeader == peer


def read_index(node: SyncObj) -> int:
    """The index a read arriving now must see applied: the commit index once an entry of
    this leader's term is committed; before that the end of its log (its own first
    entry of the term is there, and committing it commits everything before)."""
    commit = node.raftCommitIndex
    return commit if _entry_term(node, commit) == node.raftCurrentTerm else current_log_index(node)


def send_append_entries_now(node: SyncObj) -> None:
    """A leader's AppendEntries (entries or a heartbeat) to every follower at once,
    instead of at the next appendEntriesPeriod. Raft thread only."""
    node._SyncObj__sendAppendEntries()


def wake(node: SyncObj) -> None:
    """Cut the Raft thread's wait for socket events short, as a proposal does (pysyncobj
    has a notifier only when it does not batch AppendEntries; then the next tick,
    autoTickPeriod away at most, serves)."""
    notifier = getattr(node, "_SyncObj__pipeNotifier", None)
    if notifier is not None:
        notifier.notify()


class RebuildingVoter:
    """The rules for a node whose log was lost (DurableJournal.log_lost_in_term).

    Raft counts a node's acknowledgement of an entry as a promise that the node keeps
    it: a committed entry is on a majority, and every election needs a majority's
    votes, so some voter holds it and refuses any candidate whose log lacks it. A node
    rebuilt empty has broken that promise; pysyncobj would grant its vote to any
    candidate whose log is as long as its empty one (the lone survivor of the writes
    then loses them to a stale candidate), and let it stand for election itself.

    So until its log is caught up it grants no vote and calls no election (the node
    holds its election timer: CoordinatorNode._onTick). Caught up means: a leader of
    the current term sent an AppendEntries carrying no entries whose previous entry
    is this node's last and matched, so the log holds everything that leader held. A
    leader of a later term than the loss was elected without this node, so it holds
    every committed entry; the leader of the same term holds every entry this node
    acknowledged to it (it read those acknowledgements before the node could be
    stopped, repaired and started again)."""

    @staticmethod
    def refuse(node: SyncObj, peer: Any, message: dict) -> None:
        log.info("refusing the vote %s asked for in term %s: this node's log was lost in term %s and no leader "
                 "has caught it up yet", getattr(peer, "address", peer), message.get("term"),
                 raft_log(node).log_lost_in_term())

    @staticmethod
    def note_caught_up(node: SyncObj, peer: Any, message: dict) -> None:
        if message.get("entries") or "transmission" in message or message.get("prevLogIdx") is None:
            return
        if not _from_my_leader(node, peer, message):
            return
        last = current_log_index(node)
        if message["prevLogIdx"] != last or _entry_term(node, last) != message.get("prevLogTerm"):
            return
        raft_log(node).log_rebuilt()
        log.warning("this node's log is caught up with the leader of term %s at index %d: it votes and may "
                    "stand for election again", message["term"], last)


_unreadable_snapshots = LogTally(lambda event, **fields: log.error("%s: %s", event, fields),
                                 "received snapshots refused", interval_s=60.0)


class SnapshotReceiver:
    """Mixin for a SyncObj subclass whose snapshots are files: it receives a leader's
    snapshot itself, and installs it only when it carries news.

    pysyncobj renames every snapshot it receives over the node's own and replaces the
    whole log with it. A paused follower whose leader sent a snapshot before it fell
    behind (a late transfer) then installed one ending below its own commit index,
    dropped committed entries it had acknowledged, and moved its commit index back.
    Raft's InstallSnapshot rule: a snapshot whose last entry the follower already
    holds (at or below its commit index, or the same index and term in its log) is
    ignored, and the log is kept; only a snapshot the log does not reach replaces it.

    The subclass names where the node's snapshot lives (`snapshot_path`) and reads
    the last entry of a received file (`_snapshot_last_entry`)."""

    snapshot_path: str
    _incoming_snapshot: Any = None  # the open file of a transfer under way

    def _snapshot_last_entry(self, path: str) -> tuple[int, int]:
        """(index, term) of the last entry a snapshot file holds; ValueError saying why
        when it cannot be read."""
        raise NotImplementedError

    def receive_snapshot_chunk(self, handle: Callable[[Any, Any], None], peer: Any, message: dict) -> None:
        """Let pysyncobj handle the message as a bare AppendEntries (term, leader,
        election timer; our commit rule holds its commit index), then take its chunk
        of the snapshot if pysyncobj accepted the message from the leader it follows."""
        chunk = message["serialized"]
        commit_only_what_the_leader_sent(self, handle, peer, {**message, "serialized": None})
        if not _from_my_leader(self, peer, message):  # type: ignore[arg-type]
            return
        data, first, last = chunk
        incoming = self.snapshot_path + ".incoming"
        if first:
            self._close_incoming()
            self._incoming_snapshot = open(incoming, "wb")
        if self._incoming_snapshot is None:
            return  # the start of this transfer was missed; the leader sends it again
        self._incoming_snapshot.write(data)
        if last:
            self._close_incoming()
            self._settle_snapshot(peer, incoming)

    def _close_incoming(self) -> None:
        if self._incoming_snapshot is not None:
            self._incoming_snapshot.close()
            self._incoming_snapshot = None

    def _settle_snapshot(self, peer: Any, incoming: str) -> None:
        """A snapshot that cannot be read (damaged in transit, or of a format this
        version does not read, sent by a leader of an older version) is refused before
        it replaces anything: the node keeps its own snapshot and log, and the leader
        sends it again."""
        node: SyncObj = self  # type: ignore[assignment]
        try:
            ends = self._snapshot_last_entry(incoming)
        except ValueError as exc:
            os.unlink(incoming)
            _unreadable_snapshots.note("unreadable", f"a snapshot from {getattr(peer, 'address', peer)} was refused "
                                       f"and this node keeps its own snapshot and log: {exc}")
            return
        commit = node.raftCommitIndex
        if ends[0] <= commit or _entry_term(node, ends[0]) == ends[1]:
            os.unlink(incoming)
            matched = max(commit, ends[0])  # committed entries, and a prefix the last entry vouches for
            log.info("ignored a snapshot ending at index %d (term %d): this node holds that entry (commit index "
                     "%d, log up to %d) and keeps its log", ends[0], ends[1], commit, current_log_index(node))
            node._SyncObj__sendNextNodeIdx(peer, nextNodeIdx=matched + 1, success=True)
            return
        if _entry_term(node, ends[0]) is not None:
            # The log holds another entry at the snapshot's last index: replaced from there.
            on_conflict = raft_log(node).on_conflict
            if on_conflict is not None:
                on_conflict(ends[0])
        os.replace(incoming, self.snapshot_path)
        node._SyncObj__loadDumpFile(clearJournal=True)
        installed = current_log_index(node)  # the snapshot's last entry; everything in it is committed
        if installed != ends[0]:
            log.error("a snapshot received from %s was not installed; the leader sends it again",
                      getattr(peer, "address", peer))
            return
        if installed > node.raftCommitIndex:
            node._SyncObj__raftCommitIndex = installed
            raft_log(node).setRaftCommitIndex(installed)
        node._SyncObj__sendNextNodeIdx(peer, success=True)


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
    commit_before = node.raftCommitIndex
    handle(peer, message)
    commit = node.raftCommitIndex
    if commit <= commit_before:
        return
    allowed = max(commit_before, _last_entry_sent(message))
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


def _last_entry_sent(message: dict) -> int:
    """The index of the last entry `message` made this node's log agree on with the
    leader's: the last entry it carried, or nothing (0). A snapshot's chunks reach
    pysyncobj without the snapshot (SnapshotReceiver installs it and sets the commit
    index)."""
    if "prevLogIdx" in message:
        if message["prevLogIdx"] is None:
            return 0
        # One entry too large for a message comes in pieces; only the last one carries it.
        carried = 1 if message.get("transmission") == "finish" else len(message.get("entries", ()))
        return message["prevLogIdx"] + carried
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


# The entry every node's log starts with: pysyncobj's no-op at index 1, written in
# term 0 by a node created empty.
GENESIS = (bytes([pysyncobj_syncobj._COMMAND_TYPE.NO_OP]), 1, 0)


def create_journal(journal_file: str | None = None) -> pysyncobj_journal.Journal:
    """pysyncobj's journal factory, replaced: the conflict-aware durable journal on disk.

    An empty journal starts with GENESIS. pysyncobj would write its no-op in the term
    the node holds, so a node whose log was lost (its term file kept) would start
    with an entry no leader wrote, in a term where the leader wrote another."""
    if journal_file is None:
        return pysyncobj_journal.MemoryJournal()
    if journal_file not in _JOURNAL_KEYS:
        raise RuntimeError(f"no journal key for {journal_file}: call use_journal_key first")
    journal = ConflictAwareJournal(journal_file, key=_JOURNAL_KEYS[journal_file])
    if len(journal) == 0:
        journal.add(*GENESIS)
    return journal


def make_cipher(password: str | bytes) -> raft_link.RaftCipher:
    """pysyncobj's encryptor factory (getEncryptor), replaced: the same Fernet key, and
    the secret raft_link's frames are sealed with."""
    return raft_link.RaftCipher(password, pysyncobj_encryptor.SALT)


def install() -> None:
    """Check the version, then make pysyncobj create ConflictAwareJournal, accept
    GuardedConnections, open LinkConnections with a RaftCipher (raft_link's framing
    where the peer offers it) and drop its false truncation alarm. Must run before a SyncObj
    is constructed; idempotent."""
    check_version()
    pysyncobj_syncobj.createJournal = create_journal
    pysyncobj_tcp_server.TcpConnection = GuardedConnection
    pysyncobj_transport.TcpConnection = LinkConnection
    pysyncobj_syncobj.getEncryptor = make_cipher
    logging.getLogger(_PYSYNCOBJ_LOGGER).addFilter(_DROP_FALSE_ALARM)  # a no-op when already added
