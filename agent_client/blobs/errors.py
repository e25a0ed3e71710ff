"""Blob store errors.

Three kinds, because restore reacts differently: a *missing* blob (manifest or chunk
gone, e.g. collected too early or never finished) means "try an older checkpoint";
a *corrupted* one (bytes present but wrong, or undecryptable) means the storage or
the key is bad and must be investigated; an *unavailable* store says nothing about the
blob and must surface as it is. Messages always name the URI and chunk.
"""
from __future__ import annotations


class BlobError(Exception):
    """Any failure to produce the exact state a checkpoint recorded."""


class BlobMissing(BlobError):
    """The manifest or a chunk is absent or unreadable: the state cannot be located."""


class BlobCorrupted(BlobError):
    """Bytes are present but do not match their digest, or fail AEAD decryption."""


class BlobStoreUnavailable(BlobError):
    """The store could not be reached or refused the request (down, throttled past
    every retry, denied). Neither missing nor corrupted: restore must not fall back to
    an older checkpoint because of it, and a checkpoint whose write hit it is not
    committed. Messages name the store, never its credentials."""
