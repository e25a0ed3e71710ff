"""Client TLS settings: `ClientTLS(ca_file=..., cert_file=..., key_file=..., server_name=...)`.

Passed as `tls=` to `connect()`, `connect_async()`, `AgentClient`, `AsyncAgentClient`
and `Connection`; without it they read RAFTPOINT_CA_FILE, RAFTPOINT_CERT_FILE,
RAFTPOINT_KEY_FILE, RAFTPOINT_SERVER_NAME and RAFTPOINT_INSECURE, and connect with TLS
and the system's trust store when none is set. The class lives beside the protocol
code both sides share (a node calls its peers with the same rules).
"""
from __future__ import annotations

from coordinator.channels import CA_FILE_ENV, CERT_FILE_ENV, INSECURE_ENV, KEY_FILE_ENV, SERVER_NAME_ENV, ClientTLS, \
    ClientTLSError, environment

__all__ = ["ClientTLS", "ClientTLSError", "environment", "CA_FILE_ENV", "CERT_FILE_ENV", "KEY_FILE_ENV", "SERVER_NAME_ENV",
           "INSECURE_ENV"]
