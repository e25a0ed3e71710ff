"""Public entry point for checkpoint blobs (kept as the module agents already import).

The implementation lives in agent_client.blobs; see its store module for the design.
"""
from agent_client.blobs import (DEFAULT_GRACE_S, BlobCorrupted, BlobError, BlobMissing, BlobStore,
                                BlobStoreUnavailable, ChunkBackend, ChunkRef, DirectoryBackend, GcResult,
                                LocalBlobStore, Manifest, PutResult, StoredObject, aead_key_from_env, backend_for,
                                key_id, open_blob_store)

__all__ = ["DEFAULT_GRACE_S", "BlobCorrupted", "BlobError", "BlobMissing", "BlobStore", "BlobStoreUnavailable",
           "ChunkBackend", "ChunkRef", "DirectoryBackend", "GcResult", "LocalBlobStore", "Manifest", "PutResult",
           "StoredObject", "aead_key_from_env", "backend_for", "key_id", "open_blob_store"]
