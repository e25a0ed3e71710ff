"""One power-cut run, for test_planted_fsync (it must run in a private mount namespace).

    python -m tests.chaos_suite.power_cut BUG|none DIR

Every node keeps its data on its own loop-device disk. After a burst of
acknowledged checkpoint commits the power of all three disks is cut at once, the
nodes die with it, the disks come back with what was durable, the nodes restart,
and the final listing is checked. Prints the durability invariant's result as JSON.
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from chaos.client import RecordingClient
from chaos.disk import LoopDisk
from chaos.history import History
from chaos.invariants import durability
from chaos.invariants.facts import Facts
from chaos.workloads import metadata_ops as ops
from coordinator.api.v1 import coordinator_pb2 as pb
from tests.chaos_suite.clusters import PlantedCluster

COMMITS = 40
DISK_MB = 64


def run(bug: str | None, root: Path) -> dict:
    disks = [LoopDisk(root / f"disk{i}.img", root / f"mnt{i}", DISK_MB) for i in range(3)]
    cluster = PlantedCluster(root / "cluster", bug)
    try:
        for disk, node in zip(disks, cluster.nodes):
            disk.create()
            disk.mount()
            node.data_dir = disk.mountpoint / "node"
        cluster.start_all()
        cluster.leader()
        with History(root / "history.jsonl") as history:
            client = RecordingClient(history, "writer", cluster.endpoints(), deadline=10.0, rpc_timeout=2.0)
            client.send(ops.create_group("cg", pb.GroupSpec(group="g", mode=pb.UNCOORDINATED, lease_ttl_s=3600)))
            client.send(ops.register("reg", "g", "a"))
            for i in range(1, COMMITS + 1):
                client.send(ops.commit(f"cp{i}", "g", "a", 1, i, 0, pb.BASIC))
            for disk in disks:  # as close to "at once" as three ioctls get
                disk.power_cut()
            for node in cluster.nodes:
                cluster.kill(node.index)
            for disk in disks:
                disk.power_cycle()
            for node in cluster.nodes:
                cluster.start(node.index)
            cluster.leader(60)
            final = RecordingClient(history, "final", cluster.endpoints(), deadline=30.0, rpc_timeout=2.0)
            final.send(ops.list_checkpoints("final-list", "g"))
            client.close()
            final.close()
        return asdict(durability.check(Facts(history.ops)))
    finally:
        cluster.close()
        for disk in disks:
            disk.close()


if __name__ == "__main__":
    result = run(None if sys.argv[1] == "none" else sys.argv[1], Path(sys.argv[2]))
    print(json.dumps(result, default=str))
