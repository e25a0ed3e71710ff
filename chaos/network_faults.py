"""Faults of the links between nodes (Raft) and from clients to nodes (gRPC).

Every link of a ChaosCluster runs through one NetProxy; these faults only change
what the proxy does to a link's bytes and connections, never the nodes. Each method
returns once the fault is in force and then records it as a nemesis op.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from chaos.history import NemesisRecord
from chaos.linkfaults import DROP, LinkFaults, Partition, delay as delayed
from chaos.netproxy import NetProxy
from chaos.topology import RaftLink, cut_pairs, grpc_link_name, partition_groups


class NetworkFaults:
    def __init__(self, proxy: NetProxy, raft_links: Mapping[frozenset[int], RaftLink], size: int,
                 record: NemesisRecord) -> None:
        self._proxy, self._raft_links, self._size, self._record = proxy, raft_links, size, record

    def _link(self, a: int, b: int) -> RaftLink:
        if a == b or not (0 <= a < self._size and 0 <= b < self._size):
            raise ValueError(f"no link between nodes {a} and {b}")
        return self._raft_links[frozenset((a, b))]

    def partition(self, groups: Iterable[Iterable[int]], mode: Partition = Partition.RESET) -> None:
        """Cut the Raft links between groups (nodes named nowhere form one more group) and
        restore those within groups; this replaces any earlier partition, leaving other
        link faults as they are. `mode` (chaos.linkfaults.Partition): RESET and REFUSE end
        connections across the cut, and pysyncobj campaigns only while connected to some
        peer, so a node cut off this way keeps its term and rejoins quietly. BLACKHOLE
        keeps connections open and silent: an isolated node keeps campaigning (a few
        terms a second until its connections time out) and, pysyncobj having no pre-vote,
        its higher term deposes the leader when the partition heals."""
        parts = partition_groups(groups, self._size)
        cut = cut_pairs(parts)
        for pair, link in self._raft_links.items():
            self._proxy.update(link.name, partition=mode if pair in cut else None)
        self._record("partition", {"groups": [sorted(g) for g in parts], "mode": mode.value})

    def isolate(self, i: int) -> None:
        """Node i alone on one side of a partition (clients can still reach it)."""
        self.partition([[i]])

    def one_way(self, src: int, dst: int) -> None:
        """What src sends to dst is lost; what dst sends to src is delivered."""
        link = self._link(src, dst)
        self._proxy.update(link.name, **{link.direction(src, dst): DROP})
        self._record("one-way", {"src": src, "dst": dst})

    def deafen(self, i: int) -> None:
        """Node i can send but not receive: every message to it is lost (the asymmetric
        partition, classically of the leader)."""
        for j in range(self._size):
            if j != i:
                link = self._link(j, i)
                self._proxy.update(link.name, **{link.direction(j, i): DROP})
        self._record("deafen", {"node": i})

    def delay(self, i: int, j: int, ms: float, jitter_ms: float = 0.0) -> None:
        """Both directions between i and j delayed by ms ± jitter (order kept)."""
        d = delayed(ms, jitter_ms)
        self._proxy.update(self._link(i, j).name, up=d, down=d)
        self._record("delay", {"nodes": [i, j], "ms": ms, "jitter_ms": jitter_ms})

    def flaky(self, i: int, j: int, p: float) -> None:
        """The connection between i and j is reset with probability p per second."""
        self._proxy.update(self._link(i, j).name, flaky_p=p)
        self._record("flaky", {"nodes": [i, j], "p": p})

    def isolate_client(self, i: int, mode: Partition = Partition.RESET) -> None:
        """Clients cannot reach node i's gRPC port; Raft traffic is untouched."""
        self._proxy.update(grpc_link_name(i), partition=mode)
        self._record("isolate-client", {"node": i, "mode": mode.value})

    def delay_client(self, i: int, ms: float, jitter_ms: float = 0.0) -> None:
        d = delayed(ms, jitter_ms)
        self._proxy.update(grpc_link_name(i), up=d, down=d)
        self._record("delay-client", {"node": i, "ms": ms, "jitter_ms": jitter_ms})

    def heal(self) -> None:
        """Every link back to pass-through (connections that lost bytes are reset)."""
        self._proxy.heal()
        self._record("heal", None)

    def faults(self) -> dict[str, LinkFaults]:
        """The faults in force, per link name (links at pass-through omitted)."""
        return {name: f for name in self._proxy.links() if not (f := self._proxy.faults(name)).healthy}


__all__ = ["NetworkFaults"]
