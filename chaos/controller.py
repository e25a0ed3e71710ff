"""A coordinator cluster whose every link runs through a fault proxy.

`ChaosCluster` runs N `raftpoint coordinator` processes (a `LocalCluster`, each
through `python -m chaos.node`) with node i bound to 127.0.1.(i+1) and every proxy
on 127.0.0.1. Nodes know each other by their real Raft addresses, as pysyncobj
needs (it names nodes by address in handshakes, the log and snapshots); each Raft
pair's dialer (chaos.topology) has its TCP connections to the peer routed to the
pair's proxy (chaos.node). A node's peers are advertised to clients by their
proxied gRPC addresses, so a client that follows a `raftpoint-leader` redirect
stays behind the proxies. Observation (`statuses`, `leader`, `converged`) talks to the nodes'
real gRPC addresses, so it sees through client-side faults.

The cluster controls the node processes and observes them; its `network`
(chaos.network_faults) and `disks` (chaos.disk_faults) inject the link and disk
faults. Every fault method returns once the fault is in force and, given a History,
records it there as a nemesis op (after it took effect).
"""
from __future__ import annotations

import shutil
import signal
from pathlib import Path
from typing import Any, Callable, Iterable

from chaos import node as chaos_node, planted
from chaos.disk_faults import Disk, DiskFaults
from chaos.history import History
from chaos.netproxy import LinkStats, NetProxy
from chaos.network_faults import NetworkFaults
from chaos.topology import grpc_link_name, raft_links
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.channels import ClientTLS
from coordinator.harness.local_cluster import LocalCluster, NodeProcess, register_access, wait_for


def node_host(index: int) -> str:
    """Node i's loopback address, apart from the proxies (NetProxy listens on 127.0.0.1)."""
    if not 0 <= index < 254:
        raise ValueError("at most 254 nodes")
    return f"127.0.1.{index + 1}"


