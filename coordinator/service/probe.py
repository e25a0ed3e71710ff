"""`python -m coordinator.service.probe [--service NAME]`: the node's own health check, over its TLS.

The kubelet probes the node's HTTP /readyz and /livez (observability/health_report.py);
this is the same check over gRPC, run by hand in the node's container: it reads the
node's settings (the same RAFTPOINT_* variables and config file the node reads), calls
grpc.health.v1 on the node's gRPC address with the node's own certificate as client
certificate, and exits 0 for SERVING, 1 for anything else (the reason on stderr).
"""
from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator import config
from coordinator.channels import ClientTLS, ClientTLSError
from coordinator.config import ConfigError
from coordinator.transport.tls import ServerTLS

PROG = "raftpoint probe"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--service", default="", help="health service name ('' = the whole node)")
    parser.add_argument("--timeout", type=float, default=2.0)
    args = parser.parse_args(argv)
    try:
        cfg = config.load()
        server_tls = ServerTLS.of(cfg)
        tls = ClientTLS.plaintext() if server_tls is None else server_tls.peer_client()
        with tls.channel(cfg.grpc_address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=args.service),
                                                              timeout=args.timeout)
    except (ConfigError, ClientTLSError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except grpc.RpcError as err:
        print(f"{PROG}: {cfg.grpc_address}: {err.code().name}: {err.details()}", file=sys.stderr)
        return 1
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        print(f"{PROG}: {args.service or 'node'}: {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
