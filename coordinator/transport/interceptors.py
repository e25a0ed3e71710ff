"""Cross-cutting RPC concerns in one place: request-id-bound logging, latency metrics
and the refusal of requests that do not decode.

Kept out of the servicers so every handler gets the same log context and the same
metric labels without repeating them.
"""
from __future__ import annotations

import asyncio
import time

import grpc
import structlog
from google.protobuf.message import DecodeError

from coordinator.api.metadata import REASON_METADATA_KEY
from coordinator.core.errors import Rejection
from coordinator.core.ids import MAX_REQUEST_ID_CHARS
from coordinator.observability import metrics
from coordinator.transport.status_map import abort_with

log = structlog.get_logger("raftpoint.rpc")


class RequestInterceptor(grpc.aio.ServerInterceptor):
    """RPC latency by method and status code; the request id bound to every log line
    the handler emits, and refused requests logged with their reason code and text."""

    def __init__(self) -> None:
        # Wrapped once per method: building handlers on every call was a measurable
        # share of a small RPC's cost.
        self._wrapped: dict[str, grpc.RpcMethodHandler | None] = {}

    async def intercept_service(self, continuation, details):
        try:
            return self._wrapped[details.method]
        except KeyError:
            pass
        handler = await continuation(details)
        wrapped = handler
        method = details.method.rsplit("/", 1)[-1]
        if handler is not None and handler.unary_unary is not None:
            wrapped = grpc.unary_unary_rpc_method_handler(
                _unary(method, handler.unary_unary), request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer)
        elif handler is not None and handler.unary_stream is not None:
            wrapped = grpc.unary_stream_rpc_method_handler(
                _stream(method, handler.unary_stream), request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer)
        elif handler is not None and handler.stream_stream is not None:
            wrapped = grpc.stream_stream_rpc_method_handler(
                _bidi(method, handler.stream_stream), request_deserializer=_tolerant(handler.request_deserializer),
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


async def _refuse_undecodable(request, context: grpc.aio.ServicerContext) -> None:
    if isinstance(request, Undecodable):
        await abort_with(context, Rejection.invalid("request", f"does not decode: {request.error}"))


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
        metrics.RPC_SECONDS.labels(self.method, self.code).observe(time.perf_counter() - self.started)
        structlog.contextvars.clear_contextvars()


def _unary(method: str, inner):
    async def observed(request, context):
        with _Observed(method, request, context):
            await _refuse_undecodable(request, context)
            return await inner(request, context)
    return observed


def _stream(method: str, inner):
    async def observed(request, context):
        with _Observed(method, request, context):
            await _refuse_undecodable(request, context)
            async for item in inner(request, context):
                yield item
    return observed


def _bidi(method: str, inner):
    """A session: undecodable frames reach the handler as Undecodable, which ends the
    session with INVALID_ARGUMENT (it knows no frame to answer)."""
    async def observed(request_iterator, context):
        with _Observed(method, None, context):
            async for item in inner(request_iterator, context):
                yield item
    return observed
