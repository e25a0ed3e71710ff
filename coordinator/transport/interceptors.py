"""Cross-cutting RPC concerns in one place: shedding under overload, request-id-bound
logging, latency metrics, the refusal of requests that do not decode, and who is
calling and whether they may (transport.auth), with agent secrets replaced by their
hashes, before any handler runs and so before anything is proposed.

Kept out of the servicers so every handler gets the same log context and the same
metric labels without repeating them.
"""
from __future__ import annotations

import asyncio
import time
from typing import Callable

import grpc
import structlog
from google.protobuf.message import DecodeError

from coordinator import tracing
from coordinator.api.metadata import REASON_METADATA_KEY
from coordinator.core.errors import Rejection
from coordinator.core.ids import MAX_REQUEST_ID_CHARS
from coordinator.observability import metrics
from coordinator.transport import auth
from coordinator.transport.admission import WORK_OF_METHOD, Admission, refuse
from coordinator.transport.auth import Authorizer
from coordinator.transport.status_map import abort_with

log = structlog.get_logger("raftpoint.rpc")


class RequestInterceptor(grpc.aio.ServerInterceptor):
    """RPC latency by method and status code; the request id bound to every log line
    the handler emits, and refused requests logged with their reason code and text."""

    def __init__(self, admission: Admission | None = None, authorizer: Authorizer | None = None,
                 authenticated: Callable[[str], None] | None = None) -> None:
        # Wrapped once per method: building handlers on every call was a measurable
        # share of a small RPC's cost.
        self._wrapped: dict[str, grpc.RpcMethodHandler | None] = {}
        self.admission = admission
        # None: the insecure development mode, every caller admitted.
        self.authorizer = authorizer
        # Told the peer of every call that passed authentication (the connection front
        # counts its connection as proven).
        self.authenticated = authenticated

    async def intercept_service(self, continuation, details):
        try:
            return self._wrapped[details.method]
        except KeyError:
            pass
        handler = await continuation(details)
        wrapped = handler
        method = details.method.rsplit("/", 1)[-1]
        work = WORK_OF_METHOD.get(method)
        checks = _Checks(method, self.authorizer, guarded=details.method.startswith(auth.GUARDED_SERVICES),
                         authenticated=self.authenticated)
        if handler is not None and handler.unary_unary is not None:
            inner = _unary(method, handler.unary_unary, checks)
            if self.admission is not None and work is not None:
                inner = _admitted(self.admission, work, inner)
            wrapped = grpc.unary_unary_rpc_method_handler(
                inner, request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer)
        elif handler is not None and handler.unary_stream is not None:
            stream = _stream(method, handler.unary_stream, checks)
            if self.admission is not None and work is not None:
                stream = _admitted_stream(self.admission, work, stream)
            wrapped = grpc.unary_stream_rpc_method_handler(
                stream, request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer)
        elif handler is not None and handler.stream_stream is not None:
            session = _bidi(method, handler.stream_stream, checks)
            if self.admission is not None and work is not None:
                session = _admitted_stream(self.admission, work, session)
            wrapped = grpc.stream_stream_rpc_method_handler(
                session, request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer)
        if handler is not None:
            self._wrapped[details.method] = wrapped
        return wrapped


class Undecodable:
    """What a request that is not a valid message of its type decodes to.

    gRPC answers a deserializer's exception with UNKNOWN and logs a traceback per
    request; a client's bad bytes are its own error, so they become this value and
    the handler refuses it with INVALID_ARGUMENT instead."""

    request_id = ""

    def __init__(self, error: str) -> None:
        self.error = error


def _tolerant(deserializer):
    if deserializer is None:
        return None

    def decode(data: bytes):
        try:
            return deserializer(data)
        except DecodeError as exc:
            return Undecodable(str(exc))
    return decode


