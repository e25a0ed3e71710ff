"""A leader-following, retrying gRPC connection to the coordinator cluster (sync and asyncio).

Writes are retried with the *same* request (and so the same request_id): the
coordinator answers a retried id from its dedupe table, so "outcome unknown"
after a leader change is always safe to retry. Only UNAVAILABLE,
DEADLINE_EXCEEDED and an overloaded node's RESOURCE_EXHAUSTED (REASON_OVERLOADED,
which did nothing) are retried, the last no sooner than the node's retry hint; a
rejection is final and raised as Rejected.
The backoff (exponential, full jitter, overall deadline) is tenacity's, so the
policy is one declaration instead of a hand-written loop.
"""
from __future__ import annotations

import os
import random
import threading
import time
from typing import Any, Awaitable, Callable, Iterator, Sequence, TypeVar

import grpc
from tenacity import (AsyncRetrying, RetryCallState, RetryError, Retrying, retry_if_exception, stop_after_delay,
                      wait_random_exponential)

from coordinator.api.metadata import (ISSUED_AT_METADATA_KEY, LEADER_METADATA_KEY, REASON_METADATA_KEY,
                                      RETRY_AFTER_METADATA_KEY, bearer, parse_reason, parse_retry_after)
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.api.v1 import coordinator_pb2_grpc as pb_grpc
from coordinator.channels import ClientTLS, handshake_failed, resolve

T = TypeVar("T")
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
BACKOFF = dict(multiplier=0.02, max=0.25)  # a leader election takes ~1 s: poll it finely
# Each connection gets TCP connections of its own: gRPC otherwise shares one per target
# across a process, and a node serves a bounded number of calls on one
# (ServerLimits.max_streams_per_connection), so one agent too many in a process would
# have its session wait forever.
CHANNEL_OPTIONS = (("grpc.use_local_subchannel_pool", 1),)


class CoordinatorUnavailable(Exception):
    """No leader answered within the deadline (the request may or may not have applied;
    retrying it with the same request_id is safe)."""


class TLSHandshakeFailed(CoordinatorUnavailable):
    """The TLS handshake with the node failed: the CA does not match the node's
    certificate, the node requires a client certificate (or refused this one), or one
    side speaks plaintext. Not retried: nothing changes by trying again. Nothing was applied."""


class Rejected(Exception):
    """The coordinator refused the request. Not retried: the same request would be
    refused again. Decide on `reason_code` (a ReasonCode of the proto; UNSPECIFIED
    when the status carried none); `reason` is the human-readable text, for people."""

    def __init__(self, code: grpc.StatusCode, reason: str, reason_code: int = pb.REASON_UNSPECIFIED) -> None:
        super().__init__(f"{code.name}: {reason}")
        self.code = code
        self.reason = reason
        self.reason_code = reason_code

    @property
    def reason_name(self) -> str:
        return pb.ReasonCode.Name(self.reason_code)


def issued_now() -> tuple[tuple[str, str], ...]:
    """Metadata stamping a write with the time it was first sent, repeated on every
    retry: the coordinator deduplicates by request id for a window measured from it,
    and refuses a retry older than that rather than risk applying it twice."""
    return ((ISSUED_AT_METADATA_KEY, repr(time.time())),)


def overload_hint(exc: BaseException) -> float | None:
    """Seconds an overloaded node asked us to wait before trying again; None when `exc`
    is not its refusal (a RESOURCE_EXHAUSTED without REASON_OVERLOADED, such as a
    dependency quota, is final). A refusal without a usable hint waits the backoff only."""
    if not (isinstance(exc, grpc.RpcError) and exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            and parse_reason(_trailer(exc, REASON_METADATA_KEY)) == pb.REASON_OVERLOADED):
        return None
    return parse_retry_after(_trailer(exc, RETRY_AFTER_METADATA_KEY)) or 0.0


# Names the file with the bearer token, for programs that take no token argument.
TOKEN_FILE_ENV = "RAFTPOINT_TOKEN_FILE"


def token_from_env() -> str | None:
    """The token the file named by $RAFTPOINT_TOKEN_FILE holds; None when it is not set."""
    path = os.environ.get(TOKEN_FILE_ENV)
    return read_token_file(path) if path else None


