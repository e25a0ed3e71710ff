"""Which blob store holds a checkpoint, read from its URI (pure).

Checkpoints of one group may sit in several blob stores (LangGraph savers of one
group, each with its own store). A collection runs against one store and may release
only that store's checkpoints: a released checkpoint is forgotten, and its blob could
then be deleted only by hand from the store that holds it. A checkpoint held inline
(a data: URI) has no blob: every collection may release it.
"""
from __future__ import annotations

from coordinator.core.data_uris import is_inline


def in_blob_store(blob_uri: str, manifests_prefix: str) -> bool:
    """Whether `blob_uri` names a manifest directly under `manifests_prefix` (the URI of
    a store's manifest directory, ending in "/"); every URI is in the empty prefix, and
    a data URI in every one. A name with a further "/" belongs to a store nested below
    this one, not to it."""
    if not manifests_prefix or is_inline(blob_uri):
        return True
    return blob_uri.startswith(manifests_prefix) and "/" not in blob_uri[len(manifests_prefix):]
