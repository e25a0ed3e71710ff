"""Raft links: AES-GCM frames between nodes that offer them, pysyncobj's Fernet frames with any other.

The frame is tested alone (round trip, tampering, replay, another password), then on
pysyncobj's connection objects wired back to back (the key exchange, a node of the
previous version, a downgrade inside a connection), then with two live nodes in this
process, one of them speaking only pysyncobj's framing, replicating a counter.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj import syncobj as pysyncobj_syncobj
from pysyncobj.encryptor import getEncryptor as stock_cipher
from pysyncobj.tcp_connection import TcpConnection

from prometheus_client import REGISTRY

from coordinator.harness.local_cluster import free_ports
from coordinator.observability import metrics
from coordinator.replication import pysyncobj_adapter, raft_link
from coordinator.replication.pysyncobj_adapter import LinkConnection

PASSWORD = "a-raft-password-of-enough-length"
APPEND = {"type": "append_entries", "term": 7, "commit_index": 12344, "entries": [(os.urandom(300), 12345, 7)],
          "prevLogIdx": 12344, "prevLogTerm": 7}


@pytest.fixture(scope="module")
def cipher() -> raft_link.RaftCipher:
    return pysyncobj_adapter.make_cipher(PASSWORD)  # PBKDF2 takes a while: once per module


def pair(secret: bytes) -> tuple[raft_link.Link, raft_link.Link]:
    a, b = os.urandom(32) + raft_link.LINK_OFFER, os.urandom(32) + raft_link.LINK_OFFER
    return raft_link.Link(secret, a, b), raft_link.Link(secret, b, a)


# ---- the frame --------------------------------------------------------------------

def test_a_frame_round_trips_small_uncompressed_and_large_compressed(cipher: raft_link.RaftCipher) -> None:
    sender, receiver = pair(cipher.link_secret)
    large = {**APPEND, "entries": [(b"x" * 50_000, 1, 1)]}
    small_frame, large_frame = sender.seal(APPEND), sender.seal(large)
    assert small_frame[:2] == bytes((raft_link.LINK_V1, 0)), "a write's message travels uncompressed"
    assert large_frame[1] == 1 and len(large_frame) < 5_000, f"compressed: {len(large_frame)} bytes"
    assert receiver.open(small_frame) == APPEND and receiver.open(large_frame) == large


def test_the_frame_shares_fernet_s_key_stretching_so_an_old_node_reads_the_key_exchange(
        cipher: raft_link.RaftCipher) -> None:
    token = stock_cipher(PASSWORD).encrypt(b"key")
    assert cipher.decrypt(token) == b"key"


@pytest.mark.parametrize("position", [0, 1, 2, 20, -1])
def test_a_tampered_frame_is_refused(cipher: raft_link.RaftCipher, position: int) -> None:
    sender, receiver = pair(cipher.link_secret)
    frame = bytearray(sender.seal(APPEND))
    frame[position] ^= 0x01
    with pytest.raises(raft_link.LinkRefused):
        receiver.open(bytes(frame))


def test_a_replayed_or_reordered_frame_is_refused(cipher: raft_link.RaftCipher) -> None:
    sender, receiver = pair(cipher.link_secret)
    first, second = sender.seal(APPEND), sender.seal({"type": "next_node_idx"})
    with pytest.raises(raft_link.LinkRefused):
        receiver.open(second)  # ahead of its turn
    assert receiver.open(first) == APPEND
    with pytest.raises(raft_link.LinkRefused):
        receiver.open(first)  # again
    assert receiver.open(second) == {"type": "next_node_idx"}


def test_a_frame_opens_only_on_its_own_connection_and_direction(cipher: raft_link.RaftCipher) -> None:
    sender, receiver = pair(cipher.link_secret)
    _, other_receiver = pair(cipher.link_secret)
    frame = sender.seal(APPEND)
    with pytest.raises(raft_link.LinkRefused):
        other_receiver.open(frame)  # recorded on one connection, replayed on another
    with pytest.raises(raft_link.LinkRefused):
        sender.open(frame)  # reflected back to its sender
    assert receiver.open(frame) == APPEND


def test_a_frame_sealed_without_the_password_is_refused(cipher: raft_link.RaftCipher) -> None:
    own, peer = os.urandom(32) + raft_link.LINK_OFFER, os.urandom(32) + raft_link.LINK_OFFER
    stranger = raft_link.Link(pysyncobj_adapter.make_cipher("another-password-long-enough").link_secret, peer, own)
    receiver = raft_link.Link(cipher.link_secret, own, peer)
    with pytest.raises(raft_link.LinkRefused):
        receiver.open(stranger.seal(APPEND))


# ---- pysyncobj's connections, back to back ----------------------------------------------

class Wire:
    """Two connection objects with no socket: what one sends, the other parses."""

    def __init__(self, client_cipher: Any, server_cipher: Any) -> None:
        self.client, self.server = self.end(client_cipher), self.end(server_cipher)

    @staticmethod
    def end(cipher: Any) -> LinkConnection:
        conn = LinkConnection(poller=None)
        conn.encryptor = cipher
        conn._TcpConnection__trySendBuffer = lambda: None
        return conn

    @staticmethod
    def deliver(sender: LinkConnection, receiver: LinkConnection) -> list[Any]:
        """Move what `sender` buffered to `receiver` and parse every whole frame."""
        receiver._TcpConnection__readBuffer += sender._TcpConnection__writeBuffer
        sender._TcpConnection__writeBuffer = b""
        messages = []
        while (message := receiver._TcpConnection__processParseMessage()) is not None:
            messages.append(message)
        return messages

    def exchange_keys(self) -> None:
        """pysyncobj's key exchange (transport._onOutgoingConnected / _onIncomingMessageReceived)."""
        self.client.recvRandKey = os.urandom(32)
        self.client.send(self.client.recvRandKey)
        (self.server.sendRandKey,) = self.deliver(self.client, self.server)
        self.server.recvRandKey = os.urandom(32)
        self.server.send(self.server.recvRandKey)
        (self.client.sendRandKey,) = self.deliver(self.server, self.client)

    def frames(self, sender: LinkConnection, message: Any) -> bytes:
        sender.send(message)
        return sender._TcpConnection__writeBuffer[4:]


