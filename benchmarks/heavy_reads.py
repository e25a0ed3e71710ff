"""An honest agent's heartbeat latency while many heavy admin reads (WhatIf) run.

A one-node cluster holds one group whose dependency history is large (--reports
reports of --records records each); --concurrent threads then send WhatIf over and
over for --seconds while one agent heartbeats every 50 ms. A heartbeat late by more
than the lease lets the leader declare a healthy agent failed, so the figure that
matters is the heartbeat's worst latency, against one WhatIf's time alone.
Run: python benchmarks/heavy_reads.py [--reports 20 --records 10000 --concurrent 16 --seconds 10]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc  # noqa: E402

from coordinator.api.v1 import coordinator_pb2 as pb  # noqa: E402
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc  # noqa: E402
from coordinator.channels import ClientTLS  # noqa: E402
from coordinator.harness.local_cluster import LocalCluster  # noqa: E402

HEARTBEAT_PERIOD_S = 0.05
AGENTS = 10
MESSAGE_BYTES = 64 * 1024 * 1024


def build_state(channel: grpc.Channel, reports: int, records: int) -> None:
    admin, agent = pb_grpc.AdminServiceStub(channel), pb_grpc.AgentServiceStub(channel)
    admin.CreateGroup(pb.CreateGroupRequest(request_id="cg", spec=pb.GroupSpec(
        group="g", mode=pb.CIC_BCS, lease_ttl_s=3600)), timeout=30)
    for i in range(AGENTS):
        agent.Register(pb.RegisterRequest(secret=b"s" * 16, request_id=f"reg-{i}", group="g", agent_id=f"a{i}"), timeout=30)
        agent.CommitCheckpoint(pb.CommitCheckpointRequest(request_id=f"cp-{i}", token=pb.FencingToken(secret=b"s" * 16, incarnation=1),
                                                          checkpoint=pb.CheckpointMeta(
            group="g", agent_id=f"a{i}", index=1, kind=pb.BASIC, blob_uri=f"file:///b/{i}", sha256="c" * 64,
            size=1)), timeout=30)
    for r in range(reports):
        receiver = f"a{r % AGENTS}"
        agent.ReportDependencies(pb.ReportDependenciesRequest(
            request_id=f"dep-{r}", group="g", agent_id=receiver, token=pb.FencingToken(secret=b"s" * 16, incarnation=1),
            records=[pb.DependencyRecord(sender=f"a{(r + 1) % AGENTS}", send_interval=2, receiver=receiver,
                                         receive_interval=2, message_id=f"m-{r}-{k}", send_generation=1)
                     for k in range(records)]), timeout=60)
    agent.Register(pb.RegisterRequest(secret=b"s" * 16, request_id="reg-hb", group="g", agent_id="honest"), timeout=30)


def measure(address: str, tls: ClientTLS, concurrent: int, seconds: float) -> dict[str, object]:
    options = [("grpc.max_receive_message_length", MESSAGE_BYTES)]
    with tls.channel(address, options=options) as channel:
        admin = pb_grpc.AdminServiceStub(channel)
        started = time.perf_counter()
        admin.WhatIf(pb.WhatIfRequest(group="g", failed=["a0"]), timeout=120)
        alone = time.perf_counter() - started
    stop = threading.Event()
    what_ifs: list[float] = []
    refused: list[str] = []

    def load() -> None:
        with tls.channel(address, options=options) as channel:
            stub = pb_grpc.AdminServiceStub(channel)
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    stub.WhatIf(pb.WhatIfRequest(group="g", failed=["a0"]), timeout=120)
                    what_ifs.append(time.perf_counter() - t0)
                except grpc.RpcError as exc:
                    refused.append(exc.code().name)
                    time.sleep(0.1)

    threads = [threading.Thread(target=load, daemon=True) for _ in range(concurrent)]
    for t in threads:
        t.start()
    beats: list[float] = []
    with tls.channel(address) as channel:
        agent = pb_grpc.AgentServiceStub(channel)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            agent.Heartbeat(pb.HeartbeatRequest(group="g", agent_id="honest", token=pb.FencingToken(secret=b"s" * 16, incarnation=1)),
                            timeout=60)
            beats.append(time.perf_counter() - t0)
            time.sleep(HEARTBEAT_PERIOD_S)
    stop.set()
    for t in threads:
        t.join(180)
    return {"what_if_alone_s": round(alone, 3), "what_ifs_done": len(what_ifs),
            "what_if_p50_s": round(statistics.median(what_ifs), 3) if what_ifs else None,
            "what_ifs_refused": len(refused),
            "heartbeats": len(beats), "heartbeat_p50_ms": round(1000 * statistics.median(beats), 1),
            "heartbeat_max_ms": round(1000 * max(beats), 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", type=int, default=20)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--concurrent", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="heavy-reads-") as tmp, LocalCluster(Path(tmp), 1) as cluster:
        cluster.start_all()
        leader = cluster.leader()
        with leader.channel() as channel:
            build_state(channel, args.reports, args.records)
        result = {"reports": args.reports, "records": args.records, "concurrent": args.concurrent,
                  **measure(leader.grpc, cluster.client_tls(), args.concurrent, args.seconds)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
