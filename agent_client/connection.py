"""A leader-following, retrying gRPC connection to the coordinator cluster.

Writes are retried with the *same* request (and so the same request_id): the
coordinator answers a retried id from its dedupe table, so "outcome unknown"
after a leader change is always safe to retry. Only UNAVAILABLE and
DEADLINE_EXCEEDED are retried; a rejection is final and raised as Rejected.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Sequence, TypeVar

import grpc
from tenacity import RetryError, Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc

T = TypeVar("T")
LEADER_METADATA_KEY = "raftpoint-leader"
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class CoordinatorUnavailable(Exception):
    """No leader answered within the deadline."""


class Rejected(Exception):
    """The coordinator refused the request; `code` and `reason` say why."""

    def __init__(self, code: grpc.StatusCode, reason: str) -> None:
        super().__init__(f"{code.name}: {reason}")
        self.code = code
        self.reason = reason


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, grpc.RpcError) and exc.code() in RETRYABLE


class Connection:
    def __init__(self, endpoints: Sequence[str], *, deadline: float = 30.0, rpc_timeout: float = 5.0) -> None:
        if not endpoints:
            raise ValueError("at least one coordinator endpoint is required")
        self.endpoints = list(endpoints)
        self.deadline = deadline
        self.rpc_timeout = rpc_timeout
        self._target = self.endpoints[0]
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()

    def _stub(self, service: str, target: str) -> Any:
        with self._lock:
            channel = self._channels.get(target)
            if channel is None:
                channel = self._channels[target] = grpc.insecure_channel(target)
        return getattr(pb_grpc, f"{service}Stub")(channel)

    def _redirect(self, err: grpc.RpcError) -> None:
        """Go where the node said the leader is, else try the next endpoint."""
        leader = dict(err.trailing_metadata() or ()).get(LEADER_METADATA_KEY)
        with self._lock:
            if leader:
                if leader not in self.endpoints:
                    self.endpoints.append(leader)
                self._target = leader
            else:
                i = self.endpoints.index(self._target) if self._target in self.endpoints else -1
                self._target = self.endpoints[(i + 1) % len(self.endpoints)]

    def call(self, service: str, method: str, request: Any, *, deadline: float | None = None) -> Any:
        def attempt() -> Any:
            target = self._target
            try:
                return getattr(self._stub(service, target), method)(request, timeout=self.rpc_timeout)
            except grpc.RpcError as err:
                if err.code() in RETRYABLE:
                    self._redirect(err)
                raise

        return self._with_retries(attempt, f"{service}.{method}", self.deadline if deadline is None else deadline)

    def collect(self, service: str, method: str, request: Any, *, window: float) -> list[Any]:
        """Items a server stream yields within `window` seconds (from the leader)."""
        def attempt() -> list[Any]:
            items: list[Any] = []
            try:
                for item in getattr(self._stub(service, self._target), method)(request, timeout=window):
                    items.append(item)
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    return items
                if err.code() in RETRYABLE:
                    self._redirect(err)
                raise
            return items

        return self._with_retries(attempt, f"{service}.{method}", self.deadline)

    @staticmethod
    def _with_retries(attempt: Callable[[], T], what: str, deadline: float) -> T:
        retrying = Retrying(retry=retry_if_exception(_retryable), reraise=False,
                            wait=wait_random_exponential(multiplier=0.02, max=0.25), stop=stop_after_delay(deadline))
        try:
            return retrying(attempt)
        except RetryError as exc:
            raise CoordinatorUnavailable(f"{what}: no leader answered: {exc.last_attempt.exception()}") from None
        except grpc.RpcError as err:
            raise Rejected(err.code(), err.details() or "") from None

    def close(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
