"""Checkpoint blobs: chunked, content-addressed, verified, optionally encrypted.

Split into small modules (chunking, digests, last_state, packing, manifest, aead,
layout, backend, s3, store, gc, location) so an object-store backend or a different
chunker can be swapped without touching verification.
"""
from agent_client.blobs.aead import aead_key_from_env, key_id
from agent_client.blobs.backend import ChunkBackend, DirectoryBackend, StoredObject
from agent_client.blobs.errors import BlobCorrupted, BlobError, BlobMissing, BlobStoreUnavailable
from agent_client.blobs.gc import DEFAULT_GRACE_S, GcResult
from agent_client.blobs.location import backend_for, open_blob_store
from agent_client.blobs.manifest import ChunkRef, Manifest
from agent_client.blobs.store import BlobStore, LocalBlobStore, PutResult

__all__ = ["DEFAULT_GRACE_S", "BlobCorrupted", "BlobError", "BlobMissing", "BlobStore", "BlobStoreUnavailable",
           "ChunkBackend", "ChunkRef", "DirectoryBackend", "GcResult", "LocalBlobStore", "Manifest", "PutResult",
           "StoredObject", "aead_key_from_env", "backend_for", "key_id", "open_blob_store"]
