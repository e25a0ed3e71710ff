"""A leader-following, retrying gRPC connection to the coordinator cluster (sync and asyncio).

Writes are retried with the *same* request (and so the same request_id): the
coordinator answers a retried id from its dedupe table, so "outcome unknown"
after a leader change is always safe to retry. Only UNAVAILABLE,
DEADLINE_EXCEEDED and an overloaded node's RESOURCE_EXHAUSTED (REASON_OVERLOADED,
which did nothing) are retried, the last no sooner than the node's retry hint; a
rejection is final and raised as Rejected.

A node that is down or restarting is retried until the deadline, but an address
that can never work is not: when a connection fails, the endpoint is probed
directly (coordinator.endpoint_diagnosis), and once every endpoint has shown
something no retry changes (a CA that did not sign the node's certificate, a
missing or refused client certificate, plaintext against TLS, a Raft port given as
the gRPC port), TLSHandshakeFailed says so and what to check, within about a second.
The backoff (exponential, full jitter, overall deadline) is tenacity's, so the
policy is one declaration instead of a hand-written loop.
"""
from __future__ import annotations

import asyncio
import math
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
from coordinator import tracing
from coordinator.channels import ClientTLS, resolve
from coordinator.endpoint_diagnosis import Misconfigured, diagnose, summary
from coordinator.endpoints_file import DEFAULT_DATA_DIR

T = TypeVar("T")
ClusterDirs = Sequence[str | os.PathLike[str]]  # data dirs of `raftpoint cluster up`, read for endpoints.json
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
BACKOFF = dict(multiplier=0.02, max=0.25)  # a leader election takes ~1 s: poll it finely
# Each connection gets TCP connections of its own: gRPC otherwise shares one per target
# across a process, and a node serves a bounded number of calls on one
# (ServerLimits.max_streams_per_connection), so one agent too many in a process would
# have its session wait forever.
CHANNEL_OPTIONS = (("grpc.use_local_subchannel_pool", 1),)
# An endpoint whose connection failed is probed at most this often (per connection),
# each probe giving up on an unresponsive peer after PROBE_TIMEOUT_S.
PROBE_EVERY_S = 1.0
PROBE_TIMEOUT_S = 1.0
# Every endpoint must have shown its finding within this long for the retries to end:
# one an endpoint showed long ago (and that may have been fixed since) is not counted.
FINDING_FRESH_S = 5.0


class CoordinatorUnavailable(Exception):
    """No leader answered within the deadline (the request may or may not have applied;
    retrying it with the same request_id is safe)."""


class TLSHandshakeFailed(CoordinatorUnavailable):
    """No endpoint can be used as configured: each one showed a direct probe that the
    CA does not match the node's certificate, the node requires a client certificate
    (or refused this one), one side speaks plaintext, or it is no gRPC port (a node's
    Raft or metrics port). Raised as soon as every endpoint has shown it, not at the
    deadline: nothing changes by trying again. Nothing was applied. `findings`: per
    endpoint, what it showed and what to check (the message says the same)."""

    def __init__(self, message: str, findings: Sequence[Misconfigured] = ()) -> None:
        super().__init__(message)
        self.findings = list(findings)


def every_endpoint_misconfigured(what: str, findings: Sequence[Misconfigured]) -> TLSHandshakeFailed:
    return TLSHandshakeFailed(f"{what}: no endpoint can be used as configured, and trying again will not "
                              f"change that: {summary(findings)}", findings)


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
    return isinstance(exc, grpc.RpcError) and (exc.code() in RETRYABLE or overload_hint(exc) is not None)


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


