"""RaftpointSaver on a real 3-node cluster: LangGraph's conformance suite, and a fence across processes."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")
from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402

from agent_client.connection import TOKEN_FILE_ENV  # noqa: E402
from agent_client.langgraph import RaftpointSaver, ThreadFenced  # noqa: E402
from coordinator import channels  # noqa: E402
from coordinator.harness.local_cluster import LocalCluster  # noqa: E402
from tests.lg_saver.saver_steps import step, thread  # noqa: E402
from tests.support.cluster import FAST  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("lg") / "cluster", 3, settings=FAST).start_all() as cluster, \
            channels.environment(cluster.client_tls()):  # for the savers here and the second writer's process
        cluster.leader()
        yield cluster


async def test_full_conformance_on_a_three_node_cluster(cluster: LocalCluster, tmp_path: Path) -> None:
    @checkpointer_test(name="RaftpointSaver-3-nodes")
    async def saver():
        with RaftpointSaver(cluster.endpoints(), tmp_path, token=cluster.token, group=f"lg-{uuid.uuid4().hex[:8]}") as s:
            yield s

    report = await validate(saver)
    report.print_report()
    assert report.passed_all(), report


def test_a_second_process_fences_the_first_writer_of_a_thread(cluster: LocalCluster, tmp_path: Path) -> None:
    group = f"lg-{uuid.uuid4().hex[:8]}"
    with RaftpointSaver(cluster.endpoints(), tmp_path, token=cluster.token, group=group) as first:
        c1, v1 = step(None, {"msgs": ["hi"]}, 0)
        head = first.put(thread("t"), c1, {"step": 0}, v1)
        second = subprocess.run([sys.executable, str(ROOT / "tests" / "lg_saver" / "fence_writer.py"),
                                 ",".join(cluster.endpoints()), str(tmp_path), group, "t"],
                                capture_output=True, text=True, timeout=120, cwd=ROOT,
                                env={**os.environ, TOKEN_FILE_ENV: str(cluster.token_file)})
        assert second.returncode == 0, second.stderr
        c2, v2 = step(c1, {"msgs": ["hi", "stale"]}, 1)
        with pytest.raises(ThreadFenced):
            first.put(head, c2, {"step": 1}, v2)
    with RaftpointSaver(cluster.endpoints(), tmp_path, token=cluster.token, group=group) as reader:
        chain = [t.checkpoint["id"] for t in reader.list(thread("t"))]
        assert chain == [second.stdout.strip(), c1["id"]]  # the second writer's step on top of the first's; no fork
