"""Decide whether a checkpoint may be restored, and say exactly why not.

Restoring the wrong state silently is worse than a cold start: an agent resumed with a
state from another schema or configuration behaves unpredictably and poisons the
others it talks to. Each rejection carries a named reason an operator (and the
coordinator, which may then pick an older checkpoint) can act on.
"""
from __future__ import annotations

import enum
import hashlib
from typing import Protocol

from agent_client.blobs.errors import BlobCorrupted, BlobMissing
from agent_client.blobs.store import BlobStore
from coordinator.core.data_uris import shown_uri


class RejectReason(enum.Enum):
    DIGEST_MISMATCH = "digest mismatch"
    SCHEMA_MISMATCH = "schema version mismatch"
    CONFIG_MISMATCH = "config hash mismatch"
    MISSING_BLOB = "missing blob"


class CheckpointRejected(Exception):
    def __init__(self, reason: RejectReason, detail: str) -> None:
        super().__init__(f"checkpoint rejected: {reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


class CheckpointMetaLike(Protocol):
    """The fields of the coordinator's CheckpointMeta that restore depends on (duck-typed,
    so this module needs no gRPC/protobuf import)."""

    blob_uri: str
    sha256: str
    schema_version: int
    config_hash: str


def _check_meta(meta: CheckpointMetaLike, expected_schema: int, expected_config_hash: str) -> None:
    if meta.schema_version != expected_schema:
        raise CheckpointRejected(RejectReason.SCHEMA_MISMATCH,
                                 f"checkpoint has schema {meta.schema_version}, this agent expects {expected_schema}")
    if meta.config_hash != expected_config_hash:
        raise CheckpointRejected(RejectReason.CONFIG_MISMATCH,
                                 f"checkpoint config {meta.config_hash[:12]}..., this agent runs "
                                 f"{expected_config_hash[:12]}...")


def verify(meta: CheckpointMetaLike, data: bytes | None, *, expected_schema: int, expected_config_hash: str) -> None:
    """Raise CheckpointRejected unless `data` is the state `meta` describes and this
    agent build can use it. Metadata checks come first: they need no blob."""
    _check_meta(meta, expected_schema, expected_config_hash)
    if data is None:
        raise CheckpointRejected(RejectReason.MISSING_BLOB, f"no data for {shown_uri(meta.blob_uri)}")
    actual = hashlib.sha256(data).hexdigest()
    if actual != meta.sha256:
        raise CheckpointRejected(RejectReason.DIGEST_MISMATCH,
                                 f"{shown_uri(meta.blob_uri)} has SHA-256 {actual}, the coordinator recorded "
                                 f"{meta.sha256}")


def load_verified(store: BlobStore, meta: CheckpointMetaLike, *, expected_schema: int,
                  expected_config_hash: str) -> bytes:
    """Fetch and verify in one step: a missing manifest/chunk is MISSING_BLOB, damaged or
    undecryptable bytes are DIGEST_MISMATCH; the blob is not read if metadata rejects."""
    _check_meta(meta, expected_schema, expected_config_hash)
    try:
        data = store.get(meta.blob_uri)
    except BlobMissing as exc:
        raise CheckpointRejected(RejectReason.MISSING_BLOB, str(exc)) from exc
    except BlobCorrupted as exc:
        raise CheckpointRejected(RejectReason.DIGEST_MISMATCH, str(exc)) from exc
    verify(meta, data, expected_schema=expected_schema, expected_config_hash=expected_config_hash)
    return data