def test_two_nodes_of_this_version_switch_to_link_frames_after_the_key_exchange(
        cipher: raft_link.RaftCipher) -> None:
    wire = Wire(cipher, cipher)
    wire.exchange_keys()
    assert raft_link.is_link_frame(wire.frames(wire.client, "node-a:1"))
    assert wire.deliver(wire.client, wire.server) == ["node-a:1"]
    assert raft_link.is_link_frame(wire.frames(wire.server, APPEND))
    assert wire.deliver(wire.server, wire.client) == [APPEND]


@pytest.mark.parametrize("old_end", ["client", "server"])
def test_a_node_of_the_previous_version_is_spoken_to_in_fernet(cipher: raft_link.RaftCipher, old_end: str) -> None:
    old = stock_cipher(PASSWORD)  # a node of the previous version: pysyncobj's connection behaviour
    wire = Wire(old, cipher) if old_end == "client" else Wire(cipher, old)
    wire.exchange_keys()
    for sender, receiver in ((wire.client, wire.server), (wire.server, wire.client)):
        frame = wire.frames(sender, APPEND)
        assert frame.startswith(b"gAAAAA"), f"{old_end} is old, yet {frame[:8]!r} was sent"
        assert wire.deliver(sender, receiver) == [APPEND]


def test_a_node_without_the_password_is_refused_at_its_first_message(cipher: raft_link.RaftCipher) -> None:
    wire = Wire(pysyncobj_adapter.make_cipher("another-password-long-enough"), cipher)
    wire.client.recvRandKey = os.urandom(32)
    wire.client.send(wire.client.recvRandKey)
    assert wire.deliver(wire.client, wire.server) == []
    assert wire.server.sendRandKey is None and wire.server._TcpConnection__readBuffer == b"", \
        "the server took the stranger's key or kept its bytes"


def frames_refused(reason: str) -> float:
    return REGISTRY.get_sample_value("raftpoint_raft_frames_refused_total", {"reason": reason}) or 0.0


