"""Run a coordinator node for the chaos suite: Raft dials go through the fault proxies.

    python -m chaos.node [--route ADDRESS=VIA ...] [--bug NAME] [--clock-file PATH] <the usual node flags>

Every node is told its peers' real Raft addresses, because pysyncobj names a node by
its address string everywhere: in the handshake, in membership changes in the log,
and in the member list each snapshot carries (a node installing the leader's snapshot
takes that list as its own). A per-node alias for a peer (such as the proxy's
address) makes one node count as two there. So the proxy is applied below the
naming: `--route ADDRESS=VIA` makes this process open its TCP connections for
ADDRESS to VIA instead, and nothing else changes. `--bug` plants one of
chaos.planted's bugs. `--clock-file` steps this process's wall clock by the
seconds the file holds (the clock-jump fault), as `date -s` would: time.time()
moves, time.monotonic() does not. All are monkeypatched in before
`coordinator.main` runs; nothing in coordinator/ knows about them.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Mapping

from chaos import planted
from chaos.linkfaults import loopback_address

PROGRAM = [sys.executable, "-m", "chaos.node"]
Address = tuple[str, int]
CLOCK_POLL_S = 0.05  # how stale the stepped clock's offset may be


def program(routes: Mapping[str, str], bug: str | None = None, clock_file: Path | None = None) -> list[str]:
    """The command line that runs one node (`coordinator.main`) with these routes, bug and clock file."""
    planted.require(bug)
    args = [*PROGRAM]
    for address, via in sorted(routes.items()):
        args += ["--route", f"{address}={via}"]
    if clock_file is not None:
        args += ["--clock-file", str(clock_file)]
    return args + (["--bug", bug] if bug else [])


def step_wall_clock(path: Path) -> None:
    """Make time.time() in this process run the seconds in `path` (absent: 0) ahead."""
    real_time = time.time
    offset, checked = 0.0, -math.inf

    def stepped() -> float:
        nonlocal offset, checked
        now = time.monotonic()
        if now - checked >= CLOCK_POLL_S:
            checked = now
            try:
                offset = float(path.read_text())
            except (OSError, ValueError):
                offset = 0.0
        return real_time() + offset

    time.time = stepped  # type: ignore[assignment]


def route_dials(routes: Mapping[Address, Address]) -> None:
    """Send pysyncobj's outgoing connections for each address to its `via` address.

    Patched at TcpConnection.connect, the one place pysyncobj opens a socket, so
    node identities (TCPNode ids, handshakes, snapshots) keep the real address."""
    from pysyncobj import tcp_connection

    connect = tcp_connection.TcpConnection.connect

    def routed(self: tcp_connection.TcpConnection, host: str, port: int) -> bool:
        host, port = routes.get((host, port), (host, port))
        return connect(self, host, port)

    tcp_connection.TcpConnection.connect = routed  # type: ignore[method-assign]


def _route(text: str) -> tuple[Address, Address]:
    address, sep, via = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected ADDRESS=VIA, got {text!r}")
    try:
        return loopback_address(address, "--route ADDRESS"), loopback_address(via, "--route VIA")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.node",
                                     description="run a coordinator node as a chaos-suite node")
    parser.add_argument("--route", type=_route, action="append", default=[],
                        help="open connections for ADDRESS to VIA instead (repeatable)")
    parser.add_argument("--bug", choices=sorted(planted.BUGS), help="plant a known bug (chaos/planted.py)")
    parser.add_argument("--clock-file", type=Path, help="step the wall clock by the seconds this file holds")
    args, rest = parser.parse_known_args(argv)
    route_dials(dict(args.route))
    if args.clock_file is not None:
        step_wall_clock(args.clock_file)
    if args.bug:
        planted.plant(args.bug)
        print(f"chaos.node: running with bug {args.bug!r}", file=sys.stderr, flush=True)
    from coordinator import main as node_main
    return node_main.main(rest)


if __name__ == "__main__":
    sys.exit(main())
