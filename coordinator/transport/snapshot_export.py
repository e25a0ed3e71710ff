"""AdminService.SaveSnapshot: a consistent copy of the state, streamed for a backup.

The leader answers (a follower redirects, as for every read): after a ReadIndex round
it has applied everything committed when the call arrived, so every write
acknowledged before the call is in the copy. The copy is the node's own Raft snapshot file (replication.snapshots),
written for the call when the last one ends earlier, so it is exactly what the node
itself would restore from, its store image included. The stream is the file's
description, its bytes in chunks, and their SHA-256, for the client to check before
it keeps anything.
"""
from __future__ import annotations

import asyncio
import hashlib
from typing import AsyncIterator

import grpc

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.replication.replica import ExportedSnapshot, SnapshotSource
from coordinator.transport.heavy_reads import HeavyReads
from coordinator.transport.proposer import Proposer

CHUNK_BYTES = 1 << 20  # well under the 4 MiB message cap
# A forced snapshot is written at the node's next Raft tick; what takes long is the
# store image of a large state.
SNAPSHOT_TIMEOUT_S = 120.0


async def stream(proposer: Proposer, heavy: HeavyReads, context: grpc.aio.ServicerContext
                 ) -> AsyncIterator[pb.SaveSnapshotResponse]:
    node = proposer.node
    if not isinstance(node, SnapshotSource):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this coordinator keeps no snapshot files")
    await proposer.barrier(context)
    target = node.status().raft_applied_index

    def covering() -> ExportedSnapshot | TimeoutError:
        try:
            return node.snapshot_covering(target, SNAPSHOT_TIMEOUT_S)
        except TimeoutError as exc:
            return exc

    exported = await heavy.run(context, covering)
    if isinstance(exported, TimeoutError):
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"{exported}; retry")
    with exported.file:
        yield pb.SaveSnapshotResponse(saved=pb.SavedSnapshot(
            applied_index=exported.applied_index, last_index=exported.last_index, last_term=exported.last_term,
            size=exported.size, node=node.status().node))
        digest = hashlib.sha256()
        remaining = exported.size
        while remaining > 0:
            chunk = await asyncio.to_thread(exported.file.read, min(CHUNK_BYTES, remaining))
            if not chunk:
                await context.abort(grpc.StatusCode.INTERNAL, f"the snapshot file ended {remaining} bytes early")
            digest.update(chunk)
            remaining -= len(chunk)
            yield pb.SaveSnapshotResponse(chunk=chunk)
        yield pb.SaveSnapshotResponse(sha256=digest.hexdigest())
