"""One group's checkpoint blobs under the agent workload: garbage collection while it
runs, and at the end the check that every acknowledged checkpoint still stands.

Collection may delete what it returns; the final check then needs to know what was
collected (a collected checkpoint is gone by design) and whether a collection's
outcome stayed unknown (then a missing checkpoint may have been collected too).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from agent_client.blobstore import BlobError, open_blob_store
from chaos.client import Request
from chaos.history import INFO
from chaos.tokens.ledger import Finding, Ledger
from chaos.workloads.group_calls import GroupCalls
from coordinator.api.v1 import coordinator_pb2 as pb

GC_ATTEMPTS_AT_THE_END = 3  # a collection whose outcome is unknown is sent again this often


class GroupCheckpoints:
    def __init__(self, calls: GroupCalls, ledger: Ledger, blob_dir: Path | str) -> None:
        self.calls, self.ledger = calls, ledger
        self.blobs = open_blob_store(blob_dir)
        self.collected: set[str] = set()  # blob URIs garbage collection returned
        self.gc_unknown = 0  # collections whose outcome stayed unknown at the end
        self.findings: list[Finding] = []
        self.counts: dict[str, int] = {}
        self._gc_pending: Request | None = None

    def gc(self) -> None:
        """Collect, then delete the returned blobs nothing still listed refers to (blobs
        are content-addressed: two checkpoints can share one)."""
        group = self.calls.group
        if self._gc_pending is None:
            self._gc_pending = Request("gc", "AdminService", "GarbageCollect", pb.GarbageCollectRequest(
                request_id=self.calls.rid("gc"), group=group), {"group": group},
                lambda r: {"uris": sorted(r.deletable_blob_uris), "bytes": r.bytes})
        outcome = self.calls.send(self._gc_pending)
        if outcome.type == INFO:
            return  # sent again, with the same request id, next time
        self._gc_pending = None
        uris = set(outcome.response.deletable_blob_uris) if outcome.ok else set()
        if not uris:
            return
        self.collected |= uris
        listing = self.calls.list_checkpoints()
        if listing is None:
            return  # not known what is still referenced: delete nothing
        for uri in sorted(uris - {m.blob_uri for m in listing}):
            try:
                self.blobs.delete(uri)
            except BlobError:
                pass  # deleted already

    def finish_gc(self) -> None:
        """Settle a collection whose outcome is still unknown, or count it as unknown."""
        for _ in range(GC_ATTEMPTS_AT_THE_END):
            if self._gc_pending is None:
                break
            self.gc()
        if self._gc_pending is not None:
            self.gc_unknown += 1

    def lose_one(self) -> None:
        """A planted fault: the last standing checkpoint's blob is deleted."""
        standing, _ = self.ledger.standing(self.collected)
        if standing:
            self.blobs.delete(standing[-1].uri)

    def check(self) -> str | None:
        """Every acknowledged checkpoint not rolled below nor collected is still listed,
        with its digest, and its blob still reads back to that digest. Returns what kept
        the check from running in full, if anything."""
        group = self.calls.group
        problem = None
        standing, counts = self.ledger.standing(self.collected)
        listing = self.calls.list_checkpoints()
        if listing is None:
            problem = f"{group}: no final ListCheckpoints answered"
            listing = []
        listed = {(m.agent_id, m.index): m for m in listing}
        counts.update(listed_and_readable=0, gc_outcome_unknown=self.gc_unknown)
        for cp in standing:
            where = f"{group}/{cp.agent} checkpoint {cp.index}"
            meta = listed.get((cp.agent, cp.index))
            if meta is None or (meta.blob_uri, meta.sha256) != (cp.uri, cp.sha256):
                if self.gc_unknown:
                    counts["possibly_collected"] = counts.get("possibly_collected", 0) + 1
                    continue
                self.findings.append(Finding("checkpoints", f"{where} was acknowledged with "
                                             f"{cp.sha256[:12]} and is " + ("not listed" if meta is None else
                                             f"listed with {meta.sha256[:12]}")))
                continue
            try:
                data = self.blobs.get(cp.uri)
            except BlobError as exc:
                self.findings.append(Finding("checkpoints", f"{where}: its blob cannot be read: {exc}"))
                continue
            if hashlib.sha256(data).hexdigest() != cp.sha256:
                self.findings.append(Finding("checkpoints", f"{where}: its blob does not match its digest"))
                continue
            counts["listed_and_readable"] += 1
        self.counts = counts
        return problem


__all__ = ["GroupCheckpoints"]
