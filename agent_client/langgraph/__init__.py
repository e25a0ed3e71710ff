"""LangGraph integration: RaftpointSaver, a BaseCheckpointSaver over raftpoint (pip install 'raftpoint[langgraph]')."""
from agent_client.langgraph.saver import RaftpointSaver
from agent_client.langgraph.threads import ThreadFenced

__all__ = ["RaftpointSaver", "ThreadFenced"]
