"""The README's quickstart: two agents, a message, checkpoints, a crash and a restore.

Runs against an in-process coordinator (agent_client.testing) unless a cluster is
named: the data dir of `raftpoint cluster up` (`python examples/quickstart.py
raftpoint-data`: its endpoints.json, CA and admin certificate), or comma-separated
gRPC endpoints (`python examples/quickstart.py 127.0.0.1:7001,127.0.0.1:7004`, TLS
settings from RAFTPOINT_CA_FILE, RAFTPOINT_CERT_FILE and RAFTPOINT_KEY_FILE).

As the cluster's admin, each run uses a group of its own, `quickstart-<8 hex digits>`:
a cluster keeps a group and its agents' checkpoints after the run, and this run's
blobs (in a temporary directory) are gone, so a second run in the same group would
restore checkpoints whose blobs no longer exist. The run prints the command that
deletes its group once its agents' leases have run out.

As an agent identity (`--identity reporter --group team`: the certificate
`raftpoint auth add-agent reporter --group team` issued), the run joins a group that
exists, since an agent identity may not create one. Its agents `planner` and
`writer` then keep their blobs beside the cluster that keeps their checkpoints, in
`<data dir>/agents/<identity>` (given endpoints: `./.raftpoint/quickstart`), so a
second run is what a restart of those agents is meant to be: each resumes from its
checkpoint of the run before and the run ends in the same state. Fresh agent ids per
run would leave two dead agents in the group after every run instead.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path

from agent_client import connect, testing
from agent_client.connection import CoordinatorUnavailable, Rejected
from agent_client.group_spec import GroupNotFound
from agent_client.session import RestoreFailed
from agent_client.tls import ClientTLS
from coordinator.endpoints_file import LayoutMismatch, read_endpoints

ADMIN = "admin"


def run(endpoints: list[str], data_dir: str | Path | None, tls: ClientTLS | None = None,
        group_name: str = "team", *, create: bool = True) -> dict:
    """`tls`: None reads RAFTPOINT_CA_FILE, RAFTPOINT_CERT_FILE and RAFTPOINT_KEY_FILE.
    create=False joins `group_name` (GroupNotFound when it does not exist)."""
    with connect(endpoints, identity="quickstart", data_dir=data_dir, tls=tls) as rp:
        group = rp.group(group_name, mode="bcs", create=create)
        with group.agent("planner", state={"sent": 0}) as planner, \
                group.agent("writer", state={"notes": []}) as writer:
            envelope = planner.send(b"outline the report", to="writer")
            planner.checkpoint({"sent": 1})
            with writer.atomic():                      # the message and its effect, together
                note = writer.receive(envelope)
                writer.state = {"notes": [note.decode()]}
            writer.checkpoint()
            assert writer.receive(envelope) is None    # a duplicate is never applied twice
        # The writer's process is gone; a new one picks up where its checkpoint left off.
        with group.agent("writer", state={"notes": []}) as writer:
            return writer.state


def cluster(where: str, identity: str = ADMIN, group: str | None = None) -> tuple[list[str], ClientTLS | None]:
    """The endpoints and TLS settings of `where`: a `cluster up` data dir (with the
    certificate of `identity`, an agent identity of `group`), or endpoints. SystemExit
    saying what is missing and which command makes it."""
    data = Path(where)
    if not data.is_dir():
        return where.split(","), None
    try:
        endpoints = read_endpoints(data)
    except (FileNotFoundError, LayoutMismatch) as exc:
        raise SystemExit(f"quickstart: {exc}") from None
    tls = data / "tls"
    cert, key = tls / f"client-{identity}.crt", tls / f"client-{identity}.key"
    if not (cert.is_file() and key.is_file()):
        maker = (f"raftpoint cluster up --data-dir {where}` writes" if identity == ADMIN else
                 f"raftpoint auth add-agent {identity} --group {group} --data-dir {where}` issues")
        raise SystemExit(f"quickstart: {cert} or its key does not exist: `{maker} them")
    return endpoints, ClientTLS(ca_file=str(tls / "ca.crt"), cert_file=str(cert), key_file=str(key))


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="quickstart", description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("where", nargs="?", help="a `raftpoint cluster up` data dir, or comma-separated endpoints "
                        "(default: an in-process coordinator)")
    parser.add_argument("--identity", help="run as this agent identity of the data dir (tls/client-NAME.crt); "
                        "needs --group")
    parser.add_argument("--group", help="join this existing group instead of creating one of the run's own")
    args = parser.parse_args(argv)
    if args.identity is not None and args.group is None:
        parser.error("--identity needs --group: an agent identity may not create a group")
    if (args.identity or args.group) and args.where is None:
        parser.error("--identity and --group name a cluster's identity and group: name the cluster too")
    if args.identity is not None and not Path(args.where).is_dir():
        parser.error("--identity names a certificate in a `cluster up` data dir; given endpoints, "
                     "RAFTPOINT_CERT_FILE and RAFTPOINT_KEY_FILE name it")
    return args


def on_cluster(args: argparse.Namespace) -> dict:
    identity = args.identity or ADMIN
    endpoints, tls = cluster(args.where, identity, args.group)
    flags = f" --data-dir {args.where}" if tls is not None else ""  # how a raftpoint command finds the cluster
    if args.group is None:
        name = f"quickstart-{uuid.uuid4().hex[:8]}"
        with tempfile.TemporaryDirectory() as data_dir:
            state = run(endpoints, data_dir, tls, name)
        print(f"(group {name} stays on the cluster: `raftpoint group delete {name}{flags}` removes it once "
              "its agents' leases have run out, 10 s after this run)", file=sys.stderr)
        return state
    kept = Path(args.where) / "agents" / identity if tls is not None else None  # None: connect's default
    try:
        return run(endpoints, kept, tls, args.group, create=False)
    except GroupNotFound:
        raise SystemExit(f"quickstart: group {args.group!r} does not exist: `raftpoint group create {args.group} "
                         f"--mode bcs{flags}` creates it (as the cluster's admin)") from None


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    if args.where is None:
        with tempfile.TemporaryDirectory() as data_dir, testing.coordinator() as coordinator:
            print(run([coordinator.address], data_dir, coordinator.client_tls()))
        return
    try:
        print(on_cluster(args))
    # Refused (e.g. an agent id the identity's pattern excludes), no cluster answering, a
    # checkpoint whose blob is gone, or a group of another mode: one line, not a traceback.
    except (Rejected, CoordinatorUnavailable, RestoreFailed, ValueError) as exc:
        raise SystemExit(f"quickstart: {exc}") from None


if __name__ == "__main__":
    main()