class ChaosCluster:
    def __init__(self, root: Path, size: int = 3, *, settings: dict[str, object] | None = None, seed: int = 0,
                 history: History | None = None, bug: str | None = None,
                 disks: Callable[[int], Disk] | None = None, password: str | None = None) -> None:
        """`bug`: a chaos.planted bug every node runs with (chaos.node plants it).
        `disks(i)`: node i's data directory goes on that disk (needs root and a private
        mount namespace); without it, plain directories under `root`."""
        planted.require(bug)  # an unknown bug fails here, not at the first start
        self.history = history
        self.proxy = NetProxy(seed)
        try:
            self.local = LocalCluster(root, size, settings=settings, password=password,
                                      hosts=[node_host(i) for i in range(size)], peer_spec=self._peer_spec,
                                      program=lambda i: chaos_node.program(self._routes(i), bug,
                                                                           self.clock_file(i)))
            self.raft_links = raft_links([n.raft for n in self.local.nodes])
            self.addresses: dict[str, int] = {}
            for n in self.local.nodes:
                self.addresses[n.raft] = self.addresses[n.grpc] = n.index
                self.addresses[self.proxy.add_link(grpc_link_name(n.index), n.grpc)] = n.index
            for link in self.raft_links.values():
                self.addresses[self.proxy.add_link(link.name, self.local.nodes[link.listener].raft)] = link.listener
            if self.local.token:
                register_access(self.endpoints(), self.local.token, self.local.token_file)
        except BaseException:
            self.proxy.close()
            raise
        self.network = NetworkFaults(self.proxy, self.raft_links, size, self._record)
        self.disks = DiskFaults(disks, self.local.nodes, self._record)
        self.paused: set[int] = set()

    # ---- wiring -----------------------------------------------------------------------
    def _peer_spec(self, peer: NodeProcess) -> str:
        """Peers by their real Raft addresses (pysyncobj's node identities) and by
        their proxied gRPC addresses (what redirects send clients to)."""
        return f"{peer.raft}={self.proxy.address(grpc_link_name(peer.index))}"

    def _routes(self, i: int) -> dict[str, str]:
        """Where node i's Raft dials really go: each link it dials, to that link's proxy."""
        return {self.local.nodes[link.listener].raft: self.proxy.address(link.name)
                for link in self.raft_links.values() if link.dialer == i}

    @property
    def nodes(self) -> list[NodeProcess]:
        return self.local.nodes

    @property
    def size(self) -> int:
        return len(self.local.nodes)

    def running(self) -> int:
        """How many node processes run now."""
        return sum(n.alive for n in self.nodes)

    def node_of(self, address: str) -> int | None:
        """The node index behind any of its addresses, real or proxied."""
        return self.addresses.get(address)

    def auth_files(self) -> tuple[Path | None, Path | None]:
        """The bindings and tokens files every node reads (None: the cluster has no such file)."""
        def setting(key: str) -> Path | None:
            value = self.local.settings.get(key)
            return Path(str(value)) if value else None
        return setting("auth_bindings_file"), setting("auth_tokens_file")

    def endpoints(self) -> list[str]:
        """The proxied gRPC addresses: what clients under test should use."""
        return [self.proxy.address(grpc_link_name(i)) for i in range(self.size)]

    def link_stats(self) -> dict[str, LinkStats]:
        return {name: self.proxy.stats(name) for name in self.proxy.links()}

    def _record(self, f: str, value: Any = None) -> None:
        if self.history is not None:
            self.history.nemesis(f, value)

    # ---- processes ----------------------------------------------------------------------
    def start_all(self) -> "ChaosCluster":
        self.disks.mount_all()
        self.local.start_all()
        self._record("start-all", {"nodes": list(range(self.size))})
        return self

    def start(self, i: int) -> None:
        self.local.start(i)
        self._record("start", {"node": i})

    def kill(self, i: int) -> None:
        """SIGKILL (a paused node too): no shutdown code runs, as in a crash."""
        self.local.kill(i)
        self.paused.discard(i)
        self._record("kill", {"node": i})

    def stop(self, i: int) -> None:
        """SIGTERM and wait (SIGKILL after 10 s); a paused node is continued so it can exit."""
        node = self.nodes[i]
        if i in self.paused and node.alive:
            node.process.terminate()
            node.process.send_signal(signal.SIGCONT)
        self.paused.discard(i)
        self.local.stop(i)
        self._record("stop", {"node": i})

    def restart(self, i: int, *, crash: bool = True) -> None:
        (self.kill if crash else self.stop)(i)
        self.start(i)

    def pause(self, i: int) -> None:
        """SIGSTOP: the process keeps its sockets and state but runs nothing, like a long
        GC pause or a stalled VM; peers see silence, not a closed connection."""
        self.local.signal(i, signal.SIGSTOP)
        self.paused.add(i)
        self._record("pause", {"node": i})

    def resume(self, i: int) -> None:
        self.local.signal(i, signal.SIGCONT)
        self.paused.discard(i)
        self._record("resume", {"node": i})

    def clock_file(self, i: int) -> Path:
        """Where node i's wall-clock step is kept (chaos.node --clock-file)."""
        return self.local.root / f"node{i}.clock-step"

    def step_clock(self, i: int, seconds: float) -> None:
        """Step node i's wall clock `seconds` from true time (0: put it right), at once."""
        tmp = self.clock_file(i).with_suffix(".tmp")
        tmp.write_text(repr(seconds))
        tmp.replace(self.clock_file(i))
        self._record("clock-step", {"node": i, "seconds": seconds})

    def wipe(self, i: int) -> None:
        """Stop node i, delete its data and start it empty: it rejoins and catches up from
        the leader. Like a replaced disk, a wiped node forgets its term and vote too, so
        it could vote twice in one term: Raft's safety assumes that never happens, so
        wipe at most one node at a time and only while it cannot tip an election."""
        self.local.signal(i, signal.SIGCONT)
        self.paused.discard(i)
        self.local.stop(i)
        data = self.nodes[i].data_dir
        if self.disks.mounted(i):
            for child in data.iterdir() if data.exists() else ():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        else:
            shutil.rmtree(data, ignore_errors=True)
        self.local.start(i)
        self._record("wipe", {"node": i})

    def close(self) -> None:
        """Stop every node (continuing paused ones), then the proxy, then the disks."""
        try:
            for i in list(self.paused):
                self.local.signal(i, signal.SIGCONT)
            self.paused.clear()
            self.local.close()
        finally:
            self.proxy.close()
            self.disks.close()

    def __enter__(self) -> "ChaosCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- observation ------------------------------------------------------------------
    def client_tls(self, identity: str | None = "admin") -> ClientTLS:
        """A client's settings for this cluster (LocalCluster.client_tls); the node
        certificates name 127.0.0.1, so they hold through the proxies."""
        return self.local.client_tls(identity)

    def statuses(self) -> dict[int, pb.NodeStatus]:
        """Status of every running node that answers (paused nodes are not asked)."""
        return self.local.statuses(exclude=self.paused)

    def leaders(self) -> dict[int, int]:
        """Every node that believes it leads, with its term: during a partition a deposed
        leader keeps believing until its leader_fallback_timeout passes."""
        return {i: s.term for i, s in self.statuses().items() if s.role == "leader"}

    def leader(self, timeout: float = 30.0, among: Iterable[int] | None = None) -> int:
        """The node leading at the highest term (among `among`, if given), waiting for one."""
        allowed = None if among is None else set(among)

        def find() -> tuple[int] | None:
            claims = {i: t for i, t in self.leaders().items() if allowed is None or i in allowed}
            return (max(claims, key=claims.__getitem__),) if claims else None

        return wait_for(find, "a leader", timeout, 0.1)[0]

    def converged(self, timeout: float = 30.0) -> str:
        """The digest once every live node applied the same index (resume paused nodes first)."""
        return self.local.converged(timeout)

    # ---- power ------------------------------------------------------------------------
    def power_cut(self, *indexes: int) -> None:
        """The nodes lose power at the same instant: all are frozen first, so none writes
        after another's disk went down; then their file systems shut down (what was not
        durable is gone) and the processes are killed. power_on() brings them back."""
        disks = [self.disks.get(i) for i in indexes]
        for i in indexes:
            self.local.signal(i, signal.SIGSTOP)
        for disk in disks:
            disk.power_cut()
        for i in indexes:
            self.local.kill(i)
            self.paused.discard(i)
        self._record("power-cut", {"nodes": list(indexes)})

    def power_on(self, *indexes: int) -> None:
        """Mount what survived the power cut and start the nodes on it."""
        for i in indexes:
            self.disks.get(i).power_cycle()
            self.local.start(i)
        self._record("power-on", {"nodes": list(indexes)})


__all__ = ["ChaosCluster", "node_host"]
