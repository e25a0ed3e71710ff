"""TLS flags of the commands that talk to a cluster (status, members, gc, chaos check).

Which settings a command uses, first found wins: --insecure; --ca-file/--cert-file/
--key-file/--server-name; RAFTPOINT_CA_FILE/CERT_FILE/KEY_FILE/SERVER_NAME/INSECURE;
the CA and admin certificate `raftpoint cluster up` keeps in <data-dir>/tls; the
system's trust store.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import grpc

from agent_client.connection import said
from coordinator.channels import CLIENT_ENV, ClientTLS
from coordinator.endpoint_diagnosis import diagnose
from coordinator.harness.local_cluster import ADMIN, TLS_DIR
from coordinator.harness.certs import CA_CERT, file_stem


def add_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TLS", "default: RAFTPOINT_CA_FILE, RAFTPOINT_CERT_FILE, RAFTPOINT_KEY_FILE; "
                                             "else the local cluster's files in <data-dir>/tls")
    group.add_argument("--ca-file", help="CA bundle the nodes' certificates are checked against")
    group.add_argument("--cert-file", help="client certificate (PEM), for clusters that require one")
    group.add_argument("--key-file", help="its private key (PEM)")
    group.add_argument("--server-name", help="name to check the node's certificate against")
    group.add_argument("--insecure", action="store_true", help="plaintext, for nodes run with --insecure")


def client_tls(args: argparse.Namespace) -> ClientTLS:
    """The settings the flags, the environment or the data dir give (module doc); raises
    ClientTLSError (a ValueError) for a contradictory set."""
    files = (args.ca_file, args.cert_file, args.key_file, args.server_name)
    if args.insecure:
        return ClientTLS(*files, insecure=True)
    if any(files):
        return ClientTLS(*files)
    if any(os.environ.get(name) for name in CLIENT_ENV):
        return ClientTLS.from_env()
    local = Path(getattr(args, "data_dir", None) or ".") / TLS_DIR
    if (local / CA_CERT).exists():
        cert = local / f"client-{file_stem(ADMIN)}.crt"
        if cert.exists():
            return ClientTLS(str(local / CA_CERT), str(cert), str(cert.with_suffix(".key")))
        return ClientTLS(str(local / CA_CERT))
    return ClientTLS()


def explain(endpoint: str, err: grpc.RpcError, tls: ClientTLS, data_dir: Path) -> str:
    """An RPC failure of `endpoint` in words: what a probe of it found when it cannot be
    used as configured (coordinator.endpoint_diagnosis), else the status."""
    if err.code() == grpc.StatusCode.UNAVAILABLE:
        finding = diagnose(endpoint, tls, data_dirs=(data_dir,))
        if finding is not None:
            return str(finding)
    return f"{endpoint}: {said(err)}"
