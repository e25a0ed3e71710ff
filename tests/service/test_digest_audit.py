"""Which node diverged: the one whose digest at an index differs from a majority's."""
from __future__ import annotations

from coordinator.service.digest_audit import KEEP, Samples, diverged, diverged_peers, record, verdict
from coordinator.storage.digest import CONTENT_LAYOUT


def samples(**nodes: dict[int, str]) -> Samples:
    return {node: {index: (CONTENT_LAYOUT, digest) for index, digest in kept.items()} for node, kept in nodes.items()}


def test_the_node_that_differs_from_a_majority_at_one_index_diverged() -> None:
    s = samples(a={10: "bad", 12: "x"}, b={10: "good", 11: "y"}, c={10: "good"})
    assert diverged("a", s, 3) == (10, "good")
    assert diverged("b", s, 3) is None and diverged("c", s, 3) is None


def test_no_verdict_without_a_majority_at_the_same_index() -> None:
    assert diverged("a", samples(a={10: "bad"}, b={10: "good"}, c={11: "good"}), 3) is None  # one peer only
    assert diverged("a", samples(a={10: "x"}, b={10: "y"}, c={10: "z"}), 3) is None  # nobody agrees
    assert diverged("a", samples(a={10: "x"}, b={10: "y"}, c={10: "y"}), 5) is None  # 2 of 5 is no majority
    assert diverged("a", samples(a={10: "x"}, b={10: "y"}, c={10: "y"}, d={10: "y"}), 5) == (10, "y")


def test_digests_of_another_record_layout_are_not_compared() -> None:
    """A rolling upgrade across a layout change: the same history digests differently."""
    s = samples(a={10: "new"})
    for old in ("b", "c"):
        record(s, old, 10, "old", layout=0)
    assert diverged("a", s, 3) is None and diverged("b", s, 3) is None and diverged_peers("b", s, 3) == []
    record(s, "c", 10, "new")  # c upgraded: a and c agree, b is judged by old-layout nodes only
    assert diverged("a", s, 3) is None and diverged("b", s, 3) is None
    record(s, "c", 10, "other")  # a majority of one layout still judges its own
    assert diverged("a", s, 3) is None  # one same-layout peer is no majority of 3
    record(s, "b", 10, "other")  # b upgraded too: two of three of one layout judge a
    assert diverged("a", s, 3) == (10, "other")


def test_only_the_latest_samples_are_kept() -> None:
    s: Samples = {}
    for index in range(KEEP + 10):
        record(s, "a", index, "d")
    assert sorted(s["a"]) == list(range(10, KEEP + 10))


def test_a_damaged_store_is_rebuilt_and_a_diverged_history_is_kept() -> None:
    damaged = verdict(10, "a" * 64, "b" * 64, replaced_from=None)
    assert damaged.rebuild and "store diverged" in damaged.message and "aaaaaaaaaaaaaaaa" in damaged.message
    diverged_history = verdict(10, "a" * 64, "b" * 64, replaced_from=7)
    assert not diverged_history.rebuild
    assert "history diverged" in diverged_history.message and "index 7" in diverged_history.message
    assert "do NOT rebuild" in diverged_history.message


def test_the_survivors_name_the_peer_that_diverged() -> None:
    """The diverged node stops itself; its peers keep the finding (the alert's metric)."""
    s = samples(a={10: "bad"}, b={10: "good"}, c={10: "good"})
    assert diverged_peers("b", s, 3) == ["a"] and diverged_peers("c", s, 3) == ["a"]
    assert diverged_peers("a", s, 3) == []  # a finds itself diverged (diverged()), not its peers
    assert diverged_peers("b", samples(a={10: "x"}, b={10: "x"}, c={11: "y"}), 3) == []
