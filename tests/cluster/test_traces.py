"""A checkpoint's trace runs from the agent into the leader: the agent's spans, the
gRPC call (or its session frame), and the leader's stages of the commit, one trace
with each span's parent where it belongs; the store commit that made it durable
afterwards links to the call's span. Nodes write their spans as JSON lines
(RAFTPOINT_TRACE_FILE); the agent process keeps its own in memory."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra (opentelemetry-sdk) is not installed")

from coordinator.harness.local_cluster import LocalCluster  # noqa: E402
from coordinator.tracing import TRACE_FILE_ENV, read_trace_file  # noqa: E402
from tests.cluster.test_agent_identity import FAST  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("raftpoint.admission", "raftpoint.batch", "raftpoint.replicate", "raftpoint.apply", "raftpoint.answer")

AGENT = """
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # before any channel is made: then they carry the context

from agent_client import connect

endpoints, data_dir = sys.argv[1].split(","), sys.argv[2]
with connect(endpoints, identity="tracer", data_dir=data_dir) as rp:
    group = rp.group("traced", mode="bcs", create=True)
    for transport in ("session", "unary"):
        with group.agent("a-" + transport, state={"n": 0}, transport=transport) as agent:
            with trace.get_tracer("test").start_as_current_span("step " + transport):
                agent.checkpoint({"n": 1})
for s in exporter.get_finished_spans():
    print(json.dumps({"name": s.name, "trace": format(s.context.trace_id, "032x"),
                      "id": format(s.context.span_id, "016x"),
                      "parent": format(s.parent.span_id, "016x") if s.parent else None}))
"""


def node_spans(path: Path) -> list[dict]:
    """The nodes' spans in the shape of the agent's above."""
    return [{"name": s.name, "trace": s.trace_id, "id": s.span_id, "parent": s.parent_id,
             "start": s.start, "end": s.end, "links": list(s.links)}
            for s in read_trace_file(path)]


@pytest.mark.slow
@pytest.mark.cluster
def test_a_checkpoint_is_one_trace_from_the_agent_to_the_leaders_commit_stages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace_file = tmp_path / "spans.jsonl"
    monkeypatch.setenv(TRACE_FILE_ENV, str(trace_file))  # the nodes inherit it
    with LocalCluster(tmp_path / "data", 3, settings=FAST) as cluster:
        cluster.start_all()
        env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **cluster.client_tls().environment()}
        done = subprocess.run([sys.executable, "-c", AGENT, ",".join(n.grpc for n in cluster.nodes),
                               str(tmp_path / "agent")], capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        mine = [json.loads(line) for line in done.stdout.splitlines()]
    theirs = node_spans(trace_file)
    by_id = {s["id"]: s for s in mine + theirs}
    for transport, server_span in (("session", "CommitCheckpoint (session)"),
                                   ("unary", "/raftpoint.v1.AgentService/CommitCheckpoint")):
        step = next(s for s in mine if s["name"] == f"step {transport}")
        in_trace = [s for s in mine + theirs if s["trace"] == step["trace"]]
        names = sorted(s["name"] for s in in_trace)
        checkpoint = next((s for s in in_trace if s["name"] == "raftpoint.checkpoint"), None)
        put = next((s for s in in_trace if s["name"] == "raftpoint.blob.put"), None)
        commit = next((s for s in in_trace if s["name"] == server_span), None)
        assert checkpoint is not None and put is not None and commit is not None, (
            f"{transport}: the trace holds {names}; the nodes wrote {sorted({s['name'] for s in theirs})}")
        assert checkpoint["parent"] == step["id"] and put["parent"] == checkpoint["id"], (transport, names)

        def ancestors(span: dict) -> list[str]:
            chain = []
            while span["parent"] in by_id:
                span = by_id[span["parent"]]
                chain.append(span["name"])
            return chain
        assert "raftpoint.checkpoint" in ancestors(commit), (transport, ancestors(commit))
        stages = {s["name"]: s for s in in_trace if s["name"] in STAGES and s["parent"] == commit["id"]}
        assert sorted(stages) == sorted(STAGES), f"{transport}: under {server_span}: {sorted(stages)}; trace: {names}"
        order = [(stages[name]["start"], stages[name]["end"]) for name in STAGES]
        assert all(earlier[1] <= later[0] for earlier, later in zip(order, order[1:])), (
            f"{transport}: the stages do not follow one another: {list(zip(STAGES, order))}")
        stored = [s for s in theirs if s["name"] == "raftpoint.store" and (commit["trace"], commit["id"]) in s["links"]]
        assert len(stored) == 1, (f"{transport}: {len(stored)} store spans link to {server_span}; the store spans' "
                                  f"links: {[s['links'] for s in theirs if s['name'] == 'raftpoint.store']}")
