"""structlog JSON logs on stderr; stdlib logging (pysyncobj, grpc) goes the same way.

Why one pipeline: a node's log is read by machines (kubectl logs | jq, Loki), so
every line -- ours and third-party stdlib loggers like pysyncobj's -- must be one
JSON object with the same keys: timestamp, level, logger, event, and the
request_id bound for the RPC being served. The request id lives in a contextvar
(structlog.contextvars), so it follows the request across awaits without being
passed to every call, and it is merged into stdlib records too.
"""
from __future__ import annotations

import contextlib
import logging
import sys
from typing import Iterator

import structlog

_SHARED = [
    structlog.contextvars.merge_contextvars,
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.stdlib.add_logger_name,
]


def configure_logging(level: str = "info") -> None:
    """Route structlog and stdlib logging to one JSON handler on stderr at `level`."""
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*_SHARED, structlog.stdlib.ExtraAdder()],  # extra={...} of stdlib calls
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, structlog.processors.JSONRenderer()],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    structlog.configure(
        processors=[*_SHARED, structlog.stdlib.PositionalArgumentsFormatter(), structlog.processors.format_exc_info,
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


@contextlib.contextmanager
def request_context(request_id: str | None, **values: object) -> Iterator[None]:
    """Bind request_id (and more) to every log line inside the block, then unbind.

    For work outside the gRPC interceptor (leader loop, CLI) that acts on behalf of
    one request; restoring the previous values keeps nested uses correct.
    """
    tokens = structlog.contextvars.bind_contextvars(request_id=request_id, **values)
    try:
        yield
    finally:
        structlog.contextvars.reset_contextvars(**tokens)
