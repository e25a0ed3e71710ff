"""Stop a node whose store disagrees with the majority's at the same applied index.

Replicas that applied the same log prefix must hold the same content, and every
node reports its content digest with the applied index it was read at (one
store transaction: ClusterStatus' digest_index). Record checksums catch a value
changed at rest; this catches any other way a replica's state went wrong (a bug,
a store restored by hand) before it serves, or leads with, a state the cluster
never had -- the new leader's state would become everyone's.

Every `period`, each node samples its own (index, digest) and asks its peers for
theirs, and keeps the last KEEP of each. Indexes rarely line up while writes
flow, so samples accumulate until some do (an idle cluster lines up at once).
A node whose digest at an index differs from one that a majority of the whole
cluster holds at that index is the one that diverged (digests are compared only
between nodes that store the same record layout, `CONTENT_LAYOUT`: during a
rolling upgrade across a layout change the same history digests differently,
and the audit judges nobody until a majority stores one layout): it logs why, sets the
raftpoint_digest_diverged metric and stops (EXIT_DAMAGED), so it neither serves
nor leads. Its verdict says which of two things happened:
- its state went wrong on its own (a value changed at rest, a bug): it is rebuilt
  from its peers like any damaged node;
- its history diverged: a leader replaced log entries this node had already
  applied, so two histories were committed and this node may hold the only copy of
  acknowledged writes. Rebuilding it would destroy them: it says so and keeps
  its data dir as it is for the operator.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Callable

import grpc

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.channels import ClientTLS
from coordinator.observability import metrics
from coordinator.replication.replica import Replica
from coordinator.service import ticks
from coordinator.storage.digest import CONTENT_LAYOUT

log = logging.getLogger(__name__)
KEEP = 64  # samples kept per node
ASK_TIMEOUT_S = 5.0
Sample = tuple[int, str]  # (the record layout it covers, content digest)
Samples = dict[str, dict[int, Sample]]  # node -> applied index -> sample


def record(samples: Samples, node: str, index: int, digest: str, layout: int = CONTENT_LAYOUT) -> None:
    kept = samples.setdefault(node, {})
    kept[index] = (layout, digest)
    while len(kept) > KEEP:
        del kept[min(kept)]


def diverged(me: str, samples: Samples, cluster_size: int) -> tuple[int, str] | None:
    """(index, the majority's digest) where this node's digest differs from one held
    by a majority of the cluster; None when no index shows that."""
    majority = cluster_size // 2 + 1
    mine = samples.get(me, {})
    for index in sorted(mine, reverse=True):
        layout, digest = mine[index]
        others = [kept[index][1] for node, kept in samples.items()
                  if node != me and index in kept and kept[index][0] == layout]
        for theirs in set(others):
            if theirs != digest and others.count(theirs) >= majority:
                return index, theirs
    return None


def diverged_peers(me: str, samples: Samples, cluster_size: int) -> list[str]:
    """The peers that `diverged` finds against the others' samples: the diverged node
    stops itself, so this is how the survivors keep the divergence visible (until its
    samples age out)."""
    return sorted(node for node in samples if node != me and diverged(node, samples, cluster_size) is not None)


@dataclass(frozen=True)
class Verdict:
    message: str
    rebuild: bool  # False: the histories diverged, and this node's data must be kept


def verdict(at: int, mine: str, theirs: str, replaced_from: int | None) -> Verdict:
    """What to tell the operator about a divergence found at applied index `at`;
    `replaced_from`: the first applied entry a leader replaced on this node, if any."""
    found = f"at applied index {at} its content digest is {mine[:16]}, a majority holds {theirs[:16]}"
    if replaced_from is None:
        return Verdict(f"this node's store diverged from the cluster's: {found}; it stops rather than serve or "
                       "lead with that state", rebuild=True)
    return Verdict(f"this node's history diverged from the cluster's: {found}, and a leader replaced entries from "
                   f"index {replaced_from} that this node had already applied. Two histories were committed; this "
                   "node may hold the only copy of acknowledged writes. It stops; do NOT rebuild it from its peers: "
                   "keep its data dir, compare its state with the cluster's (raftpoint status), and report it",
                   rebuild=False)


async def run(replica: Replica, me: str, peers_grpc: list[str], period: float, stop: asyncio.Event,
              on_diverged: Callable[[Verdict], None], tls: ClientTLS,
              credentials: tuple[tuple[str, str], ...] = (),
              replaced_from: Callable[[], int | None] = lambda: None) -> None:
    """`tls`: how this node calls its peers (its own certificate, the cluster's CA);
    `credentials`: call metadata that identifies this node to its peers (their
    ClusterStatus needs a role when authentication is on); `replaced_from`: the
    node's first applied entry a leader replaced (CoordinatorNode.replaced_applied_from)."""
    samples: Samples = {}
    other_layouts_seen: set[tuple[str, int]] = set()
    async for _ in ticks.every(period, stop):
        try:
            index, digest = await asyncio.to_thread(replica.digest_with_index)
        except Exception:  # a damaged record stops the node from the store; anything else: next round
            log.warning("digest audit: no digest of this node's store", exc_info=True)
            continue
        record(samples, me, index, digest)
        for status in await asyncio.gather(*(_ask(peer, tls, credentials) for peer in peers_grpc)):
            if status is not None:
                record(samples, status.node, status.digest_index, status.content_digest, status.content_layout)
                _note_other_layout(status, other_layouts_seen)
        metrics.DIGEST_DIVERGED_PEERS.set(len(diverged_peers(me, samples, len(peers_grpc) + 1)))
        found = diverged(me, samples, len(peers_grpc) + 1)
        if found is not None:
            at, theirs = found
            on_diverged(verdict(at, samples[me][at][1], theirs, replaced_from()))
            return


def _note_other_layout(status: pb.NodeStatus, seen_before: set[tuple[str, int]]) -> None:
    """Say once per peer and layout, per audit run, that the audit cannot compare with it
    (a rolling upgrade); `seen_before` holds what this run has said already."""
    seen = (status.node, status.content_layout)
    if status.content_layout != CONTENT_LAYOUT and seen not in seen_before:
        seen_before.add(seen)
        log.warning("digest audit: peer %s stores record layout %d (this node: %d); its digests are compared only "
                    "with nodes of its layout until every node runs one version", status.node,
                    status.content_layout, CONTENT_LAYOUT)


async def _ask(peer: str, tls: ClientTLS, credentials: tuple[tuple[str, str], ...]) -> pb.NodeStatus | None:
    try:
        async with tls.aio_channel(peer) as channel:
            reply = await pb_grpc.AdminServiceStub(channel).ClusterStatus(pb.ClusterStatusRequest(),
                                                                           timeout=ASK_TIMEOUT_S, metadata=credentials)
            return reply.node
    except grpc.RpcError:
        return None
