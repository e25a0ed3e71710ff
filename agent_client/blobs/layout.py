"""Where things live inside a blob store: the key names every reader, writer and GC agree on.

A checkpoint's new chunks are stored back to back in one pack, named by a random id
inside a namespace per encryption key (so sealed and clear chunks never mix); a
manifest is named by its own SHA-256. Older stores hold one object per chunk, named
by the SHA-256 of its plaintext and fanned out by digest prefix; they are still read
(and collected) but no longer written.
"""
from __future__ import annotations

MANIFESTS = "manifests"
CHUNKS = "chunks"
PACKS = "packs"
_MANIFEST_SUFFIX = ".json"
_PACK_SUFFIX = ".pack"


def _namespace(key_id: str | None) -> str:
    return "plain" if key_id is None else f"aead-{key_id}"


def chunk_key(digest: str, key_id: str | None) -> str:
    return f"{CHUNKS}/{_namespace(key_id)}/{digest[:2]}/{digest}"


def pack_key(pack: str, key_id: str | None) -> str:
    return f"{PACKS}/{_namespace(key_id)}/{pack}{_PACK_SUFFIX}"


def manifest_key(digest: str) -> str:
    return f"{MANIFESTS}/{digest}{_MANIFEST_SUFFIX}"


def manifest_digest(key: str) -> str | None:
    """The digest a manifest key names, or None if `key` is not a manifest key."""
    head, _, name = key.partition("/")
    if head != MANIFESTS or "/" in name or not name.endswith(_MANIFEST_SUFFIX) or len(name) == len(_MANIFEST_SUFFIX):
        return None
    return name[: -len(_MANIFEST_SUFFIX)]
