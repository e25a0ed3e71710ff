"""One Jepsen process talking to the cluster: every call it makes goes into the history.

Outcomes are what a client can actually know. A response is `ok`. A refusal the
coordinator decided (validation or the state machine, recorded under the request
id) is `fail`: definitely not applied. Anything else -- no leader within the
deadline, a transport error, an unexpected status -- is `info`: the request may
still have been applied, and only a retry with the same request id can tell.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import grpc

from agent_client.connection import Connection, CoordinatorUnavailable, Rejected, token_from_env
from chaos.history import FAIL, INFO, OK, History, Op
from coordinator.channels import ClientTLS
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.harness.local_cluster import harness_access

# Codes only the coordinator's own checks answer with. INTERNAL is not here: a
# transport can produce it too, so it proves nothing about the request.
DEFINITE = frozenset({grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.INVALID_ARGUMENT,
                      grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS,
                      grpc.StatusCode.RESOURCE_EXHAUSTED})


@dataclass(frozen=True)
class Request:
    """One request as a workload sends it (again, for a retry) and records it: `value`
    describes it (with the request id as "rid"), `answer` extracts the response's
    essential fields for the completion."""

    f: str
    service: str
    method: str
    message: Any
    value: dict[str, Any]
    answer: Callable[[Any], Any] = lambda response: None
    window: float | None = None  # a server stream, read for this long

    @property
    def group(self) -> str:
        return self.value.get("group", "")


@dataclass(frozen=True)
class Outcome:
    type: str
    response: Any
    invoke: Op
    error: str | None = None
    reason_code: int = pb.REASON_UNSPECIFIED  # of a refusal: what the coordinator said was wrong

    @property
    def ok(self) -> bool:
        return self.type == OK

    def refused(self, code: str, *reasons: int) -> bool:
        """A definite refusal with this status code and, when `reasons` are given, one of
        these reason codes."""
        return (self.type == FAIL and self.error is not None and self.error.startswith(code + ":")
                and (not reasons or self.reason_code in reasons))


class RecordingClient:
    """A Connection of its own (so `node` is the endpoint that answered this process)
    and at most one open operation, as a Jepsen process."""

    def __init__(self, history: History, process: str, endpoints: Sequence[str], *,
                 deadline: float, rpc_timeout: float, token: str | None = None,
                 tls: ClientTLS | None = None) -> None:
        """`token`: default, the admin token of the harness cluster at `endpoints`, else
        the one $RAFTPOINT_TOKEN_FILE names (a cluster someone else runs)."""
        self.history = history
        self.process = process
        access = harness_access(endpoints)
        token = token or (access[0] if access else token_from_env())
        self.conn = Connection(endpoints, deadline=deadline, rpc_timeout=rpc_timeout, token=token, tls=tls)

    def send(self, request: Request, retry_of: int | None = None) -> Outcome:
        """Invoke, call (a unary RPC, or the items a stream yields within its window),
        complete. `retry_of`: the index of the invoke op this request was first sent with."""
        value = request.value if retry_of is None else {**request.value, "retry_of": retry_of}
        invoked = self.history.invoke(self.process, request.f, value, node=self.conn.target)
        try:
            if request.window is None:
                response = self.conn.call(request.service, request.method, request.message)
            else:
                response = self.conn.collect(request.service, request.method, request.message, window=request.window)
        except Rejected as exc:
            kind = FAIL if exc.code in DEFINITE else INFO
            return self._complete(invoked, kind, None, f"{exc.code.name}: {exc.reason}", reason_code=exc.reason_code)
        except CoordinatorUnavailable as exc:
            return self._complete(invoked, INFO, None, f"UNAVAILABLE: {exc}")
        except Exception as exc:  # an unknown outcome, never a reason to stop the process
            return self._complete(invoked, INFO, None, f"{type(exc).__name__}: {exc}")
        try:
            extracted = request.answer(response)
        except Exception as exc:  # a malformed answer is an observation too
            return self._complete(invoked, INFO, None, f"unreadable answer: {type(exc).__name__}: {exc}")
        return self._complete(invoked, OK, response, None, extracted)

    def _complete(self, invoked: Op, kind: str, response: Any, error: str | None, extracted: Any = None, *,
                  reason_code: int = pb.REASON_UNSPECIFIED) -> Outcome:
        self.history.complete(self.process, kind, extracted, node=self.conn.target, error=error)
        return Outcome(kind, response, invoked, error, reason_code)

    def close(self) -> None:
        self.conn.close()
