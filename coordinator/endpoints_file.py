"""`endpoints.json`: where `raftpoint cluster up` records its nodes' addresses.

One object per node: its `raft`, `grpc` and `metrics` address and the `pid` of its
process. The cluster's own commands read it to find the cluster (`--data-dir`), a
restarted `cluster up` to start on the same ports (Raft keeps its members'
addresses), and a client that cannot talk gRPC to an address to say which node's
Raft or metrics port it was given instead. It lives beside the channel rules
because both sides read it: the harness writes it, clients only read it.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

ENDPOINTS_FILE = "endpoints.json"
# Where `raftpoint cluster up` and the commands that talk to it keep a cluster by default.
DEFAULT_DATA_DIR = "raftpoint-data"


class LayoutMismatch(ValueError):
    """The data dir holds a cluster of another size or on other ports than asked for,
    or a record that is no cluster's."""


@dataclass(frozen=True)
class NodeAddresses:
    raft: str
    grpc: str
    metrics: str

    def as_tuple(self) -> tuple[str, str, str]:
        return self.raft, self.grpc, self.metrics


def write_layout(data_dir: Path, nodes: Sequence[NodeAddresses], pids: Sequence[int | None]) -> None:
    doc = [{"raft": n.raft, "grpc": n.grpc, "metrics": n.metrics, "pid": pid} for n, pid in zip(nodes, pids)]
    (Path(data_dir) / ENDPOINTS_FILE).write_text(json.dumps(doc, indent=1))


def read_layout(data_dir: Path) -> list[NodeAddresses] | None:
    """Each node's recorded addresses; None when none are recorded."""
    path = Path(data_dir) / ENDPOINTS_FILE
    try:
        text = path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        return [NodeAddresses(n["raft"], n["grpc"], n["metrics"]) for n in json.loads(text)]
    except (ValueError, KeyError, TypeError) as exc:
        raise LayoutMismatch(f"{path} is not a cluster's endpoints ({exc!r}); "
                             "move it away to start a new cluster") from None


def read_endpoints(data_dir: Path) -> list[str]:
    """The gRPC addresses of the cluster `data_dir` holds; FileNotFoundError (with the
    path) when it holds none, LayoutMismatch when its record is unreadable."""
    layout = read_layout(data_dir)
    if layout is None:
        raise FileNotFoundError(f"no cluster in {data_dir}: {Path(data_dir) / ENDPOINTS_FILE} does not exist")
    return [n.grpc for n in layout]


def port_role(address: str, data_dirs: Iterable[str | os.PathLike[str]]) -> str | None:
    """What `address` is in a cluster recorded in one of `data_dirs`, when it is a
    node's Raft or metrics port: "it is the Raft port of node1 in <file>; its gRPC
    port is <grpc>". None when no record names it so (or none can be read)."""
    for data_dir in data_dirs:
        try:
            layout = read_layout(Path(data_dir)) or []
        except (OSError, LayoutMismatch):
            continue
        for index, node in enumerate(layout):
            for role, value in (("Raft", node.raft), ("metrics", node.metrics)):
                if value == address:
                    return (f"it is the {role} port of node{index} in {Path(data_dir) / ENDPOINTS_FILE}; "
                            f"its gRPC port is {node.grpc}")
    return None
