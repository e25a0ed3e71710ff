"""What authentication and roles cost a call: the same calls against a one-node
cluster with auth on (bearer token looked up in the tokens file, bindings checked,
the grant carried in the log entry and re-checked by the state machine) and off.

Calls are sequential from one client on loopback: Heartbeat (a read: admission only)
and CommitCheckpoint (admission plus one Raft entry). Both clusters run at once and
the calls alternate between them; compare the ratio, not the absolute numbers.
Bounded: a fixed number of calls per kind.
Run: python benchmarks/auth_overhead.py [--calls N]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_client.connection import Connection  # noqa: E402
from coordinator.api.v1 import coordinator_pb2 as pb  # noqa: E402
from coordinator.harness.local_cluster import LocalCluster  # noqa: E402

SECRET = b"benchmark-agent-secret"


class Target:
    """One one-node cluster and an agent registered on it."""

    def __init__(self, cluster: LocalCluster) -> None:
        cluster.leader()
        self.conn = Connection(cluster.endpoints(), token=cluster.token)
        self.conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
            request_id="cg", spec=pb.GroupSpec(group="g", mode=pb.UNCOORDINATED, lease_ttl_s=3600)))
        reg = self.conn.call("AgentService", "Register", pb.RegisterRequest(request_id="r", group="g", agent_id="a",
                                                                            secret=SECRET))
        self.token = pb.FencingToken(incarnation=reg.incarnation, secret=SECRET)
        self.samples: dict[str, list[float]] = {"Heartbeat": [], "CommitCheckpoint": []}

    def round(self, i: int) -> None:
        started = time.perf_counter()
        self.conn.call("AgentService", "Heartbeat", pb.HeartbeatRequest(group="g", agent_id="a", token=self.token))
        self.samples["Heartbeat"].append(time.perf_counter() - started)
        request = pb.CommitCheckpointRequest(request_id=f"c{i}", token=self.token, checkpoint=pb.CheckpointMeta(
            group="g", agent_id="a", index=i + 1, kind=pb.BASIC, blob_uri=f"file:///b/{i}", sha256="c" * 64, size=1))
        started = time.perf_counter()
        self.conn.call("AgentService", "CommitCheckpoint", request)
        self.samples["CommitCheckpoint"].append(time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(Path(tmp) / "off", 1, auth=False).start_all() as plain, \
            LocalCluster(Path(tmp) / "on", 1, auth=True).start_all() as guarded:
        off, on = Target(plain), Target(guarded)
        for i in range(args.calls):  # alternating, so the machine's noise falls on both alike
            off.round(i)
            on.round(i)
        off.conn.close()
        on.conn.close()
    print(f"{args.calls} sequential calls of each kind, alternating between two one-node clusters, loopback")
    print(f"{'call':<18} {'median off (ms)':>16} {'median on (ms)':>15} {'on/off':>7}")
    for kind in off.samples:
        a, b = statistics.median(off.samples[kind]) * 1000, statistics.median(on.samples[kind]) * 1000
        print(f"{kind:<18} {a:>16.2f} {b:>15.2f} {b / a:>7.2f}")


if __name__ == "__main__":
    main()
