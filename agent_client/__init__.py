"""agent_client: the library each agent links to checkpoint, message and recover with raftpoint.

Submodules are imported where used (`from agent_client.agent import AgentClient`), so
importing the package loads neither gRPC nor, ever, pysyncobj or LMDB.
"""
from __future__ import annotations

from typing import Any

__all__ = ["connect", "connect_async", "ClientTLS"]


def __getattr__(name: str) -> Any:
    # The short path, loaded on first use so `import agent_client` stays free of gRPC.
    if name == "connect":
        from agent_client.session import connect
        return connect
    if name == "connect_async":
        from agent_client.aio_session import connect_async
        return connect_async
    if name == "ClientTLS":
        from agent_client.tls import ClientTLS
        return ClientTLS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