def read_token_file(path: str) -> str:
    """A bearer token kept in a file (its first line), as `--token-file` names it."""
    with open(path, encoding="utf-8") as f:
        token = f.readline().strip()
    if not token:
        raise ValueError(f"token file {path!r} is empty")
    return token


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, grpc.RpcError) and ((exc.code() in RETRYABLE and not handshake_failed(exc))
                                                or overload_hint(exc) is not None)


_backoff = wait_random_exponential(**BACKOFF)


def _wait(state: RetryCallState) -> float:
    """The backoff, or the overloaded node's hint (spread_hint) when longer: clients told
    to come back together must not all come back at the same instant."""
    failed = state.outcome.exception() if state.outcome is not None else None
    hint = overload_hint(failed) if failed is not None else None
    return max(_backoff(state), spread_hint(hint))


def spread_hint(hint: float | None) -> float:
    """An overloaded node's retry hint, spread over 1-1.5x (0 without a hint)."""
    return (hint or 0.0) * random.uniform(1.0, 1.5)


def _policy(deadline: float) -> dict[str, Any]:
    return dict(retry=retry_if_exception(_retryable), reraise=False, wait=_wait, stop=stop_after_delay(deadline))


def _translate(exc: BaseException, what: str) -> Exception:
    if isinstance(exc, RetryError):
        return CoordinatorUnavailable(f"{what}: no leader answered: {exc.last_attempt.exception()}")
    assert isinstance(exc, grpc.RpcError)
    if handshake_failed(exc):
        return TLSHandshakeFailed(f"{what}: TLS handshake failed (check the CA file, the client certificate and "
                                  f"whether the node runs --insecure): {exc.details()}")
    return Rejected(exc.code(), exc.details() or "", parse_reason(_trailer(exc, REASON_METADATA_KEY)))


def _trailer(err: grpc.RpcError, key: str) -> str | None:
    try:
        return dict(err.trailing_metadata() or ()).get(key)
    except Exception:  # some aio errors carry no metadata object
        return None


class _Targets:
    """Which node to talk to next: where a follower said the leader is, else round robin."""

    def __init__(self, endpoints: Sequence[str], token: str | None = None) -> None:
        if not endpoints:
            raise ValueError("at least one coordinator endpoint is required")
        # Sent with every call: the coordinator maps the token to an identity and its role.
        self.credentials: tuple[tuple[str, str], ...] = bearer(token)
        self.endpoints = list(endpoints)
        self.target = self.endpoints[0]
        self._lock = threading.Lock()

    def redirect(self, err: grpc.RpcError) -> None:
        self.follow(_trailer(err, LEADER_METADATA_KEY))

    def follow(self, leader: str | None) -> None:
        """Go to `leader` when a node named it, else to the next node."""
        with self._lock:
            if leader:
                if leader not in self.endpoints:
                    self.endpoints.append(leader)
                self.target = leader
            else:
                i = self.endpoints.index(self.target) if self.target in self.endpoints else -1
                self.target = self.endpoints[(i + 1) % len(self.endpoints)]


    def window_closed(self, err: grpc.RpcError) -> bool:
        """A stream collected for a window ended with `err`: True if the window simply
        closed (keep what came); otherwise follow a moved leader and let the caller raise."""
        if err.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            return True
        if err.code() in RETRYABLE:
            self.redirect(err)
        return False