class _Checks:
    """One method's checks of a request: decodable, authorized (when auth is on),
    secrets sealed."""

    def __init__(self, method: str, authorizer: Authorizer | None, guarded: bool,
                 authenticated: Callable[[str], None] | None = None) -> None:
        self.method, self.authorizer, self.guarded = method, authorizer, guarded
        self.authenticated = authenticated

    async def __call__(self, request, context: grpc.aio.ServicerContext) -> None:
        if isinstance(request, Undecodable):
            await abort_with(context, Rejection.invalid("request", f"does not decode: {request.error}"))
        if not self.guarded:
            return
        try:
            auth.admit_into_context(self.authorizer, self.method, request, context)
        except Rejection as r:
            await abort_with(context, r)
        self._passed(context)

    def _passed(self, context: grpc.aio.ServicerContext) -> None:
        if self.authenticated is not None:
            self.authenticated(context.peer())

    async def open_session(self, context: grpc.aio.ServicerContext) -> None:
        """Refuse a session without an identity (when auth is on); give its frames the
        check their unary calls get. Streams of other services (reflection) stay open."""
        if not self.guarded:
            return
        try:
            auth.open_session(self.authorizer, context)
        except Rejection as r:
            await abort_with(context, r)
        self._passed(context)


class _Observed:
    """One RPC's log context and latency sample, shared by unary and streaming handlers."""

    def __init__(self, method: str, request, context: grpc.aio.ServicerContext) -> None:
        self.method, self.context = method, context
        self.started = time.perf_counter()
        self.code = "OK"
        # Cut to the longest valid request id: a request that carries a 4 MB one is
        # refused, and must not make every log line of its refusal 4 MB long.
        request_id = getattr(request, "request_id", "")[:MAX_REQUEST_ID_CHARS]
        structlog.contextvars.bind_contextvars(rpc=method, request_id=request_id or None)

    def __enter__(self) -> "_Observed":
        return self

    def __exit__(self, exc_type, exc: BaseException | None, tb) -> None:
        if isinstance(exc, asyncio.CancelledError):  # the client went away: not a refusal
            self.code = "CANCELLED"
        elif exc is not None:
            self.code = (self.context.code() or grpc.StatusCode.UNKNOWN).name
            if self.code != "UNAVAILABLE":
                reason = dict(self.context.trailing_metadata() or ()).get(REASON_METADATA_KEY)
                log.info("rpc refused", code=self.code, reason=reason, details=self.context.details())
        _latency(self.method, self.code).observe(time.perf_counter() - self.started)
        structlog.contextvars.clear_contextvars()


_LATENCY: dict[tuple[str, str], object] = {}


def _latency(method: str, code: str):
    """The latency histogram's child for (method, code), looked up once: labels() takes
    a lock and builds a key on every call, a measurable share of a heartbeat."""
    child = _LATENCY.get((method, code))
    if child is None:
        child = _LATENCY[(method, code)] = metrics.RPC_SECONDS.labels(method, code)
    return child


def _unary(method: str, inner, checks: _Checks):
    async def observed(request, context):
        with _Observed(method, request, context):
            await checks(request, context)
            return await inner(request, context)
    return observed


def _stream(method: str, inner, checks: _Checks):
    async def observed(request, context):
        with _Observed(method, request, context):
            await checks(request, context)
            async for item in inner(request, context):
                yield item
    return observed


def _admitted(admission: Admission, work, inner):
    """Refuse the call before any work when the node is overloaded; count it in flight
    otherwise. Refusals skip the log line and latency sample (SHED counts them): under
    overload there are thousands, and logging each would add to the overload."""
    async def admitted(request, context):
        tracing.arrived()
        shed = admission.check(work)
        if shed is not None:
            await refuse(context, shed)
        admission.rpcs_in_flight += 1
        try:
            return await inner(request, context)
        finally:
            admission.rpcs_in_flight -= 1
    return admitted


def _admitted_stream(admission: Admission, work, inner):
    """A new stream is admitted like a call; once open it idles and is not counted."""
    async def admitted(request, context):
        shed = admission.check(work)
        if shed is not None:
            await refuse(context, shed)
        async for item in inner(request, context):
            yield item
    return admitted


def _bidi(method: str, inner, checks: _Checks):
    """A session: undecodable frames reach the handler as Undecodable, which ends the
    session with INVALID_ARGUMENT (it knows no frame to answer). The caller must have an
    identity to open one; each frame's operation is then authorized on its own, as its
    unary call would be (auth.FRAME_CHECK, used by the session for every frame)."""
    async def observed(request_iterator, context):
        with _Observed(method, None, context):
            await checks.open_session(context)
            async for item in inner(request_iterator, context):
                yield item
    return observed
