"""Identifier rules shared by the coordinator and agent_client.

Ids become parts of storage keys and metric labels, so they are restricted to a
small, printable alphabet: a bad id is rejected at the edge instead of producing
an ambiguous key deep inside the state machine. Every pattern is matched with
fullmatch: `$` also matches before a trailing newline, which made `a` and `a\n`
two different agents.
"""
from __future__ import annotations

import ipaddress
import re

from coordinator.core.errors import Rejection, shown

MAX_URI_LEN = 2048
MAX_REQUEST_ID_CHARS = 128
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,%d}" % MAX_REQUEST_ID_CHARS)
_HEX64_RE = re.compile(r"[0-9a-f]{64}")
_CONTROL_RE = re.compile(r"[\x00-\x1f]")
# One DNS label (RFC 1035 lengths; `_` allowed, as service names use it); a name's length.
_LABEL_RE = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_MAX_HOST_CHARS = 253


def check_id(value: str, field: str) -> None:
    """Agent, group and message ids: 1-128 chars of [A-Za-z0-9._:-], not starting with punctuation."""
    if not isinstance(value, str) or not _ID_RE.fullmatch(value):
        raise Rejection.invalid(field, f"must be 1-128 characters of A-Z a-z 0-9 . _ : - starting with a letter or digit, got {shown(value)}")


def check_request_id(value: str) -> None:
    if not isinstance(value, str) or not _REQUEST_ID_RE.fullmatch(value):
        raise Rejection.invalid("request_id", f"must be 1-128 characters of A-Z a-z 0-9 . _ : -, got {shown(value)}")


def check_sha256(value: str, field: str) -> None:
    if not isinstance(value, str) or not _HEX64_RE.fullmatch(value):
        raise Rejection.invalid(field, "must be 64 lowercase hex digits (a SHA-256 digest)")


def check_uri(value: str, field: str, *, required: bool) -> None:
    if not value:
        if required:
            raise Rejection.invalid(field, "is required")
        return
    if len(value) > MAX_URI_LEN or _CONTROL_RE.search(value):
        raise Rejection.invalid(field, f"must be at most {MAX_URI_LEN} printable characters")


def check_address(value: str, field: str) -> None:
    """host:port, as node addresses are written everywhere (config, membership changes).

    The host is an IP address (IPv6 optionally in brackets) or a DNS name the resolver
    can encode: ASCII labels of 1-63 characters, at most 253 in all. A longer label made
    the resolver's IDNA codec raise UnicodeError wherever the address was first dialled."""
    host, sep, port = value.rpartition(":") if isinstance(value, str) else ("", "", "")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not _is_host(host):
        raise Rejection.invalid(field, f"must be host:port, the host an IP address or a DNS name of labels of "
                                       f"1-63 characters of A-Z a-z 0-9 - _, got {shown(value)}")


def _is_host(host: str) -> bool:
    literal = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(literal)
        return True
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host  # a fully qualified name's root dot
    return len(name) <= _MAX_HOST_CHARS and all(_LABEL_RE.fullmatch(label) for label in name.split("."))
