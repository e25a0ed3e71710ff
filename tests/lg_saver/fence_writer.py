"""A second process writing a LangGraph thread: `python fence_writer.py ENDPOINTS BLOBS GROUP THREAD`.

Prints the id of the checkpoint it wrote; exits 0 once its write is committed.
"""
from __future__ import annotations

import sys

from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

from agent_client.connection import token_from_env
from agent_client.langgraph import RaftpointSaver


def main(endpoints: str, blobs: str, group: str, thread_id: str) -> None:
    with RaftpointSaver(endpoints.split(","), blobs, group=group, token=token_from_env()) as saver:
        head = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
        base = head.checkpoint if head else empty_checkpoint()
        checkpoint = create_checkpoint(base, None, 99)
        config = head.config if head else {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        written = saver.put(config, checkpoint, {"source": "loop", "step": 99, "writer": "second"}, {})
        print(written["configurable"]["checkpoint_id"])


if __name__ == "__main__":
    main(*sys.argv[1:5])
