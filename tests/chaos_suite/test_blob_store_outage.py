"""The agent workload with its blobs on S3, through blob-store-outage faults.

The server is paused (hung) and killed while agents checkpoint and recover; afterwards
every invariant holds -- in particular no acknowledged checkpoint references a missing
or damaged blob -- and checkpoints were really attempted during the outages.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from chaos.blob_outage import FAULT, KILL, PAUSE, BlobStoreOutage, agent_location
from chaos.controller import ChaosCluster
from chaos.history import INFO
from chaos.report import Report
from chaos.workloads.agents import CHECKPOINTS, AgentConfig, AgentWorkload
from coordinator.harness.local_cluster import wait_for
from coordinator.harness.s3_server import S3Server
from tests.chaos_suite.test_agent_workload import crash_cycle, traffic

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def failed_during_outage(wl: AgentWorkload, since: int) -> int:
    """Agent operations since op #since whose outcome the outage made unknown or failed."""
    return sum(1 for op in wl.history.ops[since:]
               if op.process.startswith("agents-") and op.type == INFO and "blob store" in str(op.error or ""))


def test_agents_on_s3_survive_blob_store_outages(chaos: ChaosCluster, own_s3_server: S3Server,
                                                 tmp_path: Path) -> None:
    location = agent_location(own_s3_server, "chaos")
    wl = AgentWorkload(chaos.history, chaos.endpoints(), tmp_path / "agents",
                       AgentConfig(modes=("bcs",), duration_s=120, seed=11, blob_store=location))
    outage = BlobStoreOutage(own_s3_server, chaos.history)
    rng = random.Random(13)
    try:
        wl.start()
        traffic(wl)
        for kind in (PAUSE, KILL):
            mark = len(chaos.history.ops)
            outage.inject(kind)
            wait_for(lambda: failed_during_outage(wl, mark) >= 1, f"an agent operation failing on the {kind}ed store",
                     60, 0.2)
            outage.heal()
            traffic(wl)  # the agents carry on once the store is back
        crash_cycle(wl, rng)  # a recovery restores from S3 after the outages
    finally:
        outage.heal()
        report = Report(wl.finish())
    assert report.ok, report.table()
    assert report.result(CHECKPOINTS).counts["listed_and_readable"] >= 1
    faults = [op for op in chaos.history.ops if op.f == FAULT]
    assert {op.value["mode"] for op in faults if op.value.get("phase") == "fault"} == {PAUSE, KILL}
    assert outage.injected == 2 and outage.current is None
