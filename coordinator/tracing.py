"""OpenTelemetry traces when the `otel` extra is installed; nothing at all otherwise.

W3C trace context travels in gRPC metadata (sent by the agent library's connection,
read by opentelemetry-instrumentation-grpc's server interceptor), so an agent's trace
(LangSmith, its own OpenTelemetry spans) continues into the coordinator's server
span. Under a commit's server span the leader adds the stages it times itself
(`stage_spans`): admission (from the call's `arrived` mark through shedding,
authorization and validation), queued in the batcher, replicated until a majority
holds the entry, applied, and the answer's way back to the event loop. The store's
durable commit comes after the answer, in the background, for many commits at once:
each such commit is a span of its own (`linked`) with a link to every traced commit
it made durable. Calls an agent's session stream carries
send their context in the frame (`context_to_send`, `continued`), so they join the
agent's trace as unary calls do. The agent library adds spans for its
operations (checkpoint, restore, an order obeyed) and for the blob store's reads
and writes inside them.

Which exporter, if any, is the process's choice: `opentelemetry-instrument`
(opentelemetry-distro) sets one up from the standard OTEL_* variables, and
RAFTPOINT_TRACE_FILE=PATH (`configure_from_env`) writes finished spans to PATH as
JSON lines, for debugging and tests. Without a configured provider no interceptor is
installed, the API's spans are no-ops and `stage_spans` records nothing; nothing is
timed or kept for a call whose span does not record (`recording_span`).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime
import json
import os
import time
from typing import Any, ContextManager, Iterator, Mapping, Sequence

try:
    from opentelemetry import propagate, trace
except ImportError:  # the `otel` extra is not installed
    propagate = trace = None  # type: ignore[assignment]
try:  # the server's part of the extra (an agent needs only the API)
    from opentelemetry.instrumentation import grpc as otel_grpc
except ImportError:
    otel_grpc = None  # type: ignore[assignment]

TRACE_FILE_ENV = "RAFTPOINT_TRACE_FILE"
TRACER = "raftpoint"
Stage = tuple[str, int, int]  # (span name, start, end) in time.time_ns()
SpanRef = Any  # an OpenTelemetry SpanContext, kept to link to its span later
# time.time_ns() when the call being served reached admission; 0: not marked (`arrived`).
_ARRIVED_NS: contextvars.ContextVar[int] = contextvars.ContextVar("raftpoint_arrived_ns", default=0)


def configured() -> bool:
    """Whether this process exports traces: the extra is installed and a tracer provider
    was set. A client sends context from then on; a server made before then has no
    trace interceptor (set the provider first, as `opentelemetry-instrument` does).
    A process that does not trace pays one check per call."""
    if trace is None:
        return False
    return not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def server_interceptors() -> list[Any]:
    """For grpc.aio.server: the span of each call, continuing the caller's trace."""
    return [otel_grpc.aio_server_interceptor()] if otel_grpc is not None and configured() else []


def configure_from_env() -> None:
    """Export finished spans to RAFTPOINT_TRACE_FILE as JSON lines, when it is set
    (needs opentelemetry-sdk; a clear error when it is missing)."""
    path = os.environ.get(TRACE_FILE_ENV)
    if not path:
        return
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError:
        raise SystemExit(f"{TRACE_FILE_ENV} is set, but opentelemetry-sdk is not installed "
                         "(pip install 'raftpoint[otel]' opentelemetry-sdk)") from None
    try:
        out = open(path, "a", buffering=1, encoding="utf-8")  # one line per span, flushed as written
    except OSError as exc:
        raise SystemExit(f"{TRACE_FILE_ENV}={path}: {exc.strerror or exc}") from None
    exporter = ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\n")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


@dataclasses.dataclass(frozen=True)
class WrittenSpan:
    """A finished span as RAFTPOINT_TRACE_FILE holds it (ids in hex, without "0x")."""
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    start: datetime.datetime
    end: datetime.datetime
    links: tuple[tuple[str, str], ...]  # (trace id, span id) of each span it links to

    @property
    def ms(self) -> float:
        return (self.end - self.start).total_seconds() * 1000


def read_trace_file(path: str | os.PathLike[str]) -> list[WrittenSpan]:
    """The spans `configure_from_env` wrote to `path`, in the order they ended."""
    def hex_id(value: str | None) -> str:
        return (value or "").removeprefix("0x")
    spans = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            span = json.loads(line)
            spans.append(WrittenSpan(
                name=span["name"], trace_id=hex_id(span["context"]["trace_id"]),
                span_id=hex_id(span["context"]["span_id"]), parent_id=hex_id(span.get("parent_id")) or None,
                start=datetime.datetime.fromisoformat(span["start_time"]),
                end=datetime.datetime.fromisoformat(span["end_time"]),
                links=tuple((hex_id(link["context"]["trace_id"]), hex_id(link["context"]["span_id"]))
                            for link in span.get("links") or ())))
    return spans


def recording() -> bool:
    """Whether the current span records: timing stages is worth it only then."""
    return trace is not None and trace.get_current_span().is_recording()


def recording_span() -> SpanRef | None:
    """The current span's context when it records (what a later span links to); None
    otherwise, and then the caller times and keeps nothing for it."""
    if not recording():
        return None
    return trace.get_current_span().get_span_context()


def arrived() -> None:
    """Mark the call's arrival at admission (when its span records): its admission stage
    runs from here until its command is queued for a Raft entry. Each call and each
    session frame is served in a task of its own, so the mark is that call's alone."""
    if recording():
        _ARRIVED_NS.set(time.time_ns())


def arrived_ns() -> int:
    """The current call's `arrived` mark; 0 when there is none."""
    return _ARRIVED_NS.get()


def linked(name: str, spans: Sequence[SpanRef], **attributes: Any) -> ContextManager[Any]:
    """A span of its own (a new trace) around the block, linked to `spans`: work done
    later for calls that were traced, such as their store commit. Nothing when there are none."""
    if not spans or trace is None:
        return contextlib.nullcontext()
    return trace.get_tracer(TRACER).start_as_current_span(
        name, context=trace.set_span_in_context(trace.INVALID_SPAN), links=[trace.Link(s) for s in spans],
        attributes=attributes)


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[None]:
    """A span around the block, a child of the current one."""
    if trace is None:
        yield
        return
    with trace.get_tracer(TRACER).start_as_current_span(name, attributes=attributes):
        yield


def context_to_send() -> dict[str, str]:
    """The current trace context as W3C headers (traceparent, tracestate): a unary
    call's metadata, or a frame on an agent's session stream (which is not a call of
    its own). The client sends it itself, without OpenTelemetry's client interceptors:
    those wrap a stream call in a generator without cancel(), which the session's
    and the order watcher's streams need."""
    if not configured():
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


@contextlib.contextmanager
def continued(name: str, carrier: Mapping[str, str]) -> Iterator[None]:
    """A server span for work a message asked for, continuing the trace its sender's
    `context_to_send` gave; none when it gave none (the work stays under the stream's
    span: an untraced agent's keepalives make no spans of their own)."""
    if not configured() or not carrier:
        yield
        return
    with trace.get_tracer(TRACER).start_as_current_span(name, context=propagate.extract(dict(carrier)),
                                                        kind=trace.SpanKind.SERVER):
        yield


def stage_spans(stages: Sequence[Stage]) -> None:
    """Child spans of the current span for stages that are already over."""
    if not recording():
        return
    tracer = trace.get_tracer(TRACER)
    for name, start, end in stages:
        tracer.start_span(name, start_time=start).end(end_time=max(start, end))