def _translate(exc: BaseException, what: str, findings: Sequence[Misconfigured]) -> Exception:
    """The caller's exception for how the retries ended; `findings`: what probes of the
    endpoints found so far (said at the deadline too: some endpoints may be wrong while
    others are down)."""
    if isinstance(exc, RetryError):
        found = f"; {summary(findings)}" if findings else ""
        return CoordinatorUnavailable(f"{what}: no leader answered: {said(exc.last_attempt.exception())}{found}")
    assert isinstance(exc, grpc.RpcError)
    return Rejected(exc.code(), exc.details() or "", parse_reason(_trailer(exc, REASON_METADATA_KEY)))


def said(exc: BaseException | None) -> str:
    """What a failed call said, on one line: a status and its details (gRPC's own text
    of an error spans several lines and repeats itself)."""
    if isinstance(exc, grpc.RpcError) and callable(getattr(exc, "code", None)):
        return f"{exc.code().name}: {exc.details() or ''}".rstrip(": ")
    return " ".join(str(exc).split())


def _trailer(err: grpc.RpcError, key: str) -> str | None:
    try:
        # grpc gives (key, value) pairs, which its stubs type as objects with .key and .value
        return dict(err.trailing_metadata() or ()).get(key)  # type: ignore[arg-type, call-overload]
    except Exception:  # some aio errors carry no metadata object
        return None