def test_a_tampered_link_frame_or_a_fernet_frame_after_it_closes_the_connection_and_says_so(
        cipher: raft_link.RaftCipher) -> None:
    wire = Wire(cipher, cipher)
    wire.exchange_keys()
    wire.server.send(APPEND)
    assert wire.deliver(wire.server, wire.client) == [APPEND]
    # A Fernet frame sealed for this connection (as the peer sent them before the link),
    # replayed after it: pysyncobj alone would take it.
    before = frames_refused("fernet_after_link")
    TcpConnection.send(wire.server, {"type": "request_vote", "term": 99})
    assert wire.deliver(wire.server, wire.client) == []
    assert wire.client.sendRandKey is None, "a Fernet frame after a link frame did not close the connection"
    assert frames_refused("fernet_after_link") == before + 1

    wire = Wire(cipher, cipher)
    wire.exchange_keys()
    frame = bytearray(wire.frames(wire.server, APPEND))
    frame[-1] ^= 1
    wire.client._TcpConnection__readBuffer = len(frame).to_bytes(4, "little") + bytes(frame)
    before = frames_refused("link_frame")
    assert wire.client._TcpConnection__processParseMessage() is None
    assert wire.client.sendRandKey is None, "a tampered link frame did not close the connection"
    assert frames_refused("link_frame") == before + 1, "the close was not counted"


def test_a_link_frame_where_no_link_was_offered_closes_the_connection_and_is_counted(
        cipher: raft_link.RaftCipher) -> None:
    wire = Wire(cipher, cipher)
    wire.exchange_keys()
    frame = wire.frames(wire.server, APPEND)
    old = Wire.end(stock_cipher(PASSWORD))  # it offered no link: a link frame is not for it
    old.recvRandKey, old.sendRandKey = os.urandom(32), os.urandom(32)
    old._TcpConnection__readBuffer = len(frame).to_bytes(4, "little") + frame
    before = frames_refused("not_offered")
    assert old._TcpConnection__processParseMessage() is None
    assert old.sendRandKey is None and frames_refused("not_offered") == before + 1


# ---- two live nodes in this process -----------------------------------------------

class Counter(SyncObj):
    def __init__(self, me: str, peers: list[str]) -> None:
        conf = SyncObjConf(password=PASSWORD, autoTick=True, autoTickPeriod=0.01, raftMinTimeout=0.3,
                           raftMaxTimeout=0.6, appendEntriesPeriod=0.05, connectionRetryTime=0.2)
        super().__init__(me, peers, conf)
        self.value = 0

    @replicated
    def add(self, n: int) -> int:
        self.value += n
        return self.value


def wait_until(what: Callable[[], bool], seconds: float, saw: Callable[[], object]) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, f"not within {seconds} s; saw {saw()}"
        time.sleep(0.02)


def link_frames_sent() -> float:
    return sum(sample.value for family in metrics.RAFT_MESSAGES_SENT.collect() for sample in family.samples
               if sample.name.endswith("_total") and sample.labels.get("framing") == "link_v1")


@pytest.mark.parametrize("old_node", [None, 0, 1])
def test_a_pair_replicates_whichever_of_them_is_of_the_previous_version(
        monkeypatch: pytest.MonkeyPatch, old_node: int | None) -> None:
    pysyncobj_adapter.install()
    addresses = [f"127.0.0.1:{port}" for port in free_ports(2)]
    nodes = []
    before = link_frames_sent()
    try:
        for i, me in enumerate(addresses):
            with monkeypatch.context() as patch:
                if i == old_node:  # pysyncobj's own encryptor: the connections behave as the previous version's
                    patch.setattr(pysyncobj_syncobj, "getEncryptor", stock_cipher)
                nodes.append(Counter(me, [a for a in addresses if a != me]))
        wait_until(lambda: any(n._isLeader() for n in nodes), 20, lambda: [n.getStatus()["state"] for n in nodes])
        for n in range(1, 6):
            assert nodes[n % 2].add(n, sync=True, timeout=10) is not None
        wait_until(lambda: all(n.value == 15 for n in nodes), 10, lambda: [n.value for n in nodes])
        sent = link_frames_sent() - before
        assert (sent > 0) if old_node is None else (sent == 0), f"{sent} link frames sent"
    finally:
        for n in nodes:
            n.destroy()
