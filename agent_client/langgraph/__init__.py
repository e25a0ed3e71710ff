"""LangGraph integration: RaftpointSaver, a BaseCheckpointSaver over raftpoint.

Needs LangGraph: pip install 'raftpoint[langgraph]' (or 'raftpoint-agent[langgraph]').
"""
try:
    import langgraph.checkpoint.base  # noqa: F401
except ModuleNotFoundError as exc:  # say what to install, not where the import failed
    raise ModuleNotFoundError(f"agent_client.langgraph needs LangGraph ({exc.name} is missing): "
                              "pip install 'raftpoint[langgraph]'", name=exc.name) from exc

from agent_client.langgraph.saver import RaftpointSaver  # noqa: E402
from agent_client.langgraph.threads import ThreadFenced, ThreadUnreadable  # noqa: E402

__all__ = ["RaftpointSaver", "ThreadFenced", "ThreadUnreadable"]
