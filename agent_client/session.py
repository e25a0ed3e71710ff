"""The short path: connect, open a group, run an agent (blocking).

    from agent_client import connect

    with connect(endpoints, identity="worker-1") as rp:
        group = rp.group("team", mode="bcs", create=True)
        with group.agent("planner", state={"todo": []}) as me:
            envelope = me.send(b"hello", to="writer")
            me.checkpoint({"todo": ["draft"]})

A thin layer over AgentClient: it generates request ids, refuses a group created
without a mode, and starts an agent the one right way (register, restore, carry out
the pending rollback order) under the client's lock, so no order runs between the
restore and the state it produced. Everything else is AgentClient's (`me.client`).
"""
from __future__ import annotations

import socket
from collections import deque
from pathlib import Path
from typing import Any, Callable, Sequence

from agent_client.agent import AgentClient
from agent_client.blobstore import BlobStore
from agent_client.client_base import ClientBase
from agent_client.connection import Connection, Rejected
from agent_client.group_spec import GroupNotFound, check_mode, create_request, get_request
from agent_client.restored import Restored, RestoreKind
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.channels import ClientTLS, resolve

DATA_DIR = ".raftpoint"  # under the working directory unless data_dir= says otherwise


class RestoreFailed(RuntimeError):
    """The agent's checkpoint exists but cannot be loaded (schema, config or integrity):
    starting from the initial state instead would silently lose it."""


def agent_data_dir(data_dir: str | Path | None, identity: str) -> Path:
    """Where an identity's blobs and delivery logs live: one obvious default, the same
    after a restart in the same working directory."""
    return Path(data_dir) if data_dir is not None else Path.cwd() / DATA_DIR / identity


def default_identity() -> str:
    return socket.gethostname() or "agent-host"


def starting_state(restored: Restored, initial: Any) -> Any:
    """The state an agent starts from: its checkpoint, or `initial` on a cold start."""
    if restored.kind is RestoreKind.REJECTED:
        raise RestoreFailed(restored.reason)
    return initial if restored.state is None else restored.state


class AgentBase:
    """What the blocking and asyncio agents share: the live state, the callbacks that
    keep it in step with rollbacks, and the messages a rollback gave back."""

    client: ClientBase

    def __init__(self, initial: Any) -> None:
        self.initial = initial
        self.state: Any = initial
        self._redelivered: deque[tuple[str, bytes]] = deque()

    def hooks(self) -> dict[str, Any]:
        """The client callbacks: checkpoints snapshot `state`, rollbacks replace it."""
        return {"snapshot": lambda: self.state, "on_rollback": self._rolled_back, "on_redeliver": self._given_back}

    def _rolled_back(self, state: Any, reason: str) -> None:
        self.state = self.initial if state is None else state

    def _given_back(self, payload: bytes, sender: str) -> None:
        self._redelivered.append((sender, payload))

    def take_redelivered(self) -> list[tuple[str, bytes]]:
        """(sender, payload) of the messages a rollback took out of the state; apply them again."""
        out = list(self._redelivered)
        self._redelivered.clear()
        return out

    def recorded(self, name: str, fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
        """`fn` with its calls recorded for replay after a restore (ClientBase.recorded)."""
        return self.client.recorded(name, fn, **options)


class SessionBase:
    """What both sessions hold besides their connection: endpoints and where agent data goes."""

    def __init__(self, endpoints: Sequence[str], *, identity: str | None = None, data_dir: str | Path | None = None,
                 blob_store: BlobStore | None = None, token: str | None = None,
                 tls: ClientTLS | None = None) -> None:
        self.endpoints = list(endpoints)
        self.token = token  # bearer token for every call, the agents' included
        self.tls = resolve(tls)
        self.identity = identity or default_identity()
        self.blob_store: BlobStore | Path = blob_store if blob_store is not None else agent_data_dir(
            data_dir, self.identity)


def missing(name: str, exc: Rejected) -> Exception:
    """GroupNotFound for a refusal that says the group does not exist; else the refusal itself."""
    if exc.reason_code == pb.REASON_GROUP_NOT_FOUND:
        return GroupNotFound(f"group {name!r} does not exist; pass create=True and mode= to create it")
    return exc


class Agent(AgentBase):
    """One running agent: its state, send/receive/checkpoint, and the messages a
    rollback gave back (take_redelivered()). The client's own API is `client`."""

    client: AgentClient

    def __init__(self, group: str, agent_id: str, endpoints: Sequence[str], blob_store: BlobStore | Path,
                 initial: Any, **options: Any) -> None:
        super().__init__(initial)
        self.client = AgentClient(group, agent_id, endpoints, blob_store, **self.hooks(), **options)

    def start(self) -> "Agent":
        with self.client.atomic():
            self.client.register()
            self.state = starting_state(self.client.restore(), self.initial)
            self.client.sync_orders()
        return self

    def send(self, payload: bytes, to: str) -> bytes:
        """The envelope to hand to `to` instead of `payload`."""
        return self.client.wrap(payload, to)

    def receive(self, envelope: bytes) -> bytes | None:
        """The payload, or None when it must not be applied (a duplicate, or an orphan of a rollback)."""
        return self.client.unwrap(envelope)

    def checkpoint(self, state: Any = None) -> int:
        """Make `state` (default: the current one) the agent's state and checkpoint it."""
        with self.client.atomic():
            if state is not None:
                self.state = state
            return self.client.checkpoint()

    def atomic(self) -> Any:
        """Hold around a receive and the state change it causes (see AgentClient.atomic)."""
        return self.client.atomic()

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "Agent":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class Group:
    def __init__(self, session: "Raftpoint", name: str, mode: int) -> None:
        self.session, self.name, self.mode = session, name, mode

    def agent(self, agent_id: str, *, state: Any = None, **options: Any) -> Agent:
        """An agent of this group; `with` starts it (register, restore, pending orders)
        and closes it. `state` is the initial state of a cold start; options go to AgentClient."""
        options.setdefault("tls", self.session.tls)
        options.setdefault("token", self.session.token)
        return Agent(self.name, agent_id, self.session.endpoints, self.session.blob_store, state, **options)


class Raftpoint(SessionBase):
    """A connection to the coordinator plus where this process keeps agent data."""

    def __init__(self, endpoints: Sequence[str], *, deadline: float = 30.0, **where: Any) -> None:
        super().__init__(endpoints, **where)
        self.conn = Connection(self.endpoints, deadline=deadline, token=self.token, tls=self.tls)

    def group(self, name: str, *, mode: str | None = None, create: bool = False, **spec: Any) -> Group:
        """The group `name`; with create=True it is created if missing (mode required;
        lease_ttl_s, retention and checkpoint_interval_s are optional)."""
        if create:
            resp = self.conn.call("AdminService", "CreateGroup", create_request(name, mode, **spec))
            return Group(self, name, resp.group.spec.mode)
        try:
            resp = self.conn.call("AdminService", "GetGroup", get_request(name))
        except Rejected as exc:
            raise missing(name, exc) from exc
        return Group(self, name, check_mode(name, mode, resp.group.spec.mode))

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Raftpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(endpoints: Sequence[str] | str, **options: Any) -> Raftpoint:
    """A session with the coordinator at `endpoints` (a list, or one address).
    Options: identity (default: the host name), data_dir (default: ./.raftpoint/<identity>),
    blob_store (instead of a directory), deadline (seconds a call may retry), token (the
    bearer token the coordinator knows this process by), tls (a ClientTLS for the
    session and its agents; default: from RAFTPOINT_CA_FILE etc.)."""
    return Raftpoint([endpoints] if isinstance(endpoints, str) else endpoints, **options)
