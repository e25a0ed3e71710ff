"""Which proxy link carries which node pair, and in which direction (no I/O).

pysyncobj opens one TCP connection per pair of nodes, dialled by the node whose
address string is greater (it sends its address as its identity; the other looks
it up among its peers). So each pair has exactly one Raft link: the dialer's
connections to the listener are routed to the link's proxy (chaos.node), while
both keep naming each other by their real addresses. Bytes dialer→listener are the link's `up`
direction, listener→dialer its `down`: a one-way fault is one direction of it.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Iterable, Sequence

from chaos.linkfaults import DOWN, UP


@dataclass(frozen=True)
class RaftLink:
    dialer: int
    listener: int

    @property
    def name(self) -> str:
        return f"raft:{self.dialer}->{self.listener}"

    def direction(self, src: int, dst: int) -> str:
        """The link direction carrying what `src` sends to `dst`."""
        if (src, dst) == (self.dialer, self.listener):
            return UP
        if (src, dst) == (self.listener, self.dialer):
            return DOWN
        raise ValueError(f"link {self.name} does not join {src} and {dst}")


def raft_links(raft_addresses: Sequence[str]) -> dict[frozenset[int], RaftLink]:
    """One link per pair, keyed by the pair; the greater address string dials."""
    links = {}
    for a, b in combinations(range(len(raft_addresses)), 2):
        dialer, listener = (a, b) if raft_addresses[a] > raft_addresses[b] else (b, a)
        links[frozenset((a, b))] = RaftLink(dialer, listener)
    return links


def grpc_link_name(node: int) -> str:
    return f"grpc:{node}"


def partition_groups(groups: Iterable[Iterable[int]], size: int) -> list[frozenset[int]]:
    """Validated groups; nodes named in no group form one more group together."""
    result = [frozenset(g) for g in groups]
    seen: set[int] = set()
    for g in result:
        if not g:
            raise ValueError("a partition group must not be empty")
        bad = sorted(i for i in g if not 0 <= i < size)
        if bad:
            raise ValueError(f"no node {bad[0]} in a cluster of {size}")
        if seen & g:
            raise ValueError(f"node {min(seen & g)} is in two partition groups")
        seen |= g
    rest = frozenset(range(size)) - seen
    return result + ([rest] if rest else [])


def cut_pairs(groups: Sequence[frozenset[int]]) -> set[frozenset[int]]:
    """The node pairs that a partition into `groups` separates."""
    return {frozenset((a, b)) for g, h in combinations(groups, 2) for a in g for b in h}
