"""Checkpoint blobs: chunked, content-addressed, verified, optionally encrypted.

Split into small modules (chunking, manifest, aead, backend, store) so an object-store
backend or a different chunker can be swapped without touching verification.
"""
from agent_client.blobs.aead import aead_key_from_env, key_id
from agent_client.blobs.backend import ChunkBackend, DirectoryBackend
from agent_client.blobs.errors import BlobCorrupted, BlobError, BlobMissing
from agent_client.blobs.manifest import ChunkRef, Manifest
from agent_client.blobs.store import BlobStore, GcResult, LocalBlobStore, PutResult

__all__ = ["BlobCorrupted", "BlobError", "BlobMissing", "BlobStore", "ChunkBackend", "ChunkRef", "DirectoryBackend",
           "GcResult", "LocalBlobStore", "Manifest", "PutResult", "aead_key_from_env", "key_id"]
