"""LangGraph's own checkpointer conformance suite against RaftpointSaver, in-process coordinator."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")
from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402

from agent_client.langgraph import RaftpointSaver  # noqa: E402
from agent_client import testing  # noqa: E402
from tests.lg_saver.saver_steps import step, thread  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("layout", [{}, {"seal_after": 1, "inline_max": 0}], ids=["defaults", "seal-every-step"])
async def test_full_conformance_in_process(tmp_path: Path, layout: dict[str, int]) -> None:
    """Also with every step sealing the one before and every value a blob: the paths a
    long thread takes (segments, patched writes, values found in segments) on every call."""
    with testing.coordinator() as running:
        @checkpointer_test(name="RaftpointSaver-in-process")
        async def saver():
            with RaftpointSaver(running.address, tmp_path, tls=running.client_tls(), group=f"lg-{uuid.uuid4().hex[:8]}",
                                **layout) as s:
                yield s

        report = await validate(saver)
        report.print_report()
        assert report.passed_all_base() and report.passed_all(), report


@pytest.mark.slow
async def test_full_conformance_in_a_group_shared_with_another_blob_store(tmp_path: Path) -> None:
    """Every saver in one group (as all savers share `langgraph` by default), which also
    holds a thread whose blobs are in another saver's store: this saver cannot read it,
    and its listings and deletions go on without it."""
    with testing.coordinator() as running:
        with RaftpointSaver(running.address, tmp_path / "other", tls=running.client_tls()) as other:
            checkpoint, versions = step(None, {"msgs": ["elsewhere"]}, 0)
            other.put(thread("in-another-store"), checkpoint, {"step": 0}, versions)

        @checkpointer_test(name="RaftpointSaver-shared-group")
        async def saver():
            with RaftpointSaver(running.address, tmp_path / "mine", tls=running.client_tls()) as s:
                yield s

        report = await validate(saver)
        report.print_report()
        assert report.passed_all_base() and report.passed_all(), report
