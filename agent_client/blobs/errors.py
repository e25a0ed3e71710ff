"""Blob store errors.

Two kinds, because restore reacts differently: a *missing* blob (manifest or chunk
gone, e.g. collected too early or never finished) means "try an older checkpoint";
a *corrupted* one (bytes present but wrong, or undecryptable) means the storage or
the key is bad and must be investigated. Messages always name the URI and chunk.
"""
from __future__ import annotations


class BlobError(Exception):
    """Any failure to produce the exact state a checkpoint recorded."""


class BlobMissing(BlobError):
    """The manifest or a chunk is absent or unreadable: the state cannot be located."""


class BlobCorrupted(BlobError):
    """Bytes are present but do not match their digest, or fail AEAD decryption."""
