"""Where a checkpoint's chunks go: reused where already stored, or appended to its pack.

Pure bookkeeping, no I/O: the store feeds chunks in state order (digest already
computed) and gets back the bytes to append to the pack as it goes, so the pack is
written while later chunks are still being hashed instead of after all of them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from agent_client.blobs.chunking import Buffer
from agent_client.blobs.manifest import INLINE, INLINE_MAX, ChunkRef

# One chunk of the state, in order: (digest, plaintext, where it is already stored or None).
Chunk = tuple[str, memoryview, ChunkRef | None]


@dataclass
class PackPlan:
    """The chunk list of one checkpoint, built while its new chunks stream out."""
    overhead: int  # stored bytes per chunk beyond its plaintext (the AEAD nonce and tag)
    seal: Callable[[str, memoryview], Buffer]  # plaintext -> stored bytes
    pack: str = INLINE
    refs: list[ChunkRef] = field(default_factory=list)
    placed: dict[str, ChunkRef] = field(default_factory=dict)  # new chunks by digest
    written: int = 0  # stored bytes of the new chunks

    def place(self, chunk: Chunk) -> Buffer | None:
        """Record the chunk; its stored bytes if it is new to this checkpoint."""
        digest, piece, stored_at = chunk
        ref = stored_at or self.placed.get(digest)
        if ref is not None:
            self.refs.append(ref)
            return None
        ref = self.placed[digest] = ChunkRef(digest, len(piece), self.pack, self.written)
        self.refs.append(ref)
        self.written += len(piece) + self.overhead
        return self.seal(digest, piece)

    def stream(self, chunks: Iterable[Chunk]) -> Iterator[Buffer]:
        for chunk in chunks:
            stored = self.place(chunk)
            if stored is not None:
                yield stored


def split_small(chunks: Iterator[Chunk], overhead: int) -> tuple[list[Chunk], bool]:
    """Read chunks until their new ones pass INLINE_MAX stored bytes (the rest stays in
    `chunks`): (the chunks read, whether that was all and small enough to go inline)."""
    head: list[Chunk] = []
    new: set[str] = set()
    size = 0
    for chunk in chunks:
        head.append(chunk)
        digest, piece, stored_at = chunk
        if stored_at is None and digest not in new:
            new.add(digest)
            size += len(piece) + overhead
            if size > INLINE_MAX:
                return head, False
    return head, True
