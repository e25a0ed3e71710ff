"""Public entry point for checkpoint blobs (kept as the module agents already import).

The implementation lives in agent_client.blobs; see its store module for the design.
"""
from agent_client.blobs import (BlobCorrupted, BlobError, BlobMissing, BlobStore, ChunkBackend, ChunkRef,
                                DirectoryBackend, GcResult, LocalBlobStore, Manifest, PutResult, aead_key_from_env,
                                key_id)

__all__ = ["BlobCorrupted", "BlobError", "BlobMissing", "BlobStore", "ChunkBackend", "ChunkRef", "DirectoryBackend",
           "GcResult", "LocalBlobStore", "Manifest", "PutResult", "aead_key_from_env", "key_id"]
