"""Where a checkpoint's chunks go (agent_client.blobs.packing): pure bookkeeping."""
from __future__ import annotations

from agent_client.blobs.manifest import INLINE, INLINE_MAX, ChunkRef
from agent_client.blobs.packing import Chunk, PackPlan, split_small


def chunk(name: str, size: int, stored_at: ChunkRef | None = None) -> Chunk:
    return name * 64, memoryview(name.encode() * size), stored_at


def test_new_chunks_are_appended_once_and_repeats_point_at_the_first_copy() -> None:
    elsewhere = ChunkRef("c" * 64, 5, "f" * 32, 100)
    plan = PackPlan(overhead=28, seal=lambda digest, piece: b"sealed:" + bytes(piece), pack="e" * 32)
    stored = list(plan.stream([chunk("a", 10), chunk("c", 5, elsewhere), chunk("b", 20), chunk("a", 10)]))
    assert stored == [b"sealed:" + b"a" * 10, b"sealed:" + b"b" * 20]
    a, b = ChunkRef("a" * 64, 10, "e" * 32, 0), ChunkRef("b" * 64, 20, "e" * 32, 10 + 28)
    assert plan.refs == [a, elsewhere, b, a]
    assert plan.written == 10 + 20 + 2 * 28 and set(plan.placed) == {"a" * 64, "b" * 64}


def test_split_small_stops_reading_once_the_new_bytes_pass_the_inline_limit() -> None:
    known = ChunkRef("k" * 64, 50_000, "f" * 32, 0)
    chunks = iter([chunk("k", 50_000, known), chunk("a", INLINE_MAX // 2), chunk("a", INLINE_MAX // 2),
                   chunk("b", INLINE_MAX // 2), chunk("c", 1), chunk("d", 1)])
    head, small = split_small(chunks, overhead=0)
    assert not small and [c[0][0] for c in head] == ["k", "a", "a", "b", "c"]  # a and b reach the limit, c passes it
    assert [c[0][0] for c in chunks] == ["d"]  # left for the pack writer
    head, small = split_small(iter([chunk("k", 50_000, known), chunk("a", INLINE_MAX)]), overhead=0)
    assert small and len(head) == 2
    plan = PackPlan(overhead=0, seal=lambda digest, piece: piece)
    assert [bytes(p) for p in plan.stream(head)] == [b"a" * INLINE_MAX] and plan.refs[1].pack == INLINE