class Connection(_Targets):
    """Blocking client; thread-safe (channels are shared, one per node).

    `tls`: what to trust and which certificate to show (agent_client.tls.ClientTLS);
    None reads RAFTPOINT_CA_FILE/CERT_FILE/KEY_FILE/INSECURE, and without them
    connects with TLS and the system's trust store. Plaintext only with
    ClientTLS.plaintext() (or RAFTPOINT_INSECURE=1), for a node run with --insecure.
    `token`: the bearer token that names the caller, for nodes that take tokens."""

    def __init__(self, endpoints: Sequence[str], *, deadline: float = 30.0, rpc_timeout: float = 5.0,
                 token: str | None = None, tls: ClientTLS | None = None) -> None:
        super().__init__(endpoints, token)
        self.tls = resolve(tls)
        self.deadline = deadline
        self.rpc_timeout = rpc_timeout
        self._channels: dict[str, grpc.Channel] = {}

    @property
    def _target(self) -> str:  # kept for callers that read the current node
        return self.target

    def _stub(self, service: str, target: str) -> Any:
        with self._lock:
            channel = self._channels.get(target)
            if channel is None:
                channel = self._channels[target] = self.tls.channel(target, CHANNEL_OPTIONS)
        return getattr(pb_grpc, f"{service}Stub")(channel)

    def call(self, service: str, method: str, request: Any, *, deadline: float | None = None) -> Any:
        metadata = issued_now() + self.credentials

        def attempt() -> Any:
            try:
                return getattr(self._stub(service, self.target), method)(request, timeout=self.rpc_timeout,
                                                                         metadata=metadata)
            except grpc.RpcError as err:
                if err.code() in RETRYABLE:
                    self.redirect(err)
                raise

        return self._with_retries(attempt, f"{service}.{method}", self.deadline if deadline is None else deadline)

    def collect(self, service: str, method: str, request: Any, *, window: float) -> list[Any]:
        """Items a server stream yields within `window` seconds (from the leader)."""
        def attempt() -> list[Any]:
            items: list[Any] = []
            try:
                for item in getattr(self._stub(service, self.target), method)(request, timeout=window,
                                                                                metadata=self.credentials):
                    items.append(item)
            except grpc.RpcError as err:
                if not self.window_closed(err):
                    raise
            return items

        return self._with_retries(attempt, f"{service}.{method}", self.deadline)

    def stream(self, service: str, method: str, request: Any, *, timeout: float) -> tuple[Any, Iterator[Any]]:
        """Open a server stream on the current target, without retries: the caller (a
        watcher loop) reconnects. Returns (call, iterator); call.cancel() ends it.
        A RETRYABLE error from the iterator should be passed to redirect()."""
        call = getattr(self._stub(service, self.target), method)(request, timeout=timeout, metadata=self.credentials)
        return call, call

    @staticmethod
    def _with_retries(attempt: Callable[[], T], what: str, deadline: float) -> T:
        try:
            return Retrying(**_policy(deadline))(attempt)
        except (RetryError, grpc.RpcError) as exc:
            raise _translate(exc, what) from None

    def close(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncConnection(_Targets):
    """The asyncio twin of Connection (grpc.aio channels, tenacity's AsyncRetrying).
    Use from one event loop; `tls` as for Connection."""

    def __init__(self, endpoints: Sequence[str], *, deadline: float = 30.0, rpc_timeout: float = 5.0,
                 token: str | None = None, tls: ClientTLS | None = None) -> None:
        super().__init__(endpoints, token)
        self.tls = resolve(tls)
        self.deadline = deadline
        self.rpc_timeout = rpc_timeout
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, service: str, target: str) -> Any:
        channel = self._channels.get(target)
        if channel is None:
            channel = self._channels[target] = self.tls.aio_channel(target, CHANNEL_OPTIONS)
        return getattr(pb_grpc, f"{service}Stub")(channel)

    async def call(self, service: str, method: str, request: Any, *, deadline: float | None = None) -> Any:
        metadata = issued_now() + self.credentials

        async def attempt() -> Any:
            try:
                return await getattr(self._stub(service, self.target), method)(
                    request, timeout=self.rpc_timeout, metadata=metadata)
            except grpc.RpcError as err:
                if err.code() in RETRYABLE:
                    self.redirect(err)
                raise

        return await self._with_retries(attempt, f"{service}.{method}", self.deadline if deadline is None else deadline)

    async def collect(self, service: str, method: str, request: Any, *, window: float) -> list[Any]:
        """Items a server stream yields within `window` seconds (from the leader)."""
        async def attempt() -> list[Any]:
            items: list[Any] = []
            try:
                async for item in getattr(self._stub(service, self.target), method)(request, timeout=window,
                                                                                metadata=self.credentials):
                    items.append(item)
            except grpc.RpcError as err:
                if not self.window_closed(err):
                    raise
            return items

        return await self._with_retries(attempt, f"{service}.{method}", self.deadline)

    def stream(self, service: str, method: str, request: Any, *, timeout: float) -> Any:
        """Open a server stream on the current target, without retries (the caller's
        watcher loop reconnects): an async iterable call; call.cancel() ends it."""
        return getattr(self._stub(service, self.target), method)(request, timeout=timeout, metadata=self.credentials)

    @staticmethod
    async def _with_retries(attempt: Callable[[], Awaitable[T]], what: str, deadline: float) -> T:
        try:
            return await AsyncRetrying(**_policy(deadline))(attempt)
        except (RetryError, grpc.RpcError) as exc:
            raise _translate(exc, what) from None

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()

    async def __aenter__(self) -> "AsyncConnection":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
