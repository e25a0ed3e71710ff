"""A real coordinator API inside the test process, for unit-testing agents without a cluster.

The in-process coordinator is server code (the same gRPC servicers, validation,
state machine, leases and epoch timer as a real node, over one in-memory replica),
so it lives with the server (`coordinator.harness.in_process`). This module only
finds it through the documented `raftpoint.testing` entry point: an agent's own
code never imports the server, and an agent installed without it gets a message
that says what to install instead of an ImportError from deep inside.

    from agent_client import connect, testing

    with testing.coordinator() as coordinator, \
            connect(coordinator.address, data_dir=tmp_path, tls=coordinator.client_tls()) as rp:
        group = rp.group("team", mode="bcs", create=True)
        with group.agent("planner", state={}) as me:
            ...

The coordinator is silent unless asked: `testing.coordinator(verbose=True)` prints its
log lines to stderr, and otherwise they reach the user's own logging configuration only.
"""
from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, Protocol

ENTRY_POINT_GROUP = "raftpoint.testing"
ENTRY_POINT_NAME = "coordinator"


class TestCoordinator(Protocol):
    """What a test may rely on: an address to connect to, the TLS settings it takes,
    and a start/stop lifecycle."""

    address: str

    def client_tls(self, identity: str | None = "admin") -> Any: ...

    def start(self) -> "TestCoordinator": ...
    def stop(self) -> None: ...
    def __enter__(self) -> "TestCoordinator": ...
    def __exit__(self, *exc: object) -> None: ...


class ServerNotInstalled(ImportError):
    """The coordinator package (the server side) is not installed in this environment."""


def coordinator_class() -> type:
    """The in-process coordinator's class, found through the entry point."""
    found = entry_points(group=ENTRY_POINT_GROUP, name=ENTRY_POINT_NAME)
    for entry in found:
        return entry.load()
    raise ServerNotInstalled(f"no {ENTRY_POINT_GROUP!r} entry point named {ENTRY_POINT_NAME!r}: "
                             "install the coordinator (pip install raftpoint) to test agents in-process")


def coordinator(**options: Any) -> TestCoordinator:
    """A new, not yet started in-process coordinator (a context manager starts and stops it)."""
    return coordinator_class()(**options)


def __getattr__(name: str) -> Any:
    # `from agent_client.testing import InProcessCoordinator` keeps working, resolved lazily.
    if name == "InProcessCoordinator":
        return coordinator_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