class _Targets:
    """Which node to talk to next: where a follower said the leader is, else round robin;
    and what probing the endpoints that failed to connect found (the rule that ends
    the retries early: every endpoint found misconfigured)."""

    def __init__(self, endpoints: Sequence[str], token: str | None = None, tls: ClientTLS | None = None,
                 cluster_dirs: ClusterDirs = (DEFAULT_DATA_DIR,)) -> None:
        if not endpoints:
            raise ValueError("at least one coordinator endpoint is required")
        # Sent with every call: the coordinator maps the token to an identity and its role.
        self.credentials: tuple[tuple[str, str], ...] = bearer(token)
        self.tls = resolve(tls)
        self.endpoints = list(endpoints)
        self.target = self.endpoints[0]
        self.cluster_dirs = tuple(cluster_dirs)
        self._lock = threading.Lock()
        self._findings: dict[str, tuple[float, Misconfigured | None]] = {}  # endpoint -> (when, finding)
        self._probed: dict[str, float] = {}

    def probe_due(self, target: str, err: grpc.RpcError) -> bool:
        """Whether `err` from `target` calls for a probe of it: UNAVAILABLE that names no
        leader (a failed connection, or a node without a leader, which the probe finds
        answering) and no probe of `target` within PROBE_EVERY_S."""
        if err.code() != grpc.StatusCode.UNAVAILABLE or _trailer(err, LEADER_METADATA_KEY):
            return False
        now = time.monotonic()
        with self._lock:
            if now - self._probed.get(target, -math.inf) < PROBE_EVERY_S:
                return False
            self._probed[target] = now
        return True

    def probe(self, target: str) -> Misconfigured | None:
        """Blocking: at most a few times PROBE_TIMEOUT_S."""
        return diagnose(target, self.tls, timeout=PROBE_TIMEOUT_S, data_dirs=self.cluster_dirs)

    def found(self, target: str, finding: Misconfigured | None, what: str) -> None:
        """Record what a probe of `target` found; raise TLSHandshakeFailed once every
        endpoint has a finding from the last FINDING_FRESH_S. A refused or silent
        endpoint has none: a node that is down keeps the retries going while any
        endpoint might still answer."""
        now = time.monotonic()
        with self._lock:
            self._findings[target] = (now, finding)
            fresh = [self._fresh(e, now) for e in self.endpoints]
        if all(fresh):
            raise every_endpoint_misconfigured(what, [f for f in fresh if f is not None])

    def _fresh(self, endpoint: str, now: float) -> Misconfigured | None:
        when, finding = self._findings.get(endpoint, (-math.inf, None))
        return finding if now - when <= FINDING_FRESH_S else None

    def answered(self, target: str) -> None:
        """`target` answered a call: whatever a probe found there no longer holds."""
        if target in self._findings:
            with self._lock:
                self._findings.pop(target, None)

    def findings(self) -> list[Misconfigured]:
        with self._lock:
            return [f for _, f in self._findings.values() if f is not None]

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
    `token`: the bearer token that names the caller, for nodes that take tokens.
    `cluster_dirs`: data dirs of `raftpoint cluster up` whose endpoints.json may name
    an endpoint given by mistake (a node's Raft or metrics port) in TLSHandshakeFailed."""

    def __init__(self, endpoints: Sequence[str], *, deadline: float = 30.0, rpc_timeout: float = 5.0,
                 token: str | None = None, tls: ClientTLS | None = None,
                 cluster_dirs: ClusterDirs = (DEFAULT_DATA_DIR,)) -> None:
        super().__init__(endpoints, token, tls, cluster_dirs)
        self.deadline = deadline
        self.rpc_timeout = rpc_timeout
        self._channels: dict[str, grpc.Channel] = {}
        # A stub builds a callable per method of its service: built once per channel,
        # not per call (a tenth of a millisecond each).
        self._stubs: dict[tuple[str, str], Any] = {}

    @property
    def _target(self) -> str:  # kept for callers that read the current node
        return self.target

    def _stub(self, service: str, target: str) -> Any:
        with self._lock:
            stub = self._stubs.get((service, target))
            if stub is None:
                channel = self._channels.get(target)
                if channel is None:
                    channel = self._channels[target] = self.tls.channel(target, CHANNEL_OPTIONS)
                stub = self._stubs[(service, target)] = getattr(pb_grpc, f"{service}Stub")(channel)
        return stub

    def call(self, service: str, method: str, request: Any, *, deadline: float | None = None) -> Any:
        metadata = issued_now() + self.credentials + tuple(tracing.context_to_send().items())
        return self._retried(service, method, lambda rpc: rpc(request, timeout=self.rpc_timeout, metadata=metadata),
                             deadline)

    def fetch(self, service: str, method: str, request: Any, consume: Callable[[Iterator[Any]], T], *,
              timeout: float) -> T:
        """consume(a server stream's items): the whole stream, retried from its start on
        another node as `call` is retried, when it fails retryably before it ends."""
        return self._retried(service, method,
                             lambda rpc: consume(rpc(request, timeout=timeout, metadata=self.credentials)), None)

    def _retried(self, service: str, method: str, invoke: Callable[[Any], T], deadline: float | None) -> T:
        """invoke(the method's stub callable on the current target), with the retries,
        redirects and endpoint diagnosis of every call."""
        def attempt() -> T:
            target = self.target
            try:
                answer = invoke(getattr(self._stub(service, target), method))
            except grpc.RpcError as err:
                if err.code() in RETRYABLE:
                    self.check(target, err, f"{service}.{method}")
                    self.redirect(err)
                raise
            self.answered(target)
            return answer

        return self._with_retries(attempt, f"{service}.{method}", self.deadline if deadline is None else deadline)

    def collect(self, service: str, method: str, request: Any, *, window: float) -> list[Any]:
        """Items a server stream yields within `window` seconds (from the leader)."""
        def attempt() -> list[Any]:
            items: list[Any] = []
            target = self.target
            try:
                for item in getattr(self._stub(service, target), method)(request, timeout=window,
                                                                           metadata=self.credentials):
                    items.append(item)
            except grpc.RpcError as err:
                if not self.window_closed(err):
                    self.check(target, err, f"{service}.{method}")
                    raise
            return items

        return self._with_retries(attempt, f"{service}.{method}", self.deadline)

    def stream(self, service: str, method: str, request: Any, *, timeout: float) -> tuple[Any, Iterator[Any]]:
        """Open a server stream on the current target, without retries: the caller (a
        watcher loop) reconnects. Returns (call, iterator); call.cancel() ends it.
        A RETRYABLE error from the iterator should be passed to redirect()."""
        call = getattr(self._stub(service, self.target), method)(request, timeout=timeout, metadata=self.credentials)
        return call, call

    def check(self, target: str, err: grpc.RpcError, what: str) -> None:
        """After `err` from `target`: probe it if due; raise TLSHandshakeFailed once every
        endpoint has shown something no retry changes (tenacity re-raises it at once:
        it is no RpcError)."""
        if self.probe_due(target, err):
            self.found(target, self.probe(target), what)

    def _with_retries(self, attempt: Callable[[], T], what: str, deadline: float) -> T:
        try:
            return Retrying(**_policy(deadline))(attempt)
        except (RetryError, grpc.RpcError) as exc:
            raise _translate(exc, what, self.findings()) from None

    def close(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()
            self._stubs.clear()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncConnection(_Targets):
    """The asyncio twin of Connection (grpc.aio channels, tenacity's AsyncRetrying).
    Use from one event loop; `tls` and `cluster_dirs` as for Connection."""

    def __init__(self, endpoints: Sequence[str], *, deadline: float = 30.0, rpc_timeout: float = 5.0,
                 token: str | None = None, tls: ClientTLS | None = None,
                 cluster_dirs: ClusterDirs = (DEFAULT_DATA_DIR,)) -> None:
        super().__init__(endpoints, token, tls, cluster_dirs)
        self.deadline = deadline
        self.rpc_timeout = rpc_timeout
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, service: str, target: str) -> Any:
        channel = self._channels.get(target)
        if channel is None:
            channel = self._channels[target] = self.tls.aio_channel(target, CHANNEL_OPTIONS)
        return getattr(pb_grpc, f"{service}Stub")(channel)

    async def call(self, service: str, method: str, request: Any, *, deadline: float | None = None) -> Any:
        metadata = issued_now() + self.credentials + tuple(tracing.context_to_send().items())

        async def attempt() -> Any:
            target = self.target
            try:
                answer = await getattr(self._stub(service, target), method)(
                    request, timeout=self.rpc_timeout, metadata=metadata)
            except grpc.RpcError as err:
                if err.code() in RETRYABLE:
                    await self.check(target, err, f"{service}.{method}")
                    self.redirect(err)
                raise
            self.answered(target)
            return answer

        return await self._with_retries(attempt, f"{service}.{method}", self.deadline if deadline is None else deadline)

    async def collect(self, service: str, method: str, request: Any, *, window: float) -> list[Any]:
        """Items a server stream yields within `window` seconds (from the leader)."""
        async def attempt() -> list[Any]:
            items: list[Any] = []
            target = self.target
            try:
                async for item in getattr(self._stub(service, target), method)(request, timeout=window,
                                                                                 metadata=self.credentials):
                    items.append(item)
            except grpc.RpcError as err:
                if not self.window_closed(err):
                    await self.check(target, err, f"{service}.{method}")
                    raise
            return items

        return await self._with_retries(attempt, f"{service}.{method}", self.deadline)

    def stream(self, service: str, method: str, request: Any, *, timeout: float) -> Any:
        """Open a server stream on the current target, without retries (the caller's
        watcher loop reconnects): an async iterable call; call.cancel() ends it."""
        return getattr(self._stub(service, self.target), method)(request, timeout=timeout, metadata=self.credentials)

    async def check(self, target: str, err: grpc.RpcError, what: str) -> None:
        """Connection.check, the probe on a worker thread (it blocks)."""
        if self.probe_due(target, err):
            self.found(target, await asyncio.to_thread(self.probe, target), what)

    async def _with_retries(self, attempt: Callable[[], Awaitable[T]], what: str, deadline: float) -> T:
        try:
            return await AsyncRetrying(**_policy(deadline))(attempt)
        except (RetryError, grpc.RpcError) as exc:
            raise _translate(exc, what, self.findings()) from None

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()

    async def __aenter__(self) -> "AsyncConnection":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
